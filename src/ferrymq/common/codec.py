"""RocketMQ's stored-message layout: the bytes of a commit-log record, which are also the bytes
of a PULL_MESSAGE response body. Pure functions; the store and the clients share them.

Layout (big-endian): TOTALSIZE i32 | MAGICCODE i32 | BODYCRC i32 | QUEUEID i32 | FLAG i32 |
QUEUEOFFSET i64 | PHYSICALOFFSET i64 | SYSFLAG i32 | BORNTIMESTAMP i64 | BORNHOST (ip, port) |
STORETIMESTAMP i64 | STOREHOST (ip, port) | RECONSUMETIMES i32 | PREPAREDTRANSACTIONOFFSET i64 |
BODY (i32 length) | TOPIC (i8 length) | PROPERTIES (i16 length).
"""

from __future__ import annotations

import ipaddress
import socket
import struct
import zlib
from collections.abc import Iterable

from .ids import create_offset_msg_id, packed_ip
from .message import MessageBatchItem, MessageExt
from .props import (
    PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX,
    properties_to_string,
    string_to_properties,
)

MESSAGE_MAGIC_CODE = -626843481  # 0xDAA320A7, RocketMQ's V1 record
BLANK_MAGIC_CODE = -875286124  # 0xCBD43194, fills the end of a segment

SYSFLAG_COMPRESSED = 0x1
SYSFLAG_MULTI_TAGS = 0x2
SYSFLAG_TRANSACTION_PREPARED = 0x4
SYSFLAG_TRANSACTION_COMMIT = 0x8
SYSFLAG_TRANSACTION_ROLLBACK = 0xC
SYSFLAG_BORNHOST_V6 = 0x10
SYSFLAG_STOREHOST_V6 = 0x20

# Field positions within a record whose born host is IPv4 (the store patches these in place).
POS_TOTALSIZE = 0
POS_MAGIC = 4
POS_BODYCRC = 8
POS_QUEUEID = 12
POS_FLAG = 16
POS_QUEUEOFFSET = 20
POS_PHYSICALOFFSET = 28
POS_SYSFLAG = 36
POS_BORNTIMESTAMP = 40
POS_BORNHOST = 48
POS_STORETIMESTAMP_V4 = 56
MIN_RECORD_SIZE = 91  # every fixed field, IPv4 hosts, empty body, topic and properties
MAX_TOPIC_BYTES = 127
MAX_PROPERTIES_BYTES = 32767

_FIXED_V4 = struct.Struct(">iiiiiqqiq4sIq4sIiqi")
FIXED_V4_SIZE = _FIXED_V4.size  # 88
_HEAD = struct.Struct(">iiiiiqqiq")  # up to and including BORNTIMESTAMP: 48 bytes
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")
_I16 = struct.Struct(">h")
_HOST_V4 = struct.Struct(">4sI")
_HOST_V6 = struct.Struct(">16sI")
_TAIL = struct.Struct(">iqi")  # RECONSUMETIMES, PREPAREDTRANSACTIONOFFSET, BODY length
_BATCH_HEAD = struct.Struct(">iiiii")  # TOTALSIZE MAGIC BODYCRC FLAG BODYLEN


class MessageDecodeError(ValueError):
    """Bytes that are not a well-formed stored message."""

    def __init__(self, position: int, reason: str) -> None:
        super().__init__(f"bad message record at byte {position}: {reason}")
        self.position = position
        self.reason = reason


def body_crc(body: bytes) -> int:
    """RocketMQ keeps the CRC32 masked to 31 bits (UtilAll.crc32)."""
    return zlib.crc32(body) & 0x7FFFFFFF


def pack_host(host: str, port: int) -> bytes:
    ip = packed_ip(host)
    return (_HOST_V4 if len(ip) == 4 else _HOST_V6).pack(ip, port)


def unpack_host(raw: bytes | memoryview) -> str:
    raw = bytes(raw)
    if len(raw) == 8:
        ip, port = _HOST_V4.unpack(raw)
        return f"{socket.inet_ntoa(ip)}:{port}"
    ip, port = _HOST_V6.unpack(raw)
    return f"{ipaddress.IPv6Address(ip)}:{port}"


def record_size(body_len: int, topic_len: int, props_len: int, v6_hosts: int = 0) -> int:
    return MIN_RECORD_SIZE + body_len + topic_len + props_len + 12 * v6_hosts


