"""The pure-Python decoder of PULL_MESSAGE bodies to Arrow record batches: the twin of the
compiled `_ccolumns`, used when that is not built or FERRYMQ_NO_EXTENSIONS=1 is set.

Why vectorised: Spark takes Arrow batches at millions of rows per second, while decoding one
record at a time in Python costs several microseconds. Here the only per-record work is walking
the TOTALSIZE chain (`record_starts`); every field is then gathered for all records at once
with Arrow kernels (a list-view over the response bytes, flattened, gives a column's bytes
contiguously; `binary_reverse` turns big-endian integers into native ones).

It covers what ferrymq's producers and brokers write: IPv4 hosts, uncompressed bodies, UTF-8
properties with a UNIQ_KEY. Anything else raises `Slow`, and `decode.py` takes the exact
record-by-record path of `common.record` for the whole response, so every path gives
identical rows."""

from __future__ import annotations

import functools
import struct
import sys
from collections.abc import Callable

import pyarrow as pa
import pyarrow.compute as pc

from ..common.errors import FerryMQError
from ..common.props import (
    PROPERTY_KEYS,
    PROPERTY_TAGS,
    PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX,
)
from ..common.record.layout import (
    MESSAGE_MAGIC_CODE,
    POS_BODY_V4,
    POS_BODYLEN_V4,
    POS_BORNTIMESTAMP,
    POS_QUEUEID,
    POS_QUEUEOFFSET,
    POS_RECONSUMETIMES_V4,
    POS_STORETIMESTAMP_V4,
    POS_SYSFLAG,
    SYSFLAG_BORNHOST_V6,
    SYSFLAG_COMPRESSED,
    SYSFLAG_STOREHOST_V6,
)
from .schema import ARROW_SCHEMA, PROPERTIES, TIMESTAMP

_NATIVE_I32 = struct.Struct("=i")
_SLOW_FLAGS = SYSFLAG_COMPRESSED | SYSFLAG_BORNHOST_V6 | SYSFLAG_STOREHOST_V6

# Field positions in a record with IPv4 hosts (the slow path takes every other record).
_QUEUE_ID = POS_QUEUEID
_QUEUE_OFFSET = POS_QUEUEOFFSET
_SYSFLAG_LOW_BYTE = POS_SYSFLAG + 3  # big-endian: every flag tested here is in its low byte
_BORN_TS = POS_BORNTIMESTAMP
_STORE_TS = POS_STORETIMESTAMP_V4
_RECONSUME = POS_RECONSUMETIMES_V4
_BODY_LEN = POS_BODYLEN_V4
_BODY = POS_BODY_V4


_I64_1000 = pa.scalar(1000, pa.int64())
_UNIQ = pa.scalar(PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX, pa.string())
_KEYS = pa.scalar(PROPERTY_KEYS, pa.string())
_TAGS = pa.scalar(PROPERTY_TAGS, pa.string())


class Slow(FerryMQError):
    """A response this decoder does not take: the exact path decodes it."""


