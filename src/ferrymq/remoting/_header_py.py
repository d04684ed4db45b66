"""The pure-Python implementation of the remoting header codec (JSON and ROCKETMQ binary).
remoting/_cheader.pyx is its compiled twin; remoting/codec.py selects one."""

from __future__ import annotations

import json
import struct
from typing import Any

from ..common.codes import LanguageCode, SerializeType
from .command import RemotingCommand
from .errors import FrameError

IMPLEMENTATION = "python"
# What the compiled twin provides too.
INTERFACE = ("encode_json_header", "encode_binary_header", "decode_json_header",
             "decode_binary_header")

_I32 = struct.Struct(">i")
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
