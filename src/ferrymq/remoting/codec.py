"""Frame codec for RocketMQ remoting, as pure functions.

Frame: int32 length (of what follows) | int32 (serialize type << 24 | header length) | header |
body. Headers come as JSON (type 0) or ROCKETMQ binary (type 1); both are read and written.
"""

from __future__ import annotations

import json
import struct
from typing import Any

from ..common.codes import LanguageCode, SerializeType
from .command import RemotingCommand
from .errors import FrameError, FrameTooLargeError

DEFAULT_MAX_FRAME_SIZE = 16 * 1024 * 1024

_I32 = struct.Struct(">i")
_PREFIX = struct.Struct(">ii")
_BIN_FIXED = struct.Struct(">hbhii")  # code, language, version, opaque, flag
_BIN_I16 = struct.Struct(">h")
_LANG_NAMES = {int(c): c.name for c in LanguageCode}
_LANG_CODES = {c.name: int(c) for c in LanguageCode}
_OTHER = int(LanguageCode.OTHER)
_JSON_ENCODER = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"))


# --- header encoding -----------------------------------------------------------------------
def encode_json_header(cmd: RemotingCommand) -> bytes:
    header: dict[str, Any] = {
        "code": cmd.code,
        "language": _LANG_NAMES.get(int(cmd.language), "OTHER"),
        "version": cmd.version,
        "opaque": cmd.opaque,
        "flag": cmd.flag,
    }
    if cmd.remark is not None:
        header["remark"] = cmd.remark
    if cmd.ext_fields:
        header["extFields"] = cmd.ext_fields
    header["serializeTypeCurrentRPC"] = "JSON"
    return _JSON_ENCODER.encode(header).encode()


def encode_binary_header(cmd: RemotingCommand) -> bytes:
    parts = [_BIN_FIXED.pack(cmd.code, int(cmd.language), cmd.version, cmd.opaque, cmd.flag)]
    remark = cmd.remark.encode() if cmd.remark else b""
    parts.append(_I32.pack(len(remark)))
    parts.append(remark)
    ext = bytearray()
    for key, value in cmd.ext_fields.items():
        k, v = key.encode(), str(value).encode()
        ext += _BIN_I16.pack(len(k))
        ext += k
        ext += _I32.pack(len(v))
        ext += v
    parts.append(_I32.pack(len(ext)))
    parts.append(bytes(ext))
    return b"".join(parts)


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


# --- header decoding -----------------------------------------------------------------------
def ext_value(value: object) -> str | None:
    """One extFields value as the string Java would have sent.

    ali-ons writes numbers and booleans unquoted and leaves null fields in; Java writes strings.
    """
    if value is None:
        return None
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return str(int(value)) if value.is_integer() else repr(value)
    return json.dumps(value, separators=(",", ":"))


def _language(value: object) -> int:
    if isinstance(value, bool):
        raise FrameError("header field language is not a language", recoverable=True)
    if isinstance(value, int):
        return value
    if isinstance(value, str):
        member = LanguageCode.__members__.get(value)
        return int(member) if member is not None else int(LanguageCode.OTHER)
    if value is None:
        return int(LanguageCode.OTHER)
    raise FrameError("header field language is not a language", recoverable=True)


def _int_field(header: dict[str, Any], name: str, default: int | None = None) -> int:
    value = header.get(name, default)
    if isinstance(value, bool) or not isinstance(value, int):
        if isinstance(value, str) and value.lstrip("-").isdigit():
            return int(value)
        raise FrameError(f"header field {name} is missing or not an integer", recoverable=True)
    return value


def decode_json_header(data: bytes | memoryview) -> RemotingCommand:
    try:
        return _decode_json_header(data)
    except RecursionError:
        # json gives up on deep nesting by running out of stack; to a peer it is one more
        # malformed header, answered as such (not an exception escaping data_received).
        raise FrameError("JSON header is nested too deeply", recoverable=True) from None