def decode(buf: bytes, broker: str, starts_bytes: bytes) -> pa.RecordBatch:
    """All records of `buf`, which start at `starts_bytes` (native int32s), or Slow."""
    n = len(starts_bytes) // 4
    raw = pa.Array.from_buffers(pa.uint8(), len(buf), [None, pa.py_buffer(buf)])
    starts = pa.Array.from_buffers(pa.int32(), n, [None, pa.py_buffer(starts_bytes)])
    record_end = pa.concat_arrays([starts[1:], pa.array([len(buf)], pa.int32())])
    flags = pc.take(raw, pc.add(starts, _i32(_SYSFLAG_LOW_BYTE)))
    if pc.any(pc.not_equal(pc.bit_wise_and(flags, _u8(_SLOW_FLAGS)), _u8(0))).as_py():
        raise Slow
    body_len = _strided_int(raw, starts, _BODY_LEN, 4, pa.int32())
    body_start = pc.add(starts, _i32(_BODY))
    # Room for the body, the topic's length byte and the properties' length: checked before
    # any position past the body is computed (a wild length would point outside the buffer).
    room = pc.subtract(pc.subtract(record_end, body_start), _i32(3))
    if pc.min(body_len).as_py() < 0 or pc.any(pc.greater(body_len, room)).as_py():
        raise Slow
    body_end = pc.add(body_start, body_len)
    topic_len = pc.take(raw, body_end).cast(pa.int32())
    topic_start = pc.add(body_end, _i32(1))
    topic_end = pc.add(topic_start, topic_len)
    props_start = pc.add(topic_end, _i32(2))
    if pc.any(pc.greater_equal(props_start, record_end)).as_py():
        raise Slow  # overlapping fields or no properties: the exact path decides
    props_len = _strided_int(raw, topic_end, 0, 2, pa.int16()).cast(pa.int32())
    if not pc.all(pc.equal(props_len, pc.subtract(record_end, props_start))).as_py():
        raise Slow  # the properties' length does not end them at the record's end
    # Every field boundary of every record, in buffer order, makes one binary array whose
    # elements are the records' fields; `take` then copies a field of all records at once.
    bounds = [starts, body_start, body_end, topic_start, topic_end, props_start]
    interleaved = pc.take(pa.concat_arrays(bounds), _interleave_index(n, len(bounds)))
    offsets = pa.concat_arrays([interleaved, record_end[-1:]])
    fields = pa.Array.from_buffers(
        pa.binary(), len(interleaved), [None, offsets.buffers()[1], pa.py_buffer(buf)]
    )
    header = pc.take(fields, _field_index(n, len(bounds), 0))
    hbytes = _binary_data(header)
    if len(hbytes) != n * _BODY:
        raise Slow
    hraw = pa.Array.from_buffers(pa.uint8(), len(hbytes), [None, hbytes])
    magic = _fixed_int(hraw, n, _BODY, 4, 4, pa.int32())
    if not pc.all(pc.equal(magic, _i32(MESSAGE_MAGIC_CODE))).as_py():
        raise Slow  # the exact path reports which record is bad
    body = pc.take(fields, _field_index(n, len(bounds), 1))
    topic = pc.take(fields, _field_index(n, len(bounds), 3))
    try:
        topic = topic.cast(pa.string())
        props_text = pc.take(fields, _field_index(n, len(bounds), 5)).cast(pa.string())
    except pa.ArrowInvalid as exc:  # not UTF-8: the exact path replaces bad bytes
        raise Slow from exc
    props = _parse_properties(props_text)
    msg_id = props.lookup(_UNIQ, n)
    if msg_id.null_count or pc.any(pc.equal(pc.binary_length(msg_id), _i32(0))).as_py():
        raise Slow  # the offset message id needs the store host: rare, take the exact path
    columns = [
        topic,
        pa.repeat(pa.scalar(broker, pa.string()), n),
        _fixed_int(hraw, n, _BODY, _QUEUE_ID, 4, pa.int32()),
        _fixed_int(hraw, n, _BODY, _QUEUE_OFFSET, 8, pa.int64()),
        msg_id,
        props.lookup(_KEYS, n),
        props.lookup(_TAGS, n),
        body,
        props.column,
        _millis(_fixed_int(hraw, n, _BODY, _BORN_TS, 8, pa.int64())),
        _millis(_fixed_int(hraw, n, _BODY, _STORE_TS, 8, pa.int64())),
        _fixed_int(hraw, n, _BODY, _RECONSUME, 4, pa.int32()),
    ]
    return pa.RecordBatch.from_arrays(columns, schema=ARROW_SCHEMA)


# Python ints handed to pyarrow.compute make it probe for numpy on every call (an import
# attempt, tens of microseconds); typed scalars avoid that.
@functools.lru_cache(maxsize=64)
def _i32(value: int) -> pa.Scalar:
    return pa.scalar(value, pa.int32())


@functools.lru_cache(maxsize=8)
def _u8(value: int) -> pa.Scalar:
    return pa.scalar(value, pa.uint8())


# Index arrays for `take`. Batches come in every size (a partition's last batch, short
# pulls), so an index is never built for one size: each pattern below has elements that do not
# depend on how many are used, and is kept at the largest size asked so far and sliced. Building
# one for each new size cost more than decoding the batch (a Python list per size); the
# patterns are computed with kernels over 0, 1, 2, ... instead.
_PREFIXES: dict[tuple[int | str, ...], pa.Array] = {}


