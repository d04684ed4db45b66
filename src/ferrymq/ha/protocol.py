"""Frames of the replication stream (docs/replication.md, "The replication stream").

    length: u32 (bytes after this field) | type: u8 | payload

Pure encode/decode plus an incremental reader; anything malformed raises HaProtocolError, on
which the connection (and nothing else) is closed."""

from __future__ import annotations

import enum
import json
import struct
from dataclasses import dataclass
from typing import Any

from ..common.errors import FerryMQError

MAX_FRAME = 64 << 20
_HEAD = struct.Struct(">IB")
_U64 = struct.Struct(">Q")
_U64x2 = struct.Struct(">QQ")
Buffer = bytes | bytearray | memoryview


class FrameType(enum.IntEnum):
    HELLO = 1
    REPORT = 2
    WELCOME = 16
    DATA = 17
    BEAT = 18
    META = 19  # the master's topic config changed: copy it now, not at the next interval


class HaProtocolError(FerryMQError):
    retriable = False

    def __init__(self, reason: str) -> None:
        super().__init__(f"replication stream: {reason}")
        self.reason = reason


@dataclass(frozen=True, slots=True)
class Hello:
    broker_name: str
    broker_id: int
    addr: str
    max_offset: int
    epochs: list[tuple[int, int]]


@dataclass(frozen=True, slots=True)
class Welcome:
    truncate_to: int
    epochs: list[tuple[int, int]]
    master_addr: str
    start_at: int  # where the stream starts: the slave's end after the cut, or the master's first offset


@dataclass(frozen=True, slots=True)
class Data:
    pos: int
    next_pos: int
    records: bytes


@dataclass(frozen=True, slots=True)
class Beat:
    master_end: int
    lag_ms: int  # how old the oldest record this slave lacks is, as the master sees it


@dataclass(frozen=True, slots=True)
class Meta:
    pass


Frame = Hello | int | Welcome | Data | Beat | Meta  # int: a REPORT's offset


def _frame(kind: FrameType, payload: bytes) -> bytes:
    return _HEAD.pack(len(payload) + 1, kind) + payload


def _json(obj: dict[str, Any]) -> bytes:
    return json.dumps(obj, separators=(",", ":")).encode()


def encode_hello(h: Hello) -> bytes:
    return _frame(FrameType.HELLO, _json({
        "brokerName": h.broker_name, "brokerId": h.broker_id, "addr": h.addr,
        "maxOffset": h.max_offset, "epochs": [list(e) for e in h.epochs]}))


def encode_report(offset: int) -> bytes:
    return _frame(FrameType.REPORT, _U64.pack(offset))


def encode_welcome(w: Welcome) -> bytes:
    return _frame(FrameType.WELCOME, _json({
        "truncateTo": w.truncate_to, "epochs": [list(e) for e in w.epochs],
        "masterAddr": w.master_addr, "startAt": w.start_at}))


def encode_data_head(pos: int, next_pos: int, size: int) -> bytes:
    """The frame head and positions; the records follow as a separate write (no copy)."""
    return _HEAD.pack(size + 17, FrameType.DATA) + _U64x2.pack(pos, next_pos)


def encode_beat(b: Beat) -> bytes:
    return _frame(FrameType.BEAT, _U64x2.pack(b.master_end, b.lag_ms))


def encode_meta() -> bytes:
    return _frame(FrameType.META, b"")


def _epochs(raw: Any) -> list[tuple[int, int]]:
    if not isinstance(raw, list):
        raise HaProtocolError("epochs is not a list")
    out = []
    for item in raw:
        if not (isinstance(item, list) and len(item) == 2 and all(isinstance(v, int) for v in item)):
            raise HaProtocolError(f"bad epoch entry {item!r}")
        out.append((item[0], item[1]))
    return out


def _load(payload: Buffer) -> dict[str, Any]:
    try:
        obj = json.loads(bytes(payload))
    except ValueError as exc:
        raise HaProtocolError(f"payload is not JSON ({exc})") from None
    if not isinstance(obj, dict):
        raise HaProtocolError("payload is not a JSON object")
    return obj


def _int(obj: dict[str, Any], key: str) -> int:
    v = obj.get(key)
    if not isinstance(v, int) or isinstance(v, bool) or v < -1:
        raise HaProtocolError(f"{key} is missing or not an integer")
    return v


def _str(obj: dict[str, Any], key: str) -> str:
    v = obj.get(key)
    if not isinstance(v, str):
        raise HaProtocolError(f"{key} is missing or not a string")
    return v


def decode_payload(kind: int, payload: Buffer) -> Frame:
    if kind == FrameType.REPORT or kind == FrameType.BEAT:
        want = 8 if kind == FrameType.REPORT else 16
        if len(payload) != want:
            raise HaProtocolError(f"{FrameType(kind).name} payload of {len(payload)} bytes")
        if kind == FrameType.REPORT:
            return int(_U64.unpack(payload)[0])
        end, lag = _U64x2.unpack(payload)
        return Beat(end, lag)
    if kind == FrameType.META:
        if payload:
            raise HaProtocolError("META carries no payload")
        return Meta()
    if kind == FrameType.DATA:
        if len(payload) < 16:
            raise HaProtocolError("DATA payload shorter than its positions")
        pos, nxt = _U64x2.unpack_from(payload)
        if nxt < pos + len(payload) - 16:
            raise HaProtocolError("DATA next position inside its records")
        return Data(pos, nxt, bytes(payload[16:]))  # the one copy of the records
    if kind == FrameType.HELLO:
        o = _load(payload)
        return Hello(_str(o, "brokerName"), _int(o, "brokerId"), _str(o, "addr"),
                     _int(o, "maxOffset"), _epochs(o.get("epochs")))
    if kind == FrameType.WELCOME:
        o = _load(payload)
        return Welcome(_int(o, "truncateTo"), _epochs(o.get("epochs")), _str(o, "masterAddr"),
                       _int(o, "startAt"))
    raise HaProtocolError(f"unknown frame type {kind}")


class FrameReader:
    """Feed bytes, take whole frames. A slave reads up to a megabyte of DATA at a time: the
    frames of a read are decoded from views of it, so its records are copied once (into
    their Data), and only a frame cut by the read's end waits in a buffer."""

    def __init__(self, max_frame: int = MAX_FRAME) -> None:
        self._buf = bytearray()
        self._max = max_frame

    def feed(self, data: bytes) -> list[Frame]:
        buf = self._buf
        if buf:
            buf += data
            src: bytes | bytearray = buf
        else:
            src = data
        out: list[Frame] = []
        o = 0
        n = len(src)
        try:
            with memoryview(src) as view:
                while n - o >= _HEAD.size:
                    length, kind = _HEAD.unpack_from(src, o)
                    if length < 1 or length > self._max:
                        raise HaProtocolError(f"frame length {length} (limit {self._max})")
                    if kind not in _KINDS:
                        raise HaProtocolError(f"unknown frame type {kind}")
                    end = o + 4 + length
                    if n < end:
                        break
                    with view[o + 5 : end] as payload:  # released even when kept by a traceback
                        out.append(decode_payload(kind, payload))
                    o = end
        except HaProtocolError:
            self._buf = bytearray()  # the stream is broken; nothing of it is kept
            raise
        if src is buf:
            del buf[:o]
        elif o < n:
            buf += data[o:]
        return out


_KINDS = frozenset(FrameType)