def encode_record(
    *,
    topic: bytes,
    queue_id: int,
    flag: int,
    body: bytes,
    properties: bytes,
    sys_flag: int,
    born_timestamp: int,
    born_host: bytes,
    store_timestamp: int,
    store_host: bytes,
    reconsume_times: int = 0,
    prepared_transaction_offset: int = 0,
    queue_offset: int = 0,
    physical_offset: int = 0,
    crc: int | None = None,
) -> bytes:
    """Encode one record. Hosts are already packed (pack_host); the host flags in sys_flag are
    set from their lengths so they can never disagree with the bytes."""
    if len(topic) > MAX_TOPIC_BYTES:
        raise ValueError(f"topic is {len(topic)} bytes; at most {MAX_TOPIC_BYTES}")
    if len(properties) > MAX_PROPERTIES_BYTES:
        raise ValueError(f"properties are {len(properties)} bytes; at most {MAX_PROPERTIES_BYTES}")
    sys_flag &= ~(SYSFLAG_BORNHOST_V6 | SYSFLAG_STOREHOST_V6)
    if len(born_host) == 20:
        sys_flag |= SYSFLAG_BORNHOST_V6
    if len(store_host) == 20:
        sys_flag |= SYSFLAG_STOREHOST_V6
    crc = body_crc(body) if crc is None else crc
    v6 = (len(born_host) == 20) + (len(store_host) == 20)
    total = record_size(len(body), len(topic), len(properties), v6)
    if v6 == 0:
        head = _FIXED_V4.pack(
            total, MESSAGE_MAGIC_CODE, crc, queue_id, flag, queue_offset, physical_offset,
            sys_flag, born_timestamp, born_host[:4], _u32(born_host[4:]), store_timestamp,
            store_host[:4], _u32(store_host[4:]), reconsume_times, prepared_transaction_offset,
            len(body),
        )
    else:
        head = b"".join((
            _HEAD.pack(total, MESSAGE_MAGIC_CODE, crc, queue_id, flag, queue_offset,
                       physical_offset, sys_flag, born_timestamp),
            born_host, _I64.pack(store_timestamp), store_host,
            _TAIL.pack(reconsume_times, prepared_transaction_offset, len(body)),
        ))
    return b"".join((head, body, bytes((len(topic),)), topic, _I16.pack(len(properties)), properties))


def _u32(raw: bytes) -> int:
    return int.from_bytes(raw, "big")


def store_timestamp_position(sys_flag: int) -> int:
    return POS_STORETIMESTAMP_V4 + (12 if sys_flag & SYSFLAG_BORNHOST_V6 else 0)


