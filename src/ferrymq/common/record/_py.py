"""The pure-Python implementation of the record codec (see ferrymq.common.record for the
interface; _crecord.pyx is the compiled twin and must behave identically, errors included)."""

from __future__ import annotations

import struct
import zlib
from array import array
from collections.abc import Callable, Sequence
from typing import Any

from ..message import BatchEntry, MessageExt
from ..props import PropertyError
from .layout import (
    BATCH_HEAD,
    BATCH_MIN_ENTRY,
    CQ_ENTRY,
    FIXED_V4,
    HEAD,
    HOST_FLAGS,
    I16,
    I32,
    I64,
    IPV6_EXTRA,
    KEY_ENTRY,
    MARK_DELAY,
    MARK_TIMER,
    MARK_TRANSACTION,
    MAX_PROPERTIES_BYTES,
    MAX_TOPIC_BYTES,
    MESSAGE_MAGIC_CODE,
    MIN_RECORD_SIZE,
    POS_BODY_V4,
    POS_BODYLEN_V4,
    POS_PHYSICALOFFSET,
    POS_QUEUEOFFSET,
    POS_STORETIMESTAMP_V4,
    POS_SYSFLAG,
    SYSFLAG_BORNHOST_V6,
    SYSFLAG_COMPRESSED,
    SYSFLAG_STOREHOST_V6,
    TAIL,
    MessageDecodeError,
    RecordEncodeError,
    record_size,
)
from .view import Buffer, StoredMessage

IMPLEMENTATION = "python"
# What the compiled twin provides too.
INTERFACE = ("properties_encode", "properties_decode", "properties_scan", "locate",
             "decode_record", "decode_records", "encode_record", "encode_batch", "split_batch",
             "batch_to_messages", "check_batch", "encode_messages", "place_messages", "record_starts",
             "key_entries", "record_info", "record_unsound", "first_unsound",
             "first_unsound_entries")

_new_tuple = tuple.__new__


_TAGS = "TAGS"
_KEYS = "KEYS"
_UNIQ = "UNIQ_KEY"
_DELAY = "DELAY"


# --- properties ----------------------------------------------------------------------------------
def properties_encode(props: dict[str, str]) -> bytes:
    """RocketMQ's `name\\x01value\\x02` text, every pair followed by \\x02, as UTF-8."""
    if not props:
        return b""
    text = "\x02".join(map("\x01".join, props.items())) + "\x02"
    # One count per separator instead of four scans per pair: this runs for every message.
    n = len(props)
    if text.count("\x01") != n or text.count("\x02") != n:
        for name, value in props.items():
            if "\x01" in name or "\x02" in name or "\x01" in value or "\x02" in value:
                raise PropertyError(name, value)
    return text.encode()


def properties_decode(raw: Buffer) -> dict[str, str]:
    """Leniently: a missing final separator or an item without a value is tolerated, because
    third-party clients differ in exactly these details. Bad UTF-8 is replaced."""
    props: dict[str, str] = {}
    if not raw:
        return props
    for item in bytes(raw).decode("utf-8", "replace").split("\x02"):
        name, sep, value = item.partition("\x01")
        if sep and name:
            props[name] = value
    return props


def properties_scan(raw: Buffer) -> tuple[str | None, str | None, str | None, str | None]:
    """(TAGS, KEYS, UNIQ_KEY, DELAY) without building the whole map; the last occurrence of a
    name wins, as it does in properties_decode."""
    tags = keys = uniq = delay = None
    if not raw:
        return tags, keys, uniq, delay
    for item in bytes(raw).decode("utf-8", "replace").split("\x02"):
        name, sep, value = item.partition("\x01")
        if not sep:
            continue
        if name == _TAGS:
            tags = value
        elif name == _KEYS:
            keys = value
        elif name == _UNIQ:
            uniq = value
        elif name == _DELAY:
            delay = value
    return tags, keys, uniq, delay


def has_property(raw: bytes, name: str) -> bool:
    key = name.encode() + b"\x01"
    return raw.startswith(key) or raw.find(b"\x02" + key) >= 0


