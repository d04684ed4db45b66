"""PULL_MESSAGE bodies (stored-message records back to back) to Arrow record batches.

Three decoders give the same rows:
- the compiled `_ccolumns` (built by the install): one C pass checks the records, a second
  writes every column straight into Arrow's buffer layouts, which become arrays without a copy;
- its pure-Python twin `decode_kernels` (FERRYMQ_NO_EXTENSIONS=1, or no compiler at install):
  Arrow kernels gather each field for all records at once;
- the exact record-by-record path of `common.record`, for a response either of the first two
  refuses as a whole: compressed bodies, IPv6 hosts, messages without a UNIQ_KEY, lenient
  property text, bad UTF-8, and broken records, whose error it reports."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from ..common.message import MessageExt
from ..common.record import MessageDecodeError, decode_records, record_starts
from ..common.speedups import compiled
from . import decode_kernels
from .schema import (
    ARROW_HEADER,
    ARROW_HEADERS_FIELD,
    ARROW_SCHEMA,
    ARROW_SCHEMA_WITH_HEADERS,
    COLUMNS,
    PROPERTIES,
    TIMESTAMP,
)

_columns: Any = compiled("ferrymq.spark._ccolumns")
IMPLEMENTATION = "cython" if _columns is not None else "arrow-kernels"

__all__ = ["IMPLEMENTATION", "decode_to_batch", "empty_batch", "messages_to_batch",
           "record_starts", "with_headers"]


def empty_batch() -> pa.RecordBatch:
    return pa.RecordBatch.from_arrays(
        [pa.array([], f.type) for f in ARROW_SCHEMA], schema=ARROW_SCHEMA
    )


def decode_to_batch(buf: bytes | list[bytes], broker: str) -> pa.RecordBatch:
    """All records of `buf` as one batch with schema ARROW_SCHEMA. A list of buffers (each
    of whole records: pulled bodies) reads as their concatenation; the compiled decoder reads
    them where they are."""
    if not buf:
        return empty_batch()
    if isinstance(buf, list) and _columns is None:
        buf = b"".join(buf)  # once, for the kernels and, if they refuse, the exact path
    batch = fast_batch(buf, broker)
    if batch is None:
        whole = b"".join(buf) if isinstance(buf, list) else buf
        batch = messages_to_batch(decode_records(whole, broker=broker), broker)
    return batch


def fast_batch(buf: bytes | list[bytes], broker: str, columns: Any = _columns
               ) -> pa.RecordBatch | None:
    """The batch from the compiled decoder module `columns` (the one in use by default), or
    from its Arrow-kernel twin when `columns` is None; None when the exact path must decode
    `buf`."""
    if columns is not None:
        got = columns.columns(buf)
        return None if got is None else _from_columns(got, broker)
    if isinstance(buf, list):
        buf = b"".join(buf)
    if not buf:
        # Bodies that hold no record (a list of empty ones is not falsy): no rows, as the exact
        # codec gives. The kernels need a record to index: on none they raised ArrowInvalid.
        return empty_batch()
    try:
        return decode_kernels.decode(buf, broker, record_starts(buf))
    except (decode_kernels.Slow, MessageDecodeError):
        return None  # a broken response too: the exact path says what is wrong with it


def _string(n: int, offsets: bytes, data: bytes, valid: bytes | None = None) -> pa.Array:
    buffers = [None if valid is None else pa.py_buffer(valid), pa.py_buffer(offsets),
               pa.py_buffer(data)]
    return pa.Array.from_buffers(pa.string(), n, buffers)


def _fixed(typ: pa.DataType, n: int, data: bytes) -> pa.Array:
    return pa.Array.from_buffers(typ, n, [None, pa.py_buffer(data)])


def _from_columns(got: tuple[int, int, list[bytes]], broker: str) -> pa.RecordBatch | None:
    n, m, b = got
    (topic_off, topic_data, qid, qoff, uniq_off, uniq_data, keys_valid, keys_off, keys_data,
     tags_valid, tags_off, tags_data, body_off, body_data, map_off, pkey_off, pkey_data,
     pval_off, pval_data, born, store, reconsume) = b
    topic = _string(n, topic_off, topic_data)
    pkeys = _string(m, pkey_off, pkey_data)
    pvals = _string(m, pval_off, pval_data)
    try:
        # msg_id, keys and tags are copies of property values: checking the values covers them.
        for arr in (topic, pkeys, pvals):
            arr.validate(full=True)
    except pa.ArrowInvalid:
        return None  # not UTF-8: the exact path replaces the bad bytes
    props = pa.MapArray.from_arrays(_fixed(pa.int32(), n + 1, map_off), pkeys, pvals,
                                    type=PROPERTIES)
    columns = [
        topic,
        pa.repeat(pa.scalar(broker, pa.string()), n),
        _fixed(pa.int32(), n, qid),
        _fixed(pa.int64(), n, qoff),
        _string(n, uniq_off, uniq_data),
        _string(n, keys_off, keys_data, keys_valid),
        _string(n, tags_off, tags_data, tags_valid),
        pa.Array.from_buffers(pa.binary(), n, [None, pa.py_buffer(body_off),
                                               pa.py_buffer(body_data)]),
        props,
        _fixed(TIMESTAMP, n, born),
        _fixed(TIMESTAMP, n, store),
        _fixed(pa.int32(), n, reconsume),
    ]
    return pa.RecordBatch.from_arrays(columns, schema=ARROW_SCHEMA)


def messages_to_batch(msgs: Sequence[MessageExt], broker: str) -> pa.RecordBatch:
    """The exact path: decoded messages (common.record) to a batch."""
    columns = [
        pa.array([m.topic for m in msgs], pa.string()),
        pa.array([broker or m.broker for m in msgs], pa.string()),
        pa.array([m.queue_id for m in msgs], pa.int32()),
        pa.array([m.queue_offset for m in msgs], pa.int64()),
        pa.array([m.msg_id for m in msgs], pa.string()),
        pa.array([m.keys for m in msgs], pa.string()),
        pa.array([m.tags for m in msgs], pa.string()),
        pa.array([m.body for m in msgs], pa.binary()),
        pa.array([list(m.properties.items()) for m in msgs], PROPERTIES),
        _millis(pa.array([m.born_timestamp for m in msgs], pa.int64())),
        _millis(pa.array([m.store_timestamp for m in msgs], pa.int64())),
        pa.array([m.reconsume_times for m in msgs], pa.int32()),
    ]
    return pa.RecordBatch.from_arrays(columns, schema=ARROW_SCHEMA)


def _millis(ms: pa.Array) -> pa.Array:
    return pc.multiply(ms, pa.scalar(1000, pa.int64())).cast(TIMESTAMP)


def with_headers(batch: pa.RecordBatch) -> pa.RecordBatch:
    """`batch` (ARROW_SCHEMA) with the `headers` column built from `properties`: the map's
    entries become the list's elements, sharing its offsets and key strings."""
    props = batch.column(COLUMNS.index("properties"))
    assert isinstance(props, pa.MapArray)
    offsets = props.offsets  # into the unsliced keys and items, as a slice's are
    first, last = offsets[0].as_py(), offsets[-1].as_py()
    if first:  # a mask cannot go with offsets that do not start at 0 (Arrow refuses)
        offsets = pc.subtract(offsets, pa.scalar(first, pa.int32()))
    entries = pa.StructArray.from_arrays(
        [props.keys.slice(first, last - first),
         props.items.slice(first, last - first).cast(pa.binary())],
        fields=list(ARROW_HEADER),
    )
    empty = pc.equal(offsets[1:], offsets[:-1])
    headers = pa.ListArray.from_arrays(
        offsets, entries, type=ARROW_HEADERS_FIELD.type, mask=empty
    )
    return pa.RecordBatch.from_arrays(
        [*batch.columns, headers], schema=ARROW_SCHEMA_WITH_HEADERS
    )