def decode_record(
    buf: bytes | bytearray | memoryview,
    pos: int = 0,
    *,
    broker: str = "",
    decompress: bool = True,
    check_crc: bool = False,
) -> MessageExt:
    """Decode the record starting at `pos`. Raises MessageDecodeError on anything malformed."""
    mv = memoryview(buf)
    end_of_buf = len(mv)
    if end_of_buf - pos < MIN_RECORD_SIZE:
        raise MessageDecodeError(pos, "shorter than the smallest possible record")
    (total, magic, crc, queue_id, flag, queue_offset, phys, sys_flag, born_ts) = _HEAD.unpack_from(
        mv, pos
    )
    if magic != MESSAGE_MAGIC_CODE:
        raise MessageDecodeError(pos, f"magic code {magic & 0xFFFFFFFF:#x} is not a message's")
    if total < MIN_RECORD_SIZE or pos + total > end_of_buf:
        raise MessageDecodeError(pos, f"total size {total} does not fit the buffer")
    end = pos + total
    p = pos + _HEAD.size
    bh_len = 20 if sys_flag & SYSFLAG_BORNHOST_V6 else 8
    born_host = mv[p : p + bh_len]
    p += bh_len
    (store_ts,) = _I64.unpack_from(mv, p)
    p += 8
    sh_len = 20 if sys_flag & SYSFLAG_STOREHOST_V6 else 8
    store_host_raw = bytes(mv[p : p + sh_len])
    p += sh_len
    reconsume, prepared, body_len = _TAIL.unpack_from(mv, p)
    p += _TAIL.size
    if body_len < 0 or p + body_len + 3 > end:
        raise MessageDecodeError(pos, f"body length {body_len} overruns the record")
    body = bytes(mv[p : p + body_len])
    p += body_len
    topic_len = mv[p]
    p += 1
    if p + topic_len + 2 > end:
        raise MessageDecodeError(pos, "topic overruns the record")
    topic = bytes(mv[p : p + topic_len]).decode("utf-8", "replace")
    p += topic_len
    (props_len,) = _I16.unpack_from(mv, p)
    p += 2
    if props_len < 0 or p + props_len != end:
        raise MessageDecodeError(pos, "properties do not end where the record ends")
    props = string_to_properties(bytes(mv[p : p + props_len]).decode("utf-8", "replace"))
    if check_crc and body_crc(body) != crc:
        raise MessageDecodeError(pos, "body CRC mismatch")
    if decompress and sys_flag & SYSFLAG_COMPRESSED:
        try:
            body = zlib.decompress(body)
        except zlib.error as exc:
            raise MessageDecodeError(pos, f"compressed body does not inflate: {exc}") from exc
    store_host = unpack_host(store_host_raw)
    host, _, port = store_host.rpartition(":")
    offset_msg_id = create_offset_msg_id(host, int(port), phys)
    return MessageExt(
        topic,
        body,
        properties=props,
        flag=flag,
        queue_id=queue_id,
        queue_offset=queue_offset,
        commit_log_offset=phys,
        sys_flag=sys_flag,
        born_timestamp=born_ts,
        born_host=unpack_host(born_host),
        store_timestamp=store_ts,
        store_host=store_host,
        reconsume_times=reconsume,
        prepared_transaction_offset=prepared,
        body_crc=crc,
        store_size=total,
        msg_id=props.get(PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX) or offset_msg_id,
        offset_msg_id=offset_msg_id,
        broker=broker,
    )


def decode_records(
    buf: bytes | bytearray | memoryview, *, broker: str = "", decompress: bool = True
) -> list[MessageExt]:
    """Decode a run of records, e.g. a PULL_MESSAGE body."""
    out: list[MessageExt] = []
    pos = 0
    n = len(buf)
    while pos < n:
        if n - pos < 8:
            raise MessageDecodeError(pos, "trailing bytes after the last record")
        msg = decode_record(buf, pos, broker=broker, decompress=decompress)
        out.append(msg)
        pos += msg.store_size
    return out


def encode_batch(items: Iterable[MessageBatchItem]) -> bytes:
    """SEND_BATCH_MESSAGE body: per message TOTALSIZE, MAGIC(0), BODYCRC(0), FLAG, BODY,
    PROPERTIES (i16 length), as RocketMQ's MessageDecoder.encodeMessages."""
    parts: list[bytes] = []
    for item in items:
        props = properties_to_string(item.properties).encode("utf-8")
        total = _BATCH_HEAD.size + len(item.body) + 2 + len(props)
        parts.append(_BATCH_HEAD.pack(total, 0, 0, item.flag, len(item.body)))
        parts.append(item.body)
        parts.append(_I16.pack(len(props)))
        parts.append(props)
    return b"".join(parts)


def decode_batch(buf: bytes | bytearray | memoryview) -> list[MessageBatchItem]:
    mv = memoryview(buf)
    out: list[MessageBatchItem] = []
    pos = 0
    n = len(mv)
    while pos < n:
        if n - pos < _BATCH_HEAD.size + 2:
            raise MessageDecodeError(pos, "truncated batch entry")
        total, _magic, _crc, flag, body_len = _BATCH_HEAD.unpack_from(mv, pos)
        if total < _BATCH_HEAD.size + 2 or pos + total > n or body_len < 0:
            raise MessageDecodeError(pos, f"batch entry size {total} does not fit")
        p = pos + _BATCH_HEAD.size
        if p + body_len + 2 > pos + total:
            raise MessageDecodeError(pos, "batch entry body overruns the entry")
        body = bytes(mv[p : p + body_len])
        p += body_len
        (props_len,) = _I16.unpack_from(mv, p)
        p += 2
        if props_len < 0 or p + props_len != pos + total:
            raise MessageDecodeError(pos, "batch entry properties do not end with the entry")
        props = string_to_properties(bytes(mv[p : p + props_len]).decode("utf-8", "replace"))
        out.append(MessageBatchItem(flag, body, props))
        pos += total
    return out