def with_property(raw: bytes, name: str, value: str) -> bytes:
    """Encoded properties with `name` set to `value`: appended as RocketMQ's broker appends
    its batch properties, or the whole text rewritten when the name is already there."""
    if has_property(raw, name):
        props = properties_decode(raw)
        props[name] = value
        return properties_encode(props)
    if raw and not raw.endswith(b"\x02"):
        raw += b"\x02"
    return raw + properties_encode({name: value})


# --- one record ----------------------------------------------------------------------------------
def locate(buf: Buffer, pos: int, limit: int) -> tuple[int, int, int, int, int, int]:
    """Check the record at `pos` (which must end by `limit`) field by field.
    Returns (total, sys_flag, body_at, body_len, topic_at, props_at)."""
    if pos < 0 or limit > len(buf):
        raise ValueError("locate: bounds outside the buffer")
    if limit - pos < MIN_RECORD_SIZE:
        raise MessageDecodeError(pos, "shorter than the smallest possible record")
    total, magic = I32.unpack_from(buf, pos)[0], I32.unpack_from(buf, pos + 4)[0]
    if magic != MESSAGE_MAGIC_CODE:
        raise MessageDecodeError(pos, f"magic code {magic & 0xFFFFFFFF:#x} is not a message's")
    if total < MIN_RECORD_SIZE or pos + total > limit:
        raise MessageDecodeError(pos, f"total size {total} does not fit the buffer")
    (sys_flag,) = I32.unpack_from(buf, pos + POS_SYSFLAG)
    end = pos + total
    p = pos + POS_BODYLEN_V4
    if sys_flag & SYSFLAG_BORNHOST_V6:
        p += IPV6_EXTRA
    if sys_flag & SYSFLAG_STOREHOST_V6:
        p += IPV6_EXTRA
    if p + 4 > end:  # IPv6 hosts in a record too short for them: the body length is not in it
        raise MessageDecodeError(pos, "hosts overrun the record")
    (body_len,) = I32.unpack_from(buf, p)
    body_at = p + 4
    if body_len < 0 or body_at + body_len + 3 > end:
        raise MessageDecodeError(pos, f"body length {body_len} overruns the record")
    topic_at = body_at + body_len + 1
    topic_len = buf[topic_at - 1]
    if topic_at + topic_len + 2 > end:
        raise MessageDecodeError(pos, "topic overruns the record")
    (props_len,) = I16.unpack_from(buf, topic_at + topic_len)
    props_at = topic_at + topic_len + 2
    if props_len < 0 or props_at + props_len != end:
        raise MessageDecodeError(pos, "properties do not end where the record ends")
    return total, sys_flag, body_at, body_len, topic_at, props_at


def decode_record(buf: Buffer, pos: int = 0, *, broker: str = "", decompress: bool = True,
                  check_crc: bool = False) -> StoredMessage:
    """The record at `pos` as a lazily decoded message. Raises MessageDecodeError."""
    if pos < 0:
        raise ValueError("decode_record: negative position")
    total, sys_flag, body_at, body_len, topic_at, props_at = locate(buf, pos, len(buf))
    (_t, _m, crc, queue_id, flag, queue_offset, phys, _s, born_ts) = HEAD.unpack_from(buf, pos)
    p = pos + POS_STORETIMESTAMP_V4 + (IPV6_EXTRA if sys_flag & SYSFLAG_BORNHOST_V6 else 0)
    (store_ts,) = I64.unpack_from(buf, p)
    reconsume, prepared, _ = TAIL.unpack_from(buf, body_at - TAIL.size)
    body = bytes(buf[body_at : body_at + body_len])
    if check_crc and zlib.crc32(body) & 0x7FFFFFFF != crc:
        raise MessageDecodeError(pos, "body CRC mismatch")
    if decompress and sys_flag & SYSFLAG_COMPRESSED:
        try:
            body = zlib.decompress(body)
        except zlib.error as exc:
            raise MessageDecodeError(pos, f"compressed body does not inflate: {exc}") from exc
    m = StoredMessage.__new__(StoredMessage)
    m.topic = bytes(buf[topic_at : props_at - 2]).decode("utf-8", "replace")
    m.body = body
    m.flag = flag
    m.queue_id = queue_id
    m.queue_offset = queue_offset
    m.commit_log_offset = phys
    m.sys_flag = sys_flag
    m.born_timestamp = born_ts
    m.store_timestamp = store_ts
    m.reconsume_times = reconsume
    m.prepared_transaction_offset = prepared
    m.body_crc = crc
    m.store_size = total
    m.broker = broker
    m._buf = buf
    m._at = pos
    m._props_at = props_at
    m._props = m._born_host = m._store_host = m._msg_id = m._offset_msg_id = None
    return m


