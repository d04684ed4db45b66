"""The sink's rows as SEND_BATCH_MESSAGE bodies, encoded straight from the Arrow columns.

A Message per row (a property dict, a per-row md5 for its UNIQ_KEY, then the producer's
per-message checks and encode_batch) cost the sink more than half of its time: 100 B rows went
out at ~75k rows/s. Here the batch entries (encode_batch's layout: RocketMQ's
MessageDecoder.encodeMessages) are made column-wise with Arrow compute kernels: the property
text (TAGS, KEYS, UNIQ_KEY, in the order Message puts them), the big-endian lengths, and one
element-wise concatenation; a chunk of rows is then a slice of the result's data buffer. No
Python object is made per row, so the bytes cost the same with FERRYMQ_NO_EXTENSIONS=1. The
bytes are those of the Message path (tests/spark/test_spark_sink_encode.py holds the two
equal). Rows with a `properties` column take the Message path (writer.row_messages): their maps
need per-row filtering anyway."""

from __future__ import annotations

import array
import bisect
import hashlib
from collections.abc import Iterator
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

from ..common import props as P
from ..common.record.layout import BATCH_MIN_ENTRY, MAX_PROPERTIES_BYTES
from .errors import OptionError
from .options import WriterOptions

MAX_BATCH_BYTES = 1 << 20  # keep one SEND_BATCH_MESSAGE well under the broker's size limit
MAX_BODY_BYTES = 4 * 1024 * 1024  # the producer's max_message_size
ENTRY_ALLOWANCE = 64  # per entry beyond its body, when chunks are cut by size
ROW_DIGITS = 12  # a UNIQ_KEY is 20 hex digits of hash and the row number's 12 decimal ones
_NV = P.NAME_VALUE_SEPARATOR
_SEP = P.PROPERTY_SEPARATOR
_ZEROS = pa.scalar(b"\0" * 12, pa.binary())  # MAGIC, BODYCRC (0 in a batch), FLAG (none set)
_EMPTY = pa.scalar(b"", pa.binary())


def key_prefix(query_id: str, batch_id: int, partition: int) -> str:
    """20 hex digits of md5(query, batch, partition): with the row number's 12 a key has the
    32 upper-case hex digits of a RocketMQ unique id (brokers index it, tools accept it)."""
    text = f"{query_id}:{batch_id}:{partition}".encode()
    return hashlib.md5(text, usedforsecurity=False).hexdigest()[:20].upper()


def uniq_key(query_id: str, batch_id: int, partition: int, row: int) -> str:
    """The UNIQ_KEY of a row: equal inputs give equal keys on every run, so a replayed row
    carries its first copy's key. Decimal row digits are hex digits too, and Arrow formats them
    column-wise."""
    return row_key(key_prefix(query_id, batch_id, partition), row)


def row_key(prefix: str, row: int) -> str:
    return f"{prefix}{row:0{ROW_DIGITS}d}"


@dataclass(frozen=True)
class Encoded:
    """One SEND_BATCH_MESSAGE body: `rows` entries for `topic`, their UNIQ_KEYs comma-separated
    (as a batch's SendResult.msg_id carries them)."""

    topic: str
    body: bytes
    uniq_ids: str
    rows: int

    @property
    def first_key(self) -> str:
        return self.uniq_ids.partition(",")[0]


def _big_endian(values: pa.Array, width: int) -> pa.Array:
    """Non-negative ints as `width`-byte big-endian binary values (Java's byte order)."""
    typ, code = (pa.int32(), "i") if width == 4 else (pa.int16(), "h")
    ints = pc.cast(values, typ)
    native = array.array(code)
    native.frombytes(ints.buffers()[1].to_pybytes())
    native = native[ints.offset:ints.offset + len(ints)]
    native.byteswap()
    fixed = pa.FixedSizeBinaryArray.from_buffers(pa.binary(width), len(ints),
                                                 [None, pa.py_buffer(native)])
    return pc.cast(fixed, pa.binary())


def _first(mask: pa.Array) -> int:
    return int(pc.index(pc.fill_null(mask, False), True).as_py())


def _string_column(batch: pa.RecordBatch, name: str) -> pa.Array | None:
    idx = batch.schema.get_field_index(name)
    return None if idx < 0 else batch.column(idx)


def _property(name: str, option: str, values: pa.Array | None, first_row: int) -> pa.Array | pa.Scalar:
    """`NAME\x01value\x02` per row, empty where the value is null or empty."""
    if values is None:
        return _EMPTY
    for sep in (_NV, _SEP):
        bad = pc.match_substring(values, sep)
        if pc.any(bad).as_py():
            row = _first(bad)
            raise OptionError(option, values[row].as_py(),
                              f"row {first_row + row}: contains a property separator (\\x01 or \\x02)")
    present = pc.fill_null(pc.greater(pc.binary_length(values), 0), False)
    text = pc.binary_join_element_wise(f"{name}{_NV}", values, _SEP, "")
    return pc.cast(pc.if_else(present, text, ""), pa.binary())