def _prefix(key: tuple[int | str, ...], m: int, build: Callable[[pa.Array], pa.Array]) -> pa.Array:
    """The first m elements of the pattern `build` makes from 0, 1, 2, ..., named by `key`."""
    have = _PREFIXES.get(key)
    if have is None or len(have) < m:
        size = max(m, 2 * len(have) if have is not None else 0, 4096)
        have = _PREFIXES[key] = build(_ramp(size)[:size])
    return have[:m] if len(have) > m else have


def _div(r: pa.Array, k: int) -> pa.Array:
    return pc.divide(r, _i32(k))  # integer division: truncates


def _mod(r: pa.Array, k: int) -> pa.Array:
    return pc.modulo(r, _i32(k))


def _native(j: pa.Array, width: int) -> pa.Array:
    """Byte j of a big-endian field of `width` bytes, in native order."""
    return pc.subtract(_i32(width - 1), j) if sys.byteorder == "little" else j


def _interleave_index(n: int, k: int) -> pa.Array:
    """Positions that turn k concatenated arrays of n into record-major order: element
    i*k + j is j*n + i."""
    col = _prefix(("mod", k), n * k, lambda r: _mod(r, k))
    row = _prefix(("div", k), n * k, lambda r: _div(r, k))
    return pc.add(pc.multiply(col, _i32(n)), row)


def _field_index(n: int, k: int, j: int) -> pa.Array:
    return _prefix(("field", k, j), n, lambda r: pc.add(pc.multiply(r, _i32(k)), _i32(j)))


def _fixed_index(n: int, stride: int, pos: int, width: int) -> pa.Array:
    """Byte positions of a big-endian field in n fixed-stride records, least significant first,
    so the gathered bytes are already the native little-endian integers."""

    def build(r: pa.Array) -> pa.Array:
        record = pc.add(pc.multiply(_div(r, width), _i32(stride)), _i32(pos))
        return pc.add(record, _native(_mod(r, width), width))

    return _prefix(("fixed", stride, pos, width), n * width, build)


def _repeat_index(n: int, width: int) -> tuple[pa.Array, pa.Array]:
    rep = _prefix(("div", width), n * width, lambda r: _div(r, width))
    order = _prefix(("order", width), n * width, lambda r: _native(_mod(r, width), width))
    return rep, order


def _fixed_int(
    raw: pa.Array, n: int, stride: int, pos: int, width: int, typ: pa.DataType
) -> pa.Array:
    data = _binary_data_u8(pc.take(raw, _fixed_index(n, stride, pos, width)))
    return pa.Array.from_buffers(typ, n, [None, data])


def _strided_int(
    raw: pa.Array, starts: pa.Array, pos: int, width: int, typ: pa.DataType
) -> pa.Array:
    """A big-endian field at `starts[i] + pos` (records of varying size)."""
    n = len(starts)
    rep, order = _repeat_index(n, width)
    idx = pc.add(pc.add(pc.take(starts, rep), order), _i32(pos))
    data = _binary_data_u8(pc.take(raw, idx))
    return pa.Array.from_buffers(typ, n, [None, data])


def _binary_data_u8(arr: pa.Array) -> pa.Buffer:
    buf = arr.buffers()[1]
    return buf.slice(arr.offset, len(arr)) if arr.offset else buf


def _binary_data(arr: pa.Array) -> pa.Buffer:
    """The value bytes of a binary array, from its first value to its last."""
    _validity, offsets, data = arr.buffers()
    first, last = (
        _NATIVE_I32.unpack_from(offsets, arr.offset * 4)[0],
        _NATIVE_I32.unpack_from(offsets, (arr.offset + len(arr)) * 4)[0],
    )
    return data.slice(first, last - first)