def record_info(buf: Buffer, o: int, pos: int, limit: int,
                info_type: type[tuple[Any, ...]]) -> Any:
    """Verify the record at `o` (which must end by `limit`) as recovery and a slave do: its
    fields (locate), its PHYSICALOFFSET equal to `pos`, its body CRC. Returns what dispatching
    it needs as an `info_type` tuple (pos, size, topic, queue id, queue offset, store time,
    TAGS, KEYS, UNIQ_KEY, DELAY: the four properties scanned for, the rest not decoded), or
    the reason it is not a valid record."""
    try:
        total, sys_flag, body_at, body_len, topic_at, props_at = locate(buf, o, limit)
    except MessageDecodeError as exc:
        return exc.reason
    (_t, _m, crc, qid, _flag, qo, phys, _s, _born_ts) = HEAD.unpack_from(buf, o)
    if phys != pos:
        return f"PHYSICALOFFSET field {phys} is not the record's position"
    if zlib.crc32(memoryview(buf)[body_at : body_at + body_len]) & 0x7FFFFFFF != crc:
        return "body CRC mismatch"
    at = o + POS_STORETIMESTAMP_V4 + (IPV6_EXTRA if sys_flag & SYSFLAG_BORNHOST_V6 else 0)
    (store_ts,) = I64.unpack_from(buf, at)
    topic = bytes(buf[topic_at : props_at - 2]).decode("utf-8", "replace")
    tags, keys, uniq, delay = properties_scan(memoryview(buf)[props_at : o + total])
    return _new_tuple(info_type, (pos, total, topic, qid, qo, store_ts, tags, keys, uniq, delay))


def record_unsound(buf: Buffer, o: int, pos: int, size: int, queue_id: int = -1,
                   topic: bytes = b"", crc: bool = True) -> str | None:
    """Why the `size` bytes at `o` are not the record stored at `pos` (what a consume-queue
    entry says of it), or None: TOTALSIZE equal to `size`, the fields as `locate` checks them,
    PHYSICALOFFSET equal to `pos`, QUEUEID equal to `queue_id` and the topic to `topic` (when
    given: the queue whose entry it is), and with `crc` the body CRC. The reasons of the fields
    are `locate`'s."""
    _topic_length(topic)
    if size < MIN_RECORD_SIZE or o < 0 or o + size > len(buf):
        return "record cut short"
    (total, magic, crc_field, qid, _f, _qo, phys, sys_flag, _bt, _bh, _bp, _st, _sh, _sp, _r, _pr,
     body_len) = FIXED_V4.unpack_from(buf, o)
    if total != size:
        return f"TOTALSIZE {total} differs from the consume queue's {size}"
    if sys_flag & HOST_FLAGS or magic != MESSAGE_MAGIC_CODE:  # the rare cases: locate says why
        try:
            _t, _s, body_at, body_len, topic_at, _pa = locate(buf, o, o + size)
        except MessageDecodeError as exc:
            return exc.reason
    else:
        # locate's checks on the one unpack of the usual layout: this runs per record read.
        body_at = o + FIXED_V4.size
        end = o + size
        topic_at = body_at + body_len + 1
        if body_len < 0 or topic_at + 2 > end:
            return f"body length {body_len} overruns the record"
        props_at = topic_at + buf[topic_at - 1] + 2
        if props_at > end:
            return "topic overruns the record"
        props_len = (buf[props_at - 2] << 8) | buf[props_at - 1]
        if props_len >= 0x8000 or props_at + props_len != end:  # a signed short, as locate's
            return "properties do not end where the record ends"
    if phys != pos:
        return f"PHYSICALOFFSET field {phys} is not the record's position"
    if queue_id >= 0 and qid != queue_id:
        return f"QUEUEID {qid} is not the consume queue's {queue_id}"
    if topic and (buf[topic_at - 1] != len(topic) or buf[topic_at : topic_at + len(topic)] != topic):
        return "the topic is not the consume queue's"
    if crc and zlib.crc32(memoryview(buf)[body_at : body_at + body_len]) & 0x7FFFFFFF != crc_field:
        return "body CRC mismatch"
    return None