def _decode_json_header(data: bytes | memoryview) -> RemotingCommand:
    try:
        header = json.loads(bytes(data))
    except (UnicodeDecodeError, ValueError) as exc:
        raise FrameError(f"JSON header does not parse: {exc}", recoverable=True) from None
    if not isinstance(header, dict):
        raise FrameError("JSON header is not an object", recoverable=True)
    raw_ext = header.get("extFields") or {}
    if not isinstance(raw_ext, dict):
        raise FrameError("header field extFields is not an object", recoverable=True)
    ext: dict[str, str] = {}
    for key, value in raw_ext.items():
        # Java peers send strings only; other values are ali-ons's numbers and booleans.
        if type(value) is str:
            ext[key] = value
        else:
            text = ext_value(value)
            if text is not None:
                ext[str(key)] = text
    remark = header.get("remark")
    code, opaque, flag = header.get("code"), header.get("opaque", 0), header.get("flag", 0)
    version = header.get("version", 0)
    if not (type(code) is int and type(opaque) is int and type(flag) is int and type(version) is int):
        code = _int_field(header, "code")
        opaque = _int_field(header, "opaque", 0)
        flag = _int_field(header, "flag", 0)
        version = _int_field(header, "version", 0)
    language = header.get("language")
    return RemotingCommand(
        code=code,
        opaque=opaque,
        flag=flag,
        remark=remark if isinstance(remark, str) else None,
        ext_fields=ext,
        language=_LANG_CODES.get(language, _OTHER) if type(language) is str else _language(language),
        version=version,
        serialize_type=SerializeType.JSON,
    )


def decode_binary_header(data: bytes | memoryview) -> RemotingCommand:
    view = memoryview(data)
    try:
        code, language, version, opaque, flag = _BIN_FIXED.unpack_from(view, 0)
        pos = _BIN_FIXED.size
        (remark_len,) = _I32.unpack_from(view, pos)
        pos += 4
        if remark_len < 0 or pos + remark_len > len(view):
            raise FrameError("binary header remark overruns the header", recoverable=True)
        remark = bytes(view[pos : pos + remark_len]).decode() if remark_len else None
        pos += remark_len
        (ext_len,) = _I32.unpack_from(view, pos)
        pos += 4
        end = pos + ext_len
        if ext_len < 0 or end > len(view):
            raise FrameError("binary header extFields overrun the header", recoverable=True)
        ext: dict[str, str] = {}
        while pos < end:
            (klen,) = _BIN_I16.unpack_from(view, pos)
            pos += 2
            key = bytes(view[pos : pos + klen]).decode()
            pos += klen
            (vlen,) = _I32.unpack_from(view, pos)
            pos += 4
            if klen < 0 or vlen < 0 or pos + vlen > end:
                raise FrameError("binary header field overruns extFields", recoverable=True)
            ext[key] = bytes(view[pos : pos + vlen]).decode()
            pos += vlen
    except struct.error as exc:
        raise FrameError(f"binary header is truncated: {exc}", recoverable=True) from None
    except UnicodeDecodeError as exc:
        raise FrameError(f"binary header text is not UTF-8: {exc}", recoverable=True) from None
    return RemotingCommand(
        code=code,
        opaque=opaque,
        flag=flag,
        remark=remark,
        ext_fields=ext,
        language=language,
        version=version,
        serialize_type=SerializeType.ROCKETMQ,
    )


def decode_frame(frame: bytes | bytearray | memoryview) -> RemotingCommand:
    """Decode one frame without its leading length field. The body is the one copy made of
    a frame's bytes (a bytes object the command owns); the header is parsed in place."""
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
    cmd.body = bytes(body) if len(body) else None
    return cmd


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
        (length,) = _I32.unpack_from(data, pos)
        if length < 4:
            raise FrameError(f"frame length {length} is too small", recoverable=False)
        if length > self.max_frame_size:
            raise FrameTooLargeError(length, self.max_frame_size)
        return int(length)

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