def _bodies(batch: pa.RecordBatch, first_row: int) -> pa.Array:
    body = batch.column(batch.schema.get_field_index("body"))
    if pa.types.is_string(body.type):
        body = body.cast(pa.binary())  # the UTF-8 bytes as they are
    if body.null_count:
        raise OptionError("body", None, f"row {first_row + _first(pc.is_null(body))} has a null body")
    lengths = pc.binary_length(body)
    if len(body) and pc.min(lengths).as_py() == 0:
        raise OptionError("body", None, f"row {first_row + _first(pc.equal(lengths, 0))} has an empty body")
    if len(body) and pc.max(lengths).as_py() > MAX_BODY_BYTES:
        row = _first(pc.greater(lengths, MAX_BODY_BYTES))
        raise OptionError("body", None, f"row {first_row + row} is {lengths[row].as_py()} bytes; "
                          f"the limit is {MAX_BODY_BYTES}")
    return body


def _topics(options: WriterOptions, batch: pa.RecordBatch, first_row: int) -> pa.Array | None:
    """Each row's topic, or None when every row goes to the `topic` option."""
    column = _string_column(batch, "topic")
    if column is None or column.null_count == len(column):
        if options.topic is None:
            raise OptionError("topic", None, f"row {first_row} has no topic and no default is set")
        return None
    given = pc.fill_null(pc.greater(pc.utf8_length(column), 0), False)
    if options.topic is not None:
        return pc.if_else(given, column, options.topic)
    if not pc.all(given).as_py():
        raise OptionError("topic", None, f"row {first_row + _first(pc.invert(given))} has no topic "
                          "and no default is set")
    return column


def encode_rows(
    options: WriterOptions, batch: pa.RecordBatch, prefix: str, first_row: int,
) -> Iterator[Encoded]:
    """The batch's rows (no `properties` column) as bodies of at most sendBatchSize rows and
    MAX_BATCH_BYTES, per topic, in row order within a topic."""
    n = batch.num_rows
    if n == 0:
        return
    body = _bodies(batch, first_row)
    topics = _topics(options, batch, first_row)
    rows = pc.cast(pa.array(range(first_row, first_row + n), pa.int64()), pa.string())
    uniq = pc.binary_join_element_wise(prefix, pc.utf8_lpad(rows, ROW_DIGITS, "0"), "")
    props = pc.binary_join_element_wise(
        _property(P.PROPERTY_TAGS, "tags", _string_column(batch, "tags"), first_row),
        _property(P.PROPERTY_KEYS, "keys", _string_column(batch, "keys"), first_row),
        f"{P.PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX}{_NV}".encode(), pc.cast(uniq, pa.binary()),
        _SEP.encode(), _EMPTY)
    body_len = pc.binary_length(body)
    props_len = pc.binary_length(props)
    if pc.max(props_len).as_py() > MAX_PROPERTIES_BYTES:
        row = _first(pc.greater(props_len, MAX_PROPERTIES_BYTES))
        raise OptionError("keys", None, f"row {first_row + row}: its keys and tags make "
                          f"{props_len[row].as_py()} bytes of properties; the limit is {MAX_PROPERTIES_BYTES}")
    total = pc.add(pc.add(body_len, props_len), BATCH_MIN_ENTRY)
    # TOTALSIZE, MAGIC, BODYCRC, FLAG, BODYLEN, BODY, PROPLEN, PROPS
    entries = pc.binary_join_element_wise(
        _big_endian(total, 4), _ZEROS, _big_endian(body_len, 4), body, _big_endian(props_len, 2), props, _EMPTY)
    groups = [(options.topic or "", None)] if topics is None else [
        (str(t), pc.indices_nonzero(pc.equal(topics, t))) for t in pc.unique(topics).to_pylist()]
    for topic, picked in groups:
        if picked is None:
            yield from _chunks(options, topic, entries, uniq, body_len)
        else:
            yield from _chunks(options, topic, entries.take(picked), uniq.take(picked),
                               body_len.take(picked))


def _chunks(options: WriterOptions, topic: str, entries: pa.Array, uniq: pa.Array,
            body_len: pa.Array) -> Iterator[Encoded]:
    """Slices of at most sendBatchSize entries whose bodies (plus ENTRY_ALLOWANCE each) stay
    within MAX_BATCH_BYTES, cut as writer.chunks cuts a list of Messages."""
    n = len(entries)
    entries = pa.concat_arrays([entries])  # offset 0, so the offsets index the data buffer
    offsets = pa.Array.from_buffers(pa.int32(), n + 1, [None, entries.buffers()[1]]).to_pylist()
    data = entries.buffers()[2]
    limit = options.send_batch_size
    sized = pc.add(pc.cast(body_len, pa.int64()), ENTRY_ALLOWANCE)
    if pc.max(sized).as_py() * limit <= MAX_BATCH_BYTES:  # no chunk of `limit` rows is too big
        fits: list[int] = []
        before = [0] * (n + 1)
    else:
        # fits[k]: the allowance of the entries before k plus k's body; k joins a chunk that
        # begins at i when fits[k] - before[i] <= MAX_BATCH_BYTES (increasing in k: bisect).
        through = pc.cumulative_sum(sized)
        fits = pc.subtract(through, ENTRY_ALLOWANCE).to_pylist()
        before = [0, *through.to_pylist()]
    i = 0
    while i < n:
        end = min(n, i + limit)
        if fits:
            end = max(i + 1, min(end, bisect.bisect_right(fits, MAX_BATCH_BYTES + before[i])))
        keys = pa.ListArray.from_arrays(pa.array([0, end - i], pa.int32()), uniq.slice(i, end - i))
        yield Encoded(topic, data.slice(offsets[i], offsets[end] - offsets[i]).to_pybytes(),
                      str(pc.binary_join(keys, ",")[0].as_py()), end - i)
        i = end