def _topic_length(topic: bytes) -> None:
    # A topic longer than its one length byte can say never matches a record: refused rather
    # than compared against a truncated length (as the compiled twin does).
    if len(topic) > 255:
        raise ValueError(f"a topic of {len(topic)} bytes cannot be a record's")


# What a trusted record's check reads on the usual layout (IPv4 hosts): TOTALSIZE, MAGIC,
# QUEUEID, PHYSICALOFFSET, SYSFLAG and the BODY length.
_TRUSTED_V4 = struct.Struct(">ii4xi12xqi44xi")


def _unsound_at(buf: Buffer, n: int, o: int, phys: int, size: int, queue_id: int, topic: bytes,
                full: bool) -> bool:
    """Whether record_unsound(buf, o, phys, size, queue_id, topic, full) has a reason. A
    trusted record (no CRC) of the usual layout is passed on one unpack and a few comparisons:
    a pull runs this per record. Anything else, and any doubt, is record_unsound's to decide."""
    if full or size < MIN_RECORD_SIZE or o < 0 or o + size > n:
        return record_unsound(buf, o, phys, size, queue_id, topic, full) is not None
    total, magic, qid, at, sys_flag, body_len = _TRUSTED_V4.unpack_from(buf, o)
    topic_at = o + POS_BODY_V4 + body_len + 1
    end = o + size
    if (total == size and magic == MESSAGE_MAGIC_CODE and at == phys and not sys_flag & HOST_FLAGS
            and (queue_id < 0 or qid == queue_id) and body_len >= 0 and topic_at + 2 <= end):
        topic_len = buf[topic_at - 1]
        props_at = topic_at + topic_len + 2
        if props_at <= end:
            # Below 0x8000: locate reads the length as a signed short.
            props_len = (buf[props_at - 2] << 8) | buf[props_at - 1]
            if (props_len == end - props_at and props_len < 0x8000
                    and (not topic or (topic_len == len(topic)
                                       and buf[topic_at : topic_at + topic_len] == topic))):
                return False
    return record_unsound(buf, o, phys, size, queue_id, topic, full) is not None


def first_unsound(buf: Buffer, picked: Sequence[tuple[int, int, int]], lo: int, hi: int,
                  queue_id: int = -1, topic: bytes = b"") -> int:
    """The index in `picked` ((queue offset, phys, size) of records back to back in `buf`) of
    the first entry without a positive size, or whose record is unsound (`record_unsound` for
    the queue `topic`/`queue_id`); -1 when there is none. Records starting in [lo, hi) are
    checked in full, the others (trusted: written by this run, or verified by the scrub)
    without their body CRC."""
    _topic_length(topic)
    n = len(buf)
    o = 0
    for i, (_qo, phys, size) in enumerate(picked):
        if size <= 0 or _unsound_at(buf, n, o, phys, size, queue_id, topic, lo <= phys < hi):
            return i
        o += size
    return -1


def first_unsound_entries(buf: Buffer, entries: Buffer, count: int, lo: int, hi: int,
                          queue_id: int = -1, topic: bytes = b"") -> int:
    """first_unsound for the first `count` consume-queue entries in `entries` (their bytes as
    the queue stores them): a pull that took a run of entries as they lie is checked without a
    tuple per entry."""
    _topic_length(topic)
    if count < 0 or count * CQ_ENTRY.size > len(entries):
        raise ValueError(f"first_unsound_entries: {count} entries are not in {len(entries)} bytes")
    n = len(buf)
    o = 0
    for i, (phys, size, _tag) in enumerate(CQ_ENTRY.iter_unpack(
            memoryview(entries)[: count * CQ_ENTRY.size])):
        if size <= 0 or _unsound_at(buf, n, o, phys, size, queue_id, topic, lo <= phys < hi):
            return i
        o += size
    return -1


