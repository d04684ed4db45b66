"""Message ids: the offset id (store host + commit-log offset) and the client's unique id."""

from __future__ import annotations

import functools
import ipaddress
import itertools
import os
import socket
import struct
import threading
import time
from dataclasses import dataclass

from .errors import FerryMQError

_ADDR_V4 = struct.Struct(">4sIq")


class MessageIdError(FerryMQError, ValueError):
    def __init__(self, msg_id: str, reason: str, *, kind: str = "offset message id") -> None:
        super().__init__(f"{msg_id!r} is not a valid {kind}: {reason}")
        self.msg_id = msg_id
        self.reason = reason
        self.kind = kind


@dataclass(frozen=True, slots=True)
class OffsetMessageId:
    host: str
    port: int
    offset: int

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"


@functools.lru_cache(maxsize=4096)
def packed_ip(host: str) -> bytes:
    """Parsing an address costs microseconds and every decoded message needs its broker's."""
    return ipaddress.ip_address(host).packed


def create_offset_msg_id(host: str, port: int, commit_log_offset: int) -> str:
    """hex(ip 4 bytes | port int32 | offset int64), upper case, as RocketMQ's MessageDecoder."""
    ip = packed_ip(host)
    if len(ip) == 4:
        return _ADDR_V4.pack(ip, port, commit_log_offset).hex().upper()
    return (ip + struct.pack(">Iq", port, commit_log_offset)).hex().upper()


def decode_offset_msg_id(msg_id: str) -> OffsetMessageId:
    try:
        raw = bytes.fromhex(msg_id)
    except ValueError as exc:
        raise MessageIdError(msg_id, "not hexadecimal") from exc
    if len(raw) == 16:
        ip_raw, port, offset = _ADDR_V4.unpack(raw)
        host = socket.inet_ntoa(ip_raw)
    elif len(raw) == 28:
        port, offset = struct.unpack(">Iq", raw[16:])
        host = str(ipaddress.IPv6Address(raw[:16]))
    else:
        raise MessageIdError(msg_id, f"{len(raw)} bytes, expected 16 or 28")
    # A unique id (UNIQ_KEY) has the same length; where an offset id has its port, it has the
    # producer's pid and class-loader hash, which decode to a port no broker listens on.
    if not 0 < port <= 0xFFFF:
        raise MessageIdError(msg_id, f"port {port} is out of range (a unique id, not an offset id?)")
    if offset < 0:
        raise MessageIdError(msg_id, f"negative commit-log offset {offset}")
    return OffsetMessageId(host, port, offset)


def is_offset_msg_id(msg_id: str) -> bool:
    try:
        decode_offset_msg_id(msg_id)
    except MessageIdError:
        return False
    return True


@dataclass(frozen=True, slots=True)
class UniqMessageId:
    """The parts of a unique id (RocketMQ's MessageClientIDSetter): the producer's address,
    pid and class-loader hash, ms since the start of the month it was made in, and a counter."""

    ip: str
    pid: int
    instance: int
    month_ms: int
    counter: int


def decode_uniq_id(msg_id: str) -> UniqMessageId:
    try:
        raw = bytes.fromhex(msg_id)
    except ValueError as exc:
        raise MessageIdError(msg_id, "not hexadecimal", kind="unique message id") from exc
    if len(raw) not in (16, 28):
        raise MessageIdError(
            msg_id, f"{len(raw)} bytes, expected 16 or 28", kind="unique message id"
        )
    ip_len = len(raw) - 12
    ip = str(ipaddress.ip_address(raw[:ip_len]))
    pid, instance, month_ms, counter = struct.unpack(">HIIH", raw[ip_len:])
    return UniqMessageId(ip, pid, instance, month_ms, counter)


def is_uniq_id(msg_id: str) -> bool:
    try:
        decode_uniq_id(msg_id)
    except MessageIdError:
        return False
    return True


class UniqIdGenerator:
    """RocketMQ's MessageClientIDSetter layout: ip(4) pid(2) instance(4) | ms since the start
    of the month (4) counter(2), hex upper case. Unique per process without coordination."""

    def __init__(self, ip: str = "127.0.0.1") -> None:
        try:
            ip_raw = ipaddress.ip_address(ip).packed[-4:]
        except ValueError:
            ip_raw = b"\x7f\x00\x00\x01"
        self._prefix = (
            ip_raw + struct.pack(">H", os.getpid() & 0xFFFF) + struct.pack(">I", id(self) & 0xFFFFFFFF)
        ).hex().upper()
        self._lock = threading.Lock()  # only for the month's roll
        # next() of a count is one C call the interpreter lock makes atomic: no lock per id.
        self._counter = itertools.count(1)
        self._month_start_ms = 0
        self._next_month_ms = 0
        # The millisecond last seen and the id's head for it: at tens of thousands of ids a
        # second most ids share their millisecond, and formatting its 8 hex digits again was
        # a third of an id's cost. One tuple, so a reader never sees a head of another ms.
        self._head: tuple[int, str] = (-1, "")

    def _roll_month(self, now_ms: int) -> None:
        t = time.gmtime(now_ms / 1000)
        start = int(time.mktime((t.tm_year, t.tm_mon, 1, 0, 0, 0, 0, 0, -1)) * 1000)
        year, month = (t.tm_year + 1, 1) if t.tm_mon == 12 else (t.tm_year, t.tm_mon + 1)
        self._month_start_ms = start
        self._next_month_ms = int(time.mktime((year, month, 1, 0, 0, 0, 0, 0, -1)) * 1000)

    def _head_for(self, now_ms: int) -> str:
        """The prefix and the 4-byte time since the month's start, in hex (no struct)."""
        head = self._head
        if head[0] != now_ms:
            with self._lock:
                if now_ms >= self._next_month_ms or now_ms < self._month_start_ms:
                    self._roll_month(now_ms)
                head = (now_ms,
                        f"{self._prefix}{(now_ms - self._month_start_ms) & 0xFFFFFFFF:08X}")
            self._head = head
        return head[1]

    def next_id(self) -> str:
        now_ms = int(time.time() * 1000)
        return f"{self._head_for(now_ms)}{next(self._counter) & 0xFFFF:04X}"

    def next_ids(self, n: int) -> list[str]:
        """`n` ids with one clock read (a batch's messages)."""
        head = self._head_for(int(time.time() * 1000))
        counter = self._counter
        return [f"{head}{next(counter) & 0xFFFF:04X}" for _ in range(n)]


_default_generator: UniqIdGenerator | None = None


def uniq_id_generator() -> UniqIdGenerator:
    """The process's generator (made on first use: after a fork, in the child)."""
    global _default_generator
    if _default_generator is None:
        _default_generator = UniqIdGenerator()
    return _default_generator


def _forget_generator() -> None:
    # A child inherits its parent's generator: its pid in the ids and its counter, so both
    # would make the same ids (and its lock, held if another thread was taking an id).
    global _default_generator
    _default_generator = None


os.register_at_fork(after_in_child=_forget_generator)


def new_uniq_id() -> str:
    return uniq_id_generator().next_id()


def new_uniq_ids(n: int) -> list[str]:
    return uniq_id_generator().next_ids(n)
