"""Frame codec for RocketMQ remoting, as pure functions.

Frame: int32 length (of what follows) | int32 (serialize type << 24 | header length) | header |
body. Headers come as JSON (type 0) or ROCKETMQ binary (type 1); both are read and written.
The header codec is compiled when built (_cheader.pyx; pure-Python twin _header_py.py,
forced by FERRYMQ_NO_EXTENSIONS=1).
"""

from __future__ import annotations

import struct
from types import ModuleType
from typing import TYPE_CHECKING

from ..common.codes import SerializeType
from ..common.speedups import choose, interface
from . import _header_py
from ._header_py import ext_value
from .command import RemotingCommand
from .errors import FrameError, FrameTooLargeError

DEFAULT_MAX_FRAME_SIZE = 16 * 1024 * 1024

_I32 = struct.Struct(">i")
_PREFIX = struct.Struct(">ii")

header_impl: ModuleType = choose("ferrymq.remoting._cheader", _header_py)
if TYPE_CHECKING:
    from ._header_py import (
        decode_binary_header,
        decode_json_header,
        encode_binary_header,
        encode_json_header,
    )
else:
    globals().update(interface(header_impl, _header_py))

__all__ = [
    "DEFAULT_MAX_FRAME_SIZE",
    "FrameSplitter",
    "decode_binary_header",
    "decode_frame",
    "decode_json_header",
    "encode_binary_header",
    "encode_frame",
    "encode_frame_parts",
    "encode_json_header",
    "ext_value",
    "header_impl",
]


def encode_frame_parts(cmd: RemotingCommand) -> tuple[bytes, bytes]:
    """(length prefix + header, body): written with writelines so a large body is not copied."""
    if cmd.serialize_type == SerializeType.ROCKETMQ:
        header = encode_binary_header(cmd)
    else:
        header = encode_json_header(cmd)
    body = cmd.body or b""
    prefix = _PREFIX.pack(4 + len(header) + len(body), (int(cmd.serialize_type) << 24) | len(header))
    return prefix + header, body


def encode_frame(cmd: RemotingCommand) -> bytes:
    head, body = encode_frame_parts(cmd)
    return head + body


def decode_frame(frame: bytes | bytearray | memoryview, *, body_view: bool = False
                 ) -> RemotingCommand:
    """Decode one frame without its leading length field. The body is the one copy made of
    a frame's bytes (a bytes object the command owns); the header is parsed in place. With
    `body_view` the body is a view of `frame` instead, no copy: for a caller that hands the
    frame over (a puller reading large answers into a buffer of their own), as the Spark
    reader's copy of a pulled megabyte was a tenth of its time."""
    view = memoryview(frame)
    if len(view) < 4:
        raise FrameError(f"frame of {len(view)} bytes has no header length", recoverable=True)
    (word,) = _I32.unpack_from(view, 0)
    stype, header_len = (word >> 24) & 0xFF, word & 0xFFFFFF
    if header_len > len(view) - 4:
        raise FrameError(
            f"header length {header_len} exceeds the frame ({len(view) - 4} bytes)",
            recoverable=True,
        )
    header = view[4 : 4 + header_len]
    if stype == SerializeType.JSON:
        cmd = decode_json_header(header)
    elif stype == SerializeType.ROCKETMQ:
        cmd = decode_binary_header(header)
    else:
        raise FrameError(f"unknown serialize type {stype}", recoverable=True)
    body = view[4 + header_len :]
    if not len(body):
        cmd.body = None
    elif body_view:
        cmd.body = body  # type: ignore[assignment]  # a view where bytes are read (buffer protocol)
    else:
        cmd.body = bytes(body)
    return cmd


def frame_length(data: bytes | bytearray | memoryview, pos: int,
                 max_frame_size: int = DEFAULT_MAX_FRAME_SIZE) -> int:
    """The length field at `pos` (what follows it), checked: FrameError (unrecoverable: the
    stream cannot be resynchronised) for a length outside 4..max_frame_size."""
    (length,) = _I32.unpack_from(data, pos)
    if length < 4:
        raise FrameError(f"frame length {length} is too small", recoverable=False)
    if length > max_frame_size:
        raise FrameTooLargeError(length, max_frame_size)
    return int(length)


class FrameSplitter:
    """Cuts a byte stream into frames. Raises FrameTooLargeError (unrecoverable: the stream
    cannot be resynchronised) for a length outside 4..max_frame_size.

    Frames are memoryviews (without the length field): those that arrived whole in one read
    are slices of that read's bytes, not copies; only a frame split across reads is gathered,
    once, into a buffer of its own, which the returned view then owns."""

    __slots__ = ("_buf", "max_frame_size")

    def __init__(self, max_frame_size: int = DEFAULT_MAX_FRAME_SIZE) -> None:
        self._buf = bytearray()
        self.max_frame_size = max_frame_size

    @property
    def buffered(self) -> int:
        return len(self._buf)

    def _length(self, data: bytes | bytearray | memoryview, pos: int) -> int:
        return frame_length(data, pos, self.max_frame_size)

    def feed(self, data: bytes | bytearray | memoryview) -> list[memoryview]:
        frames: list[memoryview] = []
        view = memoryview(data)
        buf = self._buf
        if buf:  # complete the frame begun by earlier reads
            if len(buf) < 4:
                take = 4 - len(buf)
                buf += view[:take]
                view = view[take:]
                if len(buf) < 4:
                    return frames
            total = 4 + self._length(buf, 0)
            take = total - len(buf)
            buf += view[:take]
            view = view[take:]
            if len(buf) < total:
                return frames
            frames.append(memoryview(buf)[4:])
            self._buf = bytearray()
        pos, n = 0, len(view)
        while n - pos >= 4:
            length = self._length(view, pos)
            if n - pos - 4 < length:
                break
            frames.append(view[pos + 4 : pos + 4 + length])
            pos += 4 + length
        if pos < n:
            self._buf = bytearray(view[pos:])
        return frames