def decode_records(buf: Buffer, *, broker: str = "", decompress: bool = True) -> list[MessageExt]:
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


def record_starts(buf: Buffer) -> bytes:
    """Where each record of a run starts, as native int32s (an Arrow int32 buffer as is),
    checking that the sizes chain exactly to the buffer's end."""
    starts = array("i")
    append = starts.append
    unpack = I32.unpack_from
    pos = 0
    n = len(buf)
    last = n - MIN_RECORD_SIZE
    while pos <= last:
        append(pos)
        (size,) = unpack(buf, pos)
        if size < MIN_RECORD_SIZE:
            raise MessageDecodeError(pos, f"total size {size} is below the minimum")
        pos += size
    if pos != n:
        raise MessageDecodeError(pos, "the last record does not end where the buffer ends")
    return starts.tobytes()


def encode_record(*, topic: bytes, queue_id: int, flag: int, body: bytes, properties: bytes,
                  sys_flag: int, born_timestamp: int, born_host: bytes, store_timestamp: int,
                  store_host: bytes, reconsume_times: int = 0, prepared_transaction_offset: int = 0,
                  queue_offset: int = 0, physical_offset: int = 0, crc: int | None = None) -> bytes:
    """One record. Hosts are already packed (pack_host); the host flags in sys_flag are set
    from their lengths so they can never disagree with the bytes."""
    if len(topic) > MAX_TOPIC_BYTES:
        raise ValueError(f"topic is {len(topic)} bytes; at most {MAX_TOPIC_BYTES}")
    if len(properties) > MAX_PROPERTIES_BYTES:
        raise ValueError(f"properties are {len(properties)} bytes; at most {MAX_PROPERTIES_BYTES}")
    sys_flag &= ~HOST_FLAGS
    if len(born_host) == 20:
        sys_flag |= SYSFLAG_BORNHOST_V6
    if len(store_host) == 20:
        sys_flag |= SYSFLAG_STOREHOST_V6
    crc = zlib.crc32(body) & 0x7FFFFFFF if crc is None else crc
    v6 = (len(born_host) == 20) + (len(store_host) == 20)
    total = record_size(len(body), len(topic), len(properties), v6)
    head = b"".join((
        HEAD.pack(total, MESSAGE_MAGIC_CODE, crc, queue_id, flag, queue_offset, physical_offset,
                  sys_flag, born_timestamp),
        born_host, I64.pack(store_timestamp), store_host,
        TAIL.pack(reconsume_times, prepared_transaction_offset, len(body)),
    ))
    return b"".join((head, body, bytes((len(topic),)), topic, I16.pack(len(properties)), properties))


# --- SEND_BATCH_MESSAGE bodies ---------------------------------------------------------------------
def encode_batch(items: Sequence[BatchEntry]) -> bytes:
    """Per message TOTALSIZE, MAGIC(0), BODYCRC(0), FLAG, BODY, PROPERTIES (i16 length), as
    RocketMQ's MessageDecoder.encodeMessages."""
    parts: list[bytes] = []
    add = parts.append
    for item in items:
        props = properties_encode(item.properties)
        body = item.body
        add(BATCH_HEAD.pack(BATCH_MIN_ENTRY + len(body) + len(props), 0, 0, item.flag, len(body)))
        add(body)
        add(I16.pack(len(props)))
        add(props)
    return b"".join(parts)


