"""RocketMQ's stored-message layout, written down once: the bytes of a commit-log record,
which are also the bytes of a PULL_MESSAGE response body, and of a SEND_BATCH_MESSAGE entry.

Record (big-endian): TOTALSIZE i32 | MAGICCODE i32 | BODYCRC i32 | QUEUEID i32 | FLAG i32 |
QUEUEOFFSET i64 | PHYSICALOFFSET i64 | SYSFLAG i32 | BORNTIMESTAMP i64 | BORNHOST (ip, port) |
STORETIMESTAMP i64 | STOREHOST (ip, port) | RECONSUMETIMES i32 | PREPAREDTRANSACTIONOFFSET i64 |
BODY (i32 length) | TOPIC (i8 length) | PROPERTIES (i16 length).

A host is 8 bytes (IPv4 + port) or 20 (IPv6 + port), flagged in SYSFLAG. Positions after
BORNHOST are given for IPv4 hosts; each IPv6 host before a field moves it by IPV6_EXTRA.
Both the pure-Python and the compiled codec take every position from here."""

from __future__ import annotations

import ipaddress
import socket
import struct
import zlib

from ..errors import FerryMQError
from ..ids import packed_ip

MESSAGE_MAGIC_CODE = -626843481  # 0xDAA320A7, RocketMQ's V1 record
BLANK_MAGIC_CODE = -875286124  # 0xCBD43194, fills the end of a segment

SYSFLAG_COMPRESSED = 0x1
SYSFLAG_MULTI_TAGS = 0x2
SYSFLAG_TRANSACTION_PREPARED = 0x4
SYSFLAG_TRANSACTION_COMMIT = 0x8
SYSFLAG_TRANSACTION_ROLLBACK = 0xC
SYSFLAG_BORNHOST_V6 = 0x10
SYSFLAG_STOREHOST_V6 = 0x20
HOST_FLAGS = SYSFLAG_BORNHOST_V6 | SYSFLAG_STOREHOST_V6

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
# With an IPv4 born host (add IPV6_EXTRA after an IPv6 one):
POS_STORETIMESTAMP_V4 = 56
POS_STOREHOST_V4 = 64
# With both hosts IPv4 (add IPV6_EXTRA per IPv6 host):
POS_RECONSUMETIMES_V4 = 72
POS_PREPARED_V4 = 76
POS_BODYLEN_V4 = 84
POS_BODY_V4 = 88

HOST_V4_SIZE = 8
HOST_V6_SIZE = 20
IPV6_EXTRA = HOST_V6_SIZE - HOST_V4_SIZE
MIN_RECORD_SIZE = 91  # every fixed field, IPv4 hosts, empty body, topic and properties
MAX_TOPIC_BYTES = 127
MAX_PROPERTIES_BYTES = 32767

SIZE_AND_MAGIC = struct.Struct(">ii")  # what starts a record and a segment's blank end
HEAD = struct.Struct(">iiiiiqqiq")  # TOTALSIZE .. BORNTIMESTAMP
FIXED_V4 = struct.Struct(">iiiiiqqiq4sIq4sIiqi")  # TOTALSIZE .. BODY length, IPv4 hosts
TAIL = struct.Struct(">iqi")  # RECONSUMETIMES, PREPAREDTRANSACTIONOFFSET, BODY length
HOST_V4 = struct.Struct(">4sI")
HOST_V6 = struct.Struct(">16sI")
I16 = struct.Struct(">h")
I32 = struct.Struct(">i")
I64 = struct.Struct(">q")
assert HEAD.size == POS_BORNHOST and FIXED_V4.size == POS_BODY_V4

# SEND_BATCH_MESSAGE entry: TOTALSIZE MAGIC(0) BODYCRC(0) FLAG BODYLEN | BODY | PROPERTIES (i16)
BATCH_HEAD = struct.Struct(">iiiii")
BATCH_MIN_ENTRY = BATCH_HEAD.size + 2

# Consume-queue entry: commit-log offset i64, size i32, tag code i64.
CQ_ENTRY = struct.Struct(">qiq")

# A key-index entry to make, as the encoder hands it to the store's key index (in memory only,
# native order): key hash (CRC32 of "topic#key" & 0x7FFFFFFF), commit-log offset, store time.
# The encoder, which knows neither, writes the record's offset within its batch and 0; the
# index adds the batch's position and time.
KEY_ENTRY = struct.Struct("=qqq")

# Properties: name \x01 value \x02, every pair followed by \x02.
NAME_VALUE_SEPARATOR = 1
PROPERTY_SEPARATOR = 2


class MessageDecodeError(FerryMQError, ValueError):
    """Bytes that are not a well-formed stored message (or batch entry)."""

    def __init__(self, position: int, reason: str) -> None:
        super().__init__(f"bad message record at byte {position}: {reason}")
        self.position = position
        self.reason = reason


# What batch_to_messages tells of a batch's properties besides its messages: some entry has a
# TRAN_MSG property (a half message, which a batch may not carry), some has a property whose
# name starts with TIMER_ (a timer request, which the put must look at).
MARK_TRANSACTION = 1
MARK_TIMER = 2
# Seen by the codec's own loops only: an entry asking for a delay level, which the batch is
# refused for (so never in the marks a caller is given).
MARK_DELAY = 4


class RecordEncodeError(FerryMQError, ValueError):
    """A message the store cannot write; `status` names the PutStatus to answer with."""

    def __init__(self, status: str, reason: str) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason


def born_host_size(sys_flag: int) -> int:
    return HOST_V6_SIZE if sys_flag & SYSFLAG_BORNHOST_V6 else HOST_V4_SIZE


def store_host_size(sys_flag: int) -> int:
    return HOST_V6_SIZE if sys_flag & SYSFLAG_STOREHOST_V6 else HOST_V4_SIZE


def store_timestamp_position(sys_flag: int) -> int:
    return POS_STORETIMESTAMP_V4 + (IPV6_EXTRA if sys_flag & SYSFLAG_BORNHOST_V6 else 0)


def body_length_position(sys_flag: int) -> int:
    return (POS_BODYLEN_V4 + (IPV6_EXTRA if sys_flag & SYSFLAG_BORNHOST_V6 else 0)
            + (IPV6_EXTRA if sys_flag & SYSFLAG_STOREHOST_V6 else 0))


def record_size(body_len: int, topic_len: int, props_len: int, v6_hosts: int = 0) -> int:
    return MIN_RECORD_SIZE + body_len + topic_len + props_len + IPV6_EXTRA * v6_hosts


def body_crc(body: bytes | bytearray | memoryview) -> int:
    """RocketMQ keeps the CRC32 masked to 31 bits (UtilAll.crc32)."""
    return zlib.crc32(body) & 0x7FFFFFFF


def pack_host(host: str, port: int) -> bytes:
    ip = packed_ip(host)
    return (HOST_V4 if len(ip) == 4 else HOST_V6).pack(ip, port)


def unpack_host(raw: bytes | bytearray | memoryview) -> str:
    raw = bytes(raw)
    if len(raw) == HOST_V4_SIZE:
        ip, port = HOST_V4.unpack(raw)
        return f"{socket.inet_ntoa(ip)}:{port}"
    ip, port = HOST_V6.unpack(raw)
    return f"{ipaddress.IPv6Address(ip)}:{port}"


def offset_msg_id(store_host: bytes | bytearray | memoryview, phys: int) -> str:
    """RocketMQ's offset message id: hex(store ip, port, commit-log offset), upper case."""
    return f"{bytes(store_host).hex().upper()}{phys & 0xFFFFFFFFFFFFFFFF:016X}"
