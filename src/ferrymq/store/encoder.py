"""Turning StoreMessages into commit-log bytes, in two steps so a batch is checked before it
touches any state: `prepare` validates and does the per-message work that does not depend on
the position (properties text, CRC, sizes); `Batch.encode` fixes offsets and timestamps and
produces the one buffer the batch is written with, its consume-queue entries and index keys.

The record layout is ferrymq.common.codec's (RocketMQ's stored message); the IPv4 fast path
packs the fixed fields with one precompiled struct, other hosts go through codec.encode_record.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Callable, Sequence
from functools import lru_cache

from ..common.codec import (
    MAX_PROPERTIES_BYTES,
    MAX_TOPIC_BYTES,
    MESSAGE_MAGIC_CODE,
    MIN_RECORD_SIZE,
    SYSFLAG_BORNHOST_V6,
    SYSFLAG_STOREHOST_V6,
    encode_record,
    pack_host,
)
from ..common.names import SCHEDULE_TOPIC, java_string_hash
from ..common.props import (
    KEY_SEPARATOR,
    PROPERTY_DELAY_TIME_LEVEL,
    PROPERTY_KEYS,
    PROPERTY_TAGS,
    PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX,
)
from .config import parse_address
from .consumequeue import ENTRY
from .model import AppendedMessage, PutStatus, StoreMessage

# Same layout as codec's IPv4 record head: TOTALSIZE .. BODY length.
_FIXED_V4 = struct.Struct(">iiiiiqqiq4sIq4sIiqi")
_I16 = struct.Struct(">h")
_HOST_FLAGS = ~(SYSFLAG_BORNHOST_V6 | SYSFLAG_STOREHOST_V6)


class IllegalMessage(Exception):
    def __init__(self, status: PutStatus, reason: str) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason


@lru_cache(maxsize=8192)
def tag_code(tags: str) -> int:
    return java_string_hash(tags)


@lru_cache(maxsize=1024)
def _pack_born_host(host: str, port: int) -> bytes:
    return pack_host(host, port)


def _born_host_bytes(value: tuple[str, int] | str) -> bytes:
    host, port = parse_address(value) if isinstance(value, str) else value
    try:
        return _pack_born_host(host, port)
    except ValueError:
        # A host name, not an address: RocketMQ stores the resolved address; we have none.
        return _pack_born_host("0.0.0.0", port)


class Prepared:
    """One message after prepare: everything but its offsets and store time."""

    __slots__ = (
        "body",
        "born",
        "born_ts",
        "crc",
        "delay_level",
        "flag",
        "keys",
        "prep_tx",
        "props_raw",
        "qid",
        "reconsume",
        "size",
        "sys_flag",
        "tag",
        "tail",
        "topic",
        "topic_raw",
    )

    body: bytes
    born: bytes
    crc: int
    delay_level: int
    flag: int
    keys: list[str] | None
    prep_tx: int
    qid: int
    reconsume: int
    size: int
    sys_flag: int
    tag: int
    tail: bytes
    topic: str
    born_ts: int
    props_raw: bytes
    topic_raw: bytes


class Encoder:
    def __init__(self, store_host: tuple[str, int], max_message_size: int,
                 delay_levels_ms: tuple[int, ...]) -> None:
        self.store_host_raw = pack_host(*store_host)
        self.store_v4 = len(self.store_host_raw) == 8
        self.store_ip = self.store_host_raw[:4]
        self.store_port = int.from_bytes(self.store_host_raw[4:8], "big")
        # offset message id = hex(store ip, port, offset): the prefix never changes.
        self.msg_id_prefix = self.store_host_raw.hex().upper()
        self.max_message_size = max_message_size
        self.delay_levels_ms = delay_levels_ms
        self._topics: dict[str, bytes] = {}

    def offset_msg_id(self, phys: int) -> str:
        return f"{self.msg_id_prefix}{phys:016X}"

    def _topic_bytes(self, topic: str) -> bytes:
        raw = self._topics.get(topic)
        if raw is None:
            raw = topic.encode()
            if not raw or len(raw) > MAX_TOPIC_BYTES:
                raise IllegalMessage(PutStatus.MESSAGE_ILLEGAL,
                                     f"topic is {len(raw)} bytes; must be 1..{MAX_TOPIC_BYTES}")
            if len(self._topics) < 100_000:
                self._topics[topic] = raw
        return raw

    def prepare(self, msgs: Sequence[StoreMessage]) -> list[Prepared]:
        out: list[Prepared] = []
        for m in msgs:
            p = Prepared()
            props = m.properties
            if props:
                text = "".join([f"{k}\x01{v}\x02" for k, v in props.items()])
                # One count per separator instead of a scan of every name and value.
                n = len(props)
                if text.count("\x01") != n or text.count("\x02") != n:
                    raise IllegalMessage(PutStatus.MESSAGE_ILLEGAL,
                                         "a property name or value contains \\x01 or \\x02")
                praw = text.encode()
                if len(praw) > MAX_PROPERTIES_BYTES:
                    raise IllegalMessage(PutStatus.PROPERTIES_SIZE_EXCEEDED,
                                         f"properties are {len(praw)} bytes; at most "
                                         f"{MAX_PROPERTIES_BYTES}")
                tags = props.get(PROPERTY_TAGS)
                p.tag = tag_code(tags) if tags else 0
                uniq = props.get(PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX)
                keys_text = props.get(PROPERTY_KEYS)
                keys = [k for k in keys_text.split(KEY_SEPARATOR) if k] if keys_text else []
                if uniq:
                    keys.append(uniq)
                p.keys = keys or None
                level = props.get(PROPERTY_DELAY_TIME_LEVEL)
                p.delay_level = int(level) if level and level.isdigit() else 0
            else:
                praw = b""
                p.tag = 0
                p.keys = None
                p.delay_level = 0
            topic = m.topic
            traw = self._topic_bytes(topic)
            body = m.body
            born = _born_host_bytes(m.born_host)
            size = MIN_RECORD_SIZE + len(body) + len(traw) + len(praw)
            if len(born) != 8:
                size += 12
            if not self.store_v4:
                size += 12
            if size > self.max_message_size:
                raise IllegalMessage(PutStatus.MESSAGE_ILLEGAL,
                                     f"message of {size} bytes exceeds max_message_size "
                                     f"{self.max_message_size}")
            p.topic = topic
            p.topic_raw = traw
            p.props_raw = praw
            p.qid = m.queue_id
            p.flag = m.flag
            p.body = body
            p.sys_flag = m.sys_flag & _HOST_FLAGS
            p.born_ts = m.born_timestamp
            p.born = born
            p.reconsume = m.reconsume_times
            p.prep_tx = m.prepared_transaction_offset
            p.crc = zlib.crc32(body) & 0x7FFFFFFF
            p.size = size
            p.tail = b"".join((bytes((len(traw),)), traw, _I16.pack(len(praw)), praw))
            out.append(p)
        return out

    def schedule_tag(self, p: Prepared, store_ts: int) -> int:
        """RocketMQ keeps a delayed message's delivery time as its tag code."""
        levels = self.delay_levels_ms
        level = min(max(p.delay_level, 1), len(levels))
        return store_ts + levels[level - 1]