def split_batch(buf: Buffer) -> list[tuple[int, bytes, bytes]]:
    """A SEND_BATCH_MESSAGE body as (flag, body, property bytes) per message."""
    out: list[tuple[int, bytes, bytes]] = []
    pos = 0
    n = len(buf)
    while pos < n:
        if n - pos < BATCH_MIN_ENTRY:
            raise MessageDecodeError(pos, "truncated batch entry")
        total, _magic, _crc, flag, body_len = BATCH_HEAD.unpack_from(buf, pos)
        if total < BATCH_MIN_ENTRY or pos + total > n or body_len < 0:
            raise MessageDecodeError(pos, f"batch entry size {total} does not fit")
        p = pos + BATCH_HEAD.size
        if p + body_len + 2 > pos + total:
            raise MessageDecodeError(pos, "batch entry body overruns the entry")
        body = bytes(buf[p : p + body_len])
        p += body_len
        (props_len,) = I16.unpack_from(buf, p)
        p += 2
        if props_len < 0 or p + props_len != pos + total:
            raise MessageDecodeError(pos, "batch entry properties do not end with the entry")
        out.append((flag, body, bytes(buf[p : p + props_len])))
        pos += total
    return out


def _marks(raw: bytes) -> int:
    """An entry's MARK_* bits, and MARK_DELAY when it asks for a delay level."""
    marks = MARK_DELAY if raw.startswith(b"DELAY\x01") or b"\x02DELAY\x01" in raw else 0
    if raw.startswith(b"TRAN_MSG\x01") or b"\x02TRAN_MSG\x01" in raw:
        marks |= MARK_TRANSACTION
    if raw.startswith(b"TIMER_") or b"\x02TIMER_" in raw:
        marks |= MARK_TIMER
    return marks


def check_batch(buf: Buffer) -> tuple[int, int]:
    """What batch_to_messages would find in a SEND_BATCH_MESSAGE body, without building its
    messages: (entries, marks); the same MessageDecodeError for a malformed body, then
    RecordEncodeError when an entry carries a delay level."""
    count = marks = 0
    for _flag, _body, raw in split_batch(buf):
        marks |= _marks(raw)
        count += 1
    if marks & MARK_DELAY:
        raise RecordEncodeError("MESSAGE_ILLEGAL", "a batch cannot carry delayed messages")
    return count, marks


def batch_to_messages(buf: Buffer, message_type: Callable[..., Any], topic: str, queue_id: int,
                      sys_flag: int, born_timestamp: int, born_host: Any, reconsume_times: int,
                      name: str, value: str) -> tuple[list[Any], int]:
    """A SEND_BATCH_MESSAGE body as messages to store (`message_type` has StoreMessage's
    fields), each keeping the property bytes it came with plus `name`=`value` (the broker's
    CLUSTER), and the batch's marks (layout.MARK_*). Raises MessageDecodeError for a malformed
    body, then RecordEncodeError when an entry carries a delay level (a batch cannot be
    delayed)."""
    suffix = properties_encode({name: value})  # a bad name or value fails before any reading
    key = name.encode() + b"\x01"
    inner_key = b"\x02" + key
    marks = 0
    out: list[Any] = []
    add = out.append
    for flag, body, raw in split_batch(buf):
        marks |= _marks(raw)
        if raw.startswith(key) or inner_key in raw:
            props = with_property(raw, name, value)
        elif raw and raw[-1] != 2:
            props = raw + b"\x02" + suffix
        else:
            props = raw + suffix
        add(message_type(
            topic=topic, queue_id=queue_id, body=body, properties=props, flag=flag,
            sys_flag=sys_flag, born_timestamp=born_timestamp, born_host=born_host,
            reconsume_times=reconsume_times))
    if marks & MARK_DELAY:
        raise RecordEncodeError("MESSAGE_ILLEGAL", "a batch cannot carry delayed messages")
    return out, marks


