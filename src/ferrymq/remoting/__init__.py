"""RocketMQ remoting: frame codec, connections, server and client."""

from .client import ClientConfig, RemotingClient, split_addr
from .codec import DEFAULT_MAX_FRAME_SIZE, FrameSplitter, decode_frame, encode_frame
from .command import RemotingCommand
from .connection import Connection
from .errors import (
    FrameError,
    FrameTooLargeError,
    RemotingClosedError,
    RemotingConnectError,
    RemotingError,
    RemotingTimeoutError,
)
from .server import RemotingServer, ServerConfig

__all__ = [
    "DEFAULT_MAX_FRAME_SIZE",
    "ClientConfig",
    "Connection",
    "FrameError",
    "FrameSplitter",
    "FrameTooLargeError",
    "RemotingClient",
    "RemotingClosedError",
    "RemotingCommand",
    "RemotingConnectError",
    "RemotingError",
    "RemotingServer",
    "RemotingTimeoutError",
    "ServerConfig",
    "decode_frame",
    "encode_frame",
    "split_addr",
]