class Encoded:
    __slots__ = ("appended", "data", "entries", "keys")

    def __init__(self, data: bytes, entries: dict[tuple[str, int], list[bytes]],
                 appended: list[AppendedMessage],
                 keys: list[tuple[str, list[str], int]]) -> None:
        self.data = data
        self.entries = entries
        self.appended = appended
        self.keys = keys


def encode(enc: Encoder, batch: list[Prepared], pos: int, store_ts: int,
           next_offset: Callable[[tuple[str, int]], int]) -> Encoded:
    """Fix positions and produce the batch's bytes. `next_offset` gives a queue's next offset
    before this batch; offsets within the batch continue from it."""
    parts: list[bytes] = []
    entries: dict[tuple[str, int], list[bytes]] = {}
    counters: dict[tuple[str, int], int] = {}
    appended: list[AppendedMessage] = []
    keys: list[tuple[str, list[str], int]] = []
    prefix = enc.msg_id_prefix
    sip, sport, v4 = enc.store_ip, enc.store_port, enc.store_v4
    fixed = _FIXED_V4.pack
    entry = ENTRY.pack
    phys = pos
    for p in batch:
        q = (p.topic, p.qid)
        qo = counters.get(q)
        if qo is None:
            qo = next_offset(q)
            entries[q] = []
        counters[q] = qo + 1
        size = p.size
        born = p.born
        if v4 and len(born) == 8:
            parts.append(fixed(size, MESSAGE_MAGIC_CODE, p.crc, p.qid, p.flag, qo, phys,
                               p.sys_flag, p.born_ts, born[:4], int.from_bytes(born[4:], "big"),
                               store_ts, sip, sport, p.reconsume, p.prep_tx, len(p.body)))
            parts.append(p.body)
            parts.append(p.tail)
        else:
            parts.append(encode_record(
                topic=p.topic_raw, queue_id=p.qid, flag=p.flag, body=p.body,
                properties=p.props_raw, sys_flag=p.sys_flag, born_timestamp=p.born_ts,
                born_host=born, store_timestamp=store_ts, store_host=enc.store_host_raw,
                reconsume_times=p.reconsume, prepared_transaction_offset=p.prep_tx,
                queue_offset=qo, physical_offset=phys, crc=p.crc))
        tag = enc.schedule_tag(p, store_ts) if p.topic == SCHEDULE_TOPIC else p.tag
        entries[q].append(entry(phys, size, tag))
        if p.keys:
            keys.append((p.topic, p.keys, phys))
        appended.append(AppendedMessage(phys, size, qo, store_ts, f"{prefix}{phys:016X}"))
        phys += size
    return Encoded(b"".join(parts), entries, appended, keys)