# --- the store's batch: encode once, patch the position in -----------------------------------------
def encode_messages(msgs: Sequence[Any], store_host: bytes, max_size: int,
                    topic_bytes: Callable[[str], bytes], born_bytes: Callable[[Any], bytes],
                    tag_code: Callable[[str], int], schedule_topic: str,
                    ) -> tuple[bytearray, list[int], list[int], bytearray,
                               list[tuple[int, str | None]]]:
    """Encode StoreMessages with queue offset, physical offset and store timestamp left 0
    (place_messages patches them in). Returns (data, sizes, tag codes, key-index entries, and
    for records of `schedule_topic`, whose tag code is their delivery time, (record index,
    DELAY level text)). The key-index entries are KEY_ENTRY records, one per key (KEYS split
    on spaces, then UNIQ_KEY) with the record's offset within `data` and time 0, ready for the
    index once the batch's position and time are known. Raises RecordEncodeError before
    anything is returned. The three callbacks are asked again only when the topic, born host or tags
    differ from the previous message's (a batch usually repeats them)."""
    parts: list[bytes] = []
    add = parts.append
    sizes: list[int] = []
    tags: list[int] = []
    keys: list[bytes] = []
    key_entry = KEY_ENTRY.pack
    delays: list[tuple[int, str | None]] = []
    v4 = len(store_host) == 8
    store_ip, store_port = store_host[:4], int.from_bytes(store_host[4:8], "big")
    fixed = FIXED_V4.pack
    i16 = I16.pack
    crc32 = zlib.crc32
    join_pair = "\x01".join
    join_props = "\x02".join
    last_topic = last_born = last_tags = key_topic = None
    traw = tpart = born_ip = b""
    born_port = tag = offset = key_prefix = 0
    born: bytes = b""
    for i, m in enumerate(msgs):
        props = m.properties
        if type(props) is dict:
            if props:
                text = join_props(map(join_pair, props.items()))
                n = len(props)
                if text.count("\x01") != n or text.count("\x02") != n - 1:
                    raise RecordEncodeError("MESSAGE_ILLEGAL",
                                            "a property name or value contains \\x01 or \\x02")
                praw = (text + "\x02").encode()
            else:
                praw = b""
            tags_text = props.get(_TAGS)
            keys_text = props.get(_KEYS)
            uniq = props.get(_UNIQ)
            delay = props.get(_DELAY)
        else:
            praw = props
            tags_text, keys_text, uniq, delay = properties_scan(praw)
        if len(praw) > MAX_PROPERTIES_BYTES:
            raise RecordEncodeError("PROPERTIES_SIZE_EXCEEDED",
                                    f"properties are {len(praw)} bytes; at most {MAX_PROPERTIES_BYTES}")
        topic = m.topic
        if topic != last_topic:
            traw = topic_bytes(topic)
            tpart = bytes((len(traw),)) + traw
            last_topic = topic
        if m.born_host != last_born:
            born = born_bytes(m.born_host)
            born_ip, born_port = born[:4], int.from_bytes(born[4:8], "big")
            last_born = m.born_host
        body = m.body
        size = MIN_RECORD_SIZE + len(body) + len(traw) + len(praw)
        if len(born) != 8:
            size += IPV6_EXTRA
        if not v4:
            size += IPV6_EXTRA
        if size > max_size:
            raise RecordEncodeError("MESSAGE_ILLEGAL",
                                    f"message of {size} bytes exceeds max_message_size {max_size}")
        crc = crc32(body) & 0x7FFFFFFF
        sys_flag = m.sys_flag & ~HOST_FLAGS
        if v4 and len(born) == 8:
            add(fixed(size, MESSAGE_MAGIC_CODE, crc, m.queue_id, m.flag, 0, 0, sys_flag,
                      m.born_timestamp, born_ip, born_port, 0, store_ip, store_port,
                      m.reconsume_times, m.prepared_transaction_offset, len(body)))
            add(body)
            add(tpart)
            add(i16(len(praw)))
            add(praw)
        else:
            add(encode_record(
                topic=traw, queue_id=m.queue_id, flag=m.flag, body=body, properties=praw,
                sys_flag=sys_flag, born_timestamp=m.born_timestamp, born_host=born,
                store_timestamp=0, store_host=store_host, reconsume_times=m.reconsume_times,
                prepared_transaction_offset=m.prepared_transaction_offset, crc=crc))
        sizes.append(size)
        if tags_text != last_tags:
            tag = tag_code(tags_text) if tags_text else 0
            last_tags = tags_text
        tags.append(tag)
        if uniq or keys_text:
            if topic != key_topic:
                key_prefix = crc32(traw + b"#")
                key_topic = topic
            if keys_text:
                for k in keys_text.split(" "):
                    if k:
                        keys.append(key_entry(crc32(k.encode(), key_prefix) & 0x7FFFFFFF,
                                              offset, 0))
            if uniq:
                keys.append(key_entry(crc32(uniq.encode(), key_prefix) & 0x7FFFFFFF, offset, 0))
        if topic == schedule_topic:
            delays.append((i, delay))
        offset += size
    return bytearray(b"".join(parts)), sizes, tags, bytearray(b"".join(keys)), delays


