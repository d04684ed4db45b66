"""Typed failures of the remoting layer. Each carries the fields a caller needs to act on it."""

from __future__ import annotations

from typing import ClassVar

from ..common.errors import FerryMQError, request_name


class RemotingError(FerryMQError):
    """Base of every remoting failure. A lost or slow connection is worth another attempt
    (RocketMQ's producer retries on RemotingException too)."""

    retriable: ClassVar[bool] = True


class FrameError(RemotingError):
    """Bytes on a connection that are not a valid frame."""

    retriable: ClassVar[bool] = False  # the same bytes would be refused again

    def __init__(self, reason: str, *, recoverable: bool) -> None:
        # recoverable: the frame's boundaries were intact, so the stream can go on after it.
        super().__init__(reason)
        self.reason = reason
        self.recoverable = recoverable


class FrameTooLargeError(FrameError):
    def __init__(self, size: int, limit: int) -> None:
        super().__init__(f"frame of {size} bytes exceeds the limit of {limit}", recoverable=False)
        self.size = size
        self.limit = limit


class RemotingConnectError(RemotingError):
    def __init__(self, addr: str, reason: str) -> None:
        super().__init__(f"connect to {addr} failed: {reason}")
        self.addr = addr
        self.reason = reason


class RemotingTimeoutError(RemotingError):
    def __init__(self, addr: str, code: int, timeout: float) -> None:
        super().__init__(f"{request_name(code)} to {addr} timed out after {timeout:.3f}s")
        self.addr = addr
        self.code = code
        self.timeout = timeout


class RemotingClosedError(RemotingError):
    """The connection closed before the answer came, or was closed when the request was made."""

    def __init__(self, addr: str, code: int | None = None) -> None:
        what = request_name(code) if code is not None else "connection"
        super().__init__(f"{what}: connection to {addr} is closed")
        self.addr = addr
        self.code = code