def _parse_properties(text: pa.Array) -> _Properties:
    """`k\\x01v\\x02` pairs per record to map<string,string>, without a Python loop.

    The separators are found once in the contiguous property bytes; the text between them
    alternates key, value. Every record's properties must end with \\x02 (RocketMQ writes one
    after each pair), the separators must alternate and every name must be non-empty, else
    the exact path takes over."""
    data = _binary_data(text)
    raw = pa.Array.from_buffers(pa.uint8(), len(data), [None, data])
    is_sep = pc.or_(pc.equal(raw, _u8(1)), pc.equal(raw, _u8(2)))
    seps = pc.indices_nonzero(is_sep).cast(pa.int32())
    m = len(seps)
    if m % 2:
        raise Slow
    ramp = _ramp(m)
    even = pc.multiply(ramp[: m // 2], _i32(2))
    odd = pc.add(even, _i32(1))
    sep_bytes = pc.take(raw, seps)
    if not (
        pc.all(pc.equal(pc.take(sep_bytes, even), _u8(1))).as_py()
        and pc.all(pc.equal(pc.take(sep_bytes, odd), _u8(2))).as_py()
    ):
        raise Slow
    value_offsets = _offsets_of(text)
    ends = value_offsets[1:]
    if not pc.all(pc.equal(pc.take(raw, pc.subtract(ends, _i32(1))), _u8(2))).as_py():
        raise Slow
    # Items and separators interleaved: [key, \x01, value, \x02, key, ...]; keep the items.
    after = pc.add(seps, _i32(1))
    bounds = pc.take(pa.concat_arrays([seps, after]), _interleave_index(m, 2))
    offsets = pa.concat_arrays([pa.array([0], pa.int32()), bounds])
    pieces = pa.Array.from_buffers(pa.string(), 2 * m, [None, offsets.buffers()[1], data])
    keys = pc.take(pieces, pc.multiply(even, _i32(2)))
    if pc.any(pc.equal(pc.binary_length(keys), _i32(0))).as_py():
        raise Slow  # an item without a name: the exact codec drops it, a map would keep it
    items = pc.take(pieces, pc.multiply(odd, _i32(2)))
    # Pairs before each record's end: the rank of its closing \x02 among all \x02.
    closers = pc.take(seps, odd)
    rank = pc.index_in(pc.subtract(ends, _i32(1)), value_set=closers)
    map_offsets = pa.concat_arrays([pa.array([0], pa.int32()), pc.add(rank, _i32(1))])
    owners = pc.list_parent_indices(pa.ListArray.from_arrays(map_offsets, keys))
    # A name twice in one record: the exact codec keeps the last value, a map column both.
    pairs = pa.table({"owner": owners, "key": keys})
    if pairs.group_by(["owner", "key"]).aggregate([]).num_rows != len(keys):
        raise Slow
    return _Properties(
        pa.MapArray.from_arrays(map_offsets, keys, items, type=PROPERTIES), keys, items, owners
    )


class _Properties:
    """The map column plus its flat keys, values and owning record per pair."""

    def __init__(self, column: pa.Array, keys: pa.Array, items: pa.Array, owners: pa.Array) -> None:
        self.column = column
        self.keys = keys
        self.items = items
        self.owners = owners

    def lookup(self, key: pa.Scalar, n: int) -> pa.Array:
        """`key`'s value in every record (null if absent); keys are unique within a record."""
        hit = pc.equal(self.keys, key)
        owners = pc.filter(self.owners, hit)
        found = pc.filter(self.items, hit)
        where = pc.index_in(_ramp(n)[:n], value_set=owners)
        return pc.take(found, where)


_RAMP: list[pa.Array] = [pa.array(range(4096), pa.int32())]


def _ramp(n: int) -> pa.Array:
    """0, 1, 2, ... (at least n of them), kept between calls."""
    if len(_RAMP[0]) < n:
        _RAMP[0] = pa.array(range(max(n, 2 * len(_RAMP[0]))), pa.int32())
    return _RAMP[0]


def _offsets_of(arr: pa.Array) -> pa.Array:
    """A binary/string array's offsets, rebased to start at 0."""
    offsets = pa.Array.from_buffers(
        pa.int32(), len(arr) + 1, [None, arr.buffers()[1]], offset=arr.offset
    )
    first = offsets[0]
    return offsets if first.as_py() == 0 else pc.subtract(offsets, first)


def _millis(ms: pa.Array) -> pa.Array:
    return pc.multiply(ms, _I64_1000).cast(TIMESTAMP)