def key_entries(out: bytearray, topic: str, keys: str | None, uniq: str | None, phys: int,
                ts: int) -> int:
    """Append a record's key-index entries (KEY_ENTRY: CRC32 of "topic#key" & 0x7FFFFFFF,
    `phys`, `ts`) to `out`, one per key of its KEYS split on spaces, then its UNIQ_KEY, as
    encode_messages makes them; returns how many."""
    prefix = zlib.crc32(f"{topic}#".encode())
    pack = KEY_ENTRY.pack
    n = 0
    if keys:
        for key in keys.split(" "):
            if key:
                out += pack(zlib.crc32(key.encode(), prefix) & 0x7FFFFFFF, phys, ts)
                n += 1
    if uniq:
        out += pack(zlib.crc32(uniq.encode(), prefix) & 0x7FFFFFFF, phys, ts)
        n += 1
    return n


_QO_PHYS = struct.Struct(">qq")  # QUEUEOFFSET, PHYSICALOFFSET: adjacent, patched together
assert POS_PHYSICALOFFSET == POS_QUEUEOFFSET + 8


def place_messages(data: bytearray, msgs: Sequence[Any], sizes: Sequence[int],
                   tags: Sequence[int], pos: int, store_ts: int,
                   next_offset: Callable[[tuple[str, int]], int], msg_id_prefix: str,
                   appended_type: type[tuple[Any, ...]],
                   ) -> tuple[dict[tuple[str, int], bytes], list[Any]]:
    """Patch QUEUEOFFSET, PHYSICALOFFSET and STORETIMESTAMP into records encoded by
    encode_messages for a write at `pos` (RocketMQ's doAppend). Returns the consume-queue
    entries per queue and an `appended_type` tuple (phys, size, queue offset, store ts, offset
    msg id) per record. `next_offset` gives a queue's next offset; offsets within the batch
    continue."""
    if len(sizes) != len(msgs) or len(tags) != len(msgs):
        raise ValueError("place_messages: sizes and tags must match the messages")
    if sum(sizes) > len(data):
        raise ValueError("place_messages: sizes overrun the data")
    entries: dict[tuple[str, int], list[bytes]] = {}
    counters: dict[tuple[str, int], int] = {}
    appended: list[Any] = []
    add = appended.append
    qo_phys = _QO_PHYS.pack_into
    pack_i64 = I64.pack_into
    entry = CQ_ENTRY.pack
    new = _new_tuple
    flag_at = POS_SYSFLAG + 3
    ts_v4 = POS_STORETIMESTAMP_V4
    ts_v6 = POS_STORETIMESTAMP_V4 + IPV6_EXTRA
    o = 0
    phys = pos
    for m, size, tag in zip(msgs, sizes, tags, strict=True):
        q = (m.topic, m.queue_id)
        qo = counters.get(q)
        if qo is None:
            qo = next_offset(q)
            entries[q] = []
        counters[q] = qo + 1
        qo_phys(data, o + POS_QUEUEOFFSET, qo, phys)
        pack_i64(data, o + (ts_v6 if data[o + flag_at] & SYSFLAG_BORNHOST_V6 else ts_v4), store_ts)
        entries[q].append(entry(phys, size, tag))
        add(new(appended_type, (phys, size, qo, store_ts, f"{msg_id_prefix}{phys:016X}")))
        o += size
        phys += size
    return {q: b"".join(e) for q, e in entries.items()}, appended
