"""JSON as RocketMQ's Java side writes it.

RocketMQ serialises maps with fastjson, which writes non-string keys bare: a route's
`brokerAddrs` is `{0:"127.0.0.1:10911"}` and consume stats key an object by an object
(`{{"brokerName":"b","queueId":0,"topic":"t"}:{...}}`). Neither is JSON, yet every Java client
expects it, and a Python client talking to a real RocketMQ broker must read it. `loads` accepts
both standard JSON and these forms; object keys that are not strings become an int (bare
numbers) or a `FrozenKey` (objects/arrays), so callers can rebuild typed keys.
"""

from __future__ import annotations

import json
from typing import Any

from .errors import FerryMQError

_decoder = json.JSONDecoder()
_WS = " \t\n\r"


class JsonxError(FerryMQError, ValueError):
    def __init__(self, position: int, reason: str) -> None:
        super().__init__(f"malformed JSON at {position}: {reason}")
        self.position = position
        self.reason = reason


class FrozenKey(tuple[tuple[str, Any], ...]):
    """A hashable stand-in for an object used as a map key."""

    def as_dict(self) -> dict[str, Any]:
        return dict(self)


def _freeze(value: Any) -> Any:
    if isinstance(value, dict):
        return FrozenKey(sorted((str(k), _freeze(v)) for k, v in value.items()))
    if isinstance(value, list):
        return tuple(_freeze(v) for v in value)
    return value


def loads(text: str | bytes) -> Any:
    if isinstance(text, bytes | bytearray):
        text = bytes(text).decode("utf-8")
    try:
        return json.loads(text)
    except ValueError:
        pass
    value, end = _parse(text, _skip(text, 0))
    end = _skip(text, end)
    if end != len(text):
        raise JsonxError(end, "trailing characters")
    return value


def _skip(text: str, i: int) -> int:
    n = len(text)
    while i < n and text[i] in _WS:
        i += 1
    return i


def _parse(text: str, i: int) -> tuple[Any, int]:
    if i >= len(text):
        raise JsonxError(i, "unexpected end")
    ch = text[i]
    if ch == "{":
        return _parse_object(text, i + 1)
    if ch == "[":
        return _parse_array(text, i + 1)
    try:
        return _decoder.raw_decode(text, i)
    except ValueError as exc:
        raise JsonxError(i, str(exc)) from exc


def _parse_object(text: str, i: int) -> tuple[dict[Any, Any], int]:
    out: dict[Any, Any] = {}
    i = _skip(text, i)
    if i < len(text) and text[i] == "}":
        return out, i + 1
    while True:
        i = _skip(text, i)
        key, i = _parse(text, i)
        key = _freeze(key)
        i = _skip(text, i)
        if i >= len(text) or text[i] != ":":
            raise JsonxError(i, "expected ':'")
        value, i = _parse(text, _skip(text, i + 1))
        out[key] = value
        i = _skip(text, i)
        if i < len(text) and text[i] == ",":
            i += 1
            continue
        if i < len(text) and text[i] == "}":
            return out, i + 1
        raise JsonxError(i, "expected ',' or '}'")


def _parse_array(text: str, i: int) -> tuple[list[Any], int]:
    out: list[Any] = []
    i = _skip(text, i)
    if i < len(text) and text[i] == "]":
        return out, i + 1
    while True:
        value, i = _parse(text, _skip(text, i))
        out.append(value)
        i = _skip(text, i)
        if i < len(text) and text[i] == ",":
            i += 1
            continue
        if i < len(text) and text[i] == "]":
            return out, i + 1
        raise JsonxError(i, "expected ',' or ']'")


def dumps(value: Any) -> str:
    """Write like fastjson: int keys bare, FrozenKey/dict-like keys as objects."""
    return _dump(value)


def dumps_bytes(value: Any) -> bytes:
    return _dump(value).encode("utf-8")


def _dump(value: Any) -> str:
    if isinstance(value, FrozenKey):
        return _dump(value.as_dict())
    if isinstance(value, dict):
        parts = []
        for k, v in value.items():
            if isinstance(k, str):
                key = json.dumps(k, ensure_ascii=False)
            elif isinstance(k, bool) or k is None:
                key = json.dumps(str(k))
            elif isinstance(k, int):
                key = str(k)
            else:
                key = _dump(k)
            parts.append(f"{key}:{_dump(v)}")
        return "{" + ",".join(parts) + "}"
    if isinstance(value, list | tuple):
        return "[" + ",".join(_dump(v) for v in value) + "]"
    return json.dumps(value, ensure_ascii=False)
