"""The sink's rows as SEND_BATCH_MESSAGE bodies, encoded straight from the Arrow columns.

A Message per row (a property dict, a per-row md5 for its UNIQ_KEY, then the producer's
per-message checks and encode_batch) cost the sink more than half of its time: 100 B rows went
out at ~75k rows/s. Here each row becomes its batch entry (encode_batch's layout: RocketMQ's
MessageDecoder.encodeMessages) from its column values and a key prefix hashed once per task, in
the order Message would put its properties, so the bytes are those of the Message path
(tests/spark/test_spark_sink_encode.py holds the two equal). Rows with a `properties` column
take the Message path (writer.row_messages): their maps need the per-row filtering anyway."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from ..common import props as P
from ..common.record.layout import BATCH_HEAD, BATCH_MIN_ENTRY, I16
from .errors import OptionError
from .options import WriterOptions

MAX_BATCH_BYTES = 1 << 20  # keep one SEND_BATCH_MESSAGE well under the broker's size limit
MAX_BODY_BYTES = 4 * 1024 * 1024  # the producer's max_message_size
ENTRY_ALLOWANCE = 64  # per entry beyond its body, when chunks are cut by size
_NV = P.NAME_VALUE_SEPARATOR
_SEP = P.PROPERTY_SEPARATOR
_TAGS = P.PROPERTY_TAGS + _NV
_KEYS = P.PROPERTY_KEYS + _NV
_UNIQ = P.PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX + _NV


def key_prefix(query_id: str, batch_id: int, partition: int) -> str:
    """20 hex digits of md5(query, batch, partition): with the row number's 12 a key has the
    32 upper-case hex digits of a RocketMQ unique id (brokers index it, tools accept it)."""
    text = f"{query_id}:{batch_id}:{partition}".encode()
    return hashlib.md5(text, usedforsecurity=False).hexdigest()[:20].upper()


def uniq_key(query_id: str, batch_id: int, partition: int, row: int) -> str:
    """The UNIQ_KEY of a row: equal inputs give equal keys on every run, so a replayed row
    carries its first copy's key."""
    return f"{key_prefix(query_id, batch_id, partition)}{row:012X}"


@dataclass(frozen=True)
class Encoded:
    """One SEND_BATCH_MESSAGE body: `rows` entries for `topic`, the first `first_key`."""

    topic: str
    body: bytes
    uniq_ids: tuple[str, ...]

    @property
    def rows(self) -> int:
        return len(self.uniq_ids)


def column(batch: pa.RecordBatch, name: str) -> list[Any] | None:
    idx = batch.schema.get_field_index(name)
    if idx < 0:
        return None
    col = batch.column(idx)
    if name == "body" and pa.types.is_string(col.type):
        col = col.cast(pa.binary())  # the UTF-8 bytes as they are: no str objects per row
    values: list[Any] = col.to_pylist()
    return values


def _checked(name: str, value: str, row: int) -> str:
    if _NV in value or _SEP in value:
        raise OptionError(name, value, f"row {row}: contains a property separator (\\x01 or \\x02)")
    return value


def encode_rows(
    options: WriterOptions, batch: pa.RecordBatch, prefix: str, first_row: int,
) -> Iterator[Encoded]:
    """The batch's rows (no `properties` column) as bodies of at most sendBatchSize rows and
    MAX_BATCH_BYTES, per topic, in row order within a topic."""
    bodies = column(batch, "body") or []
    topics = column(batch, "topic")
    keys = column(batch, "keys")
    tags = column(batch, "tags")
    limit = options.send_batch_size
    # topic -> (entry parts, uniq ids, bytes so far)
    open_: dict[str, tuple[list[bytes], list[str], int]] = {}
    pack_head = BATCH_HEAD.pack
    pack_i16 = I16.pack
    for i, body in enumerate(bodies):
        row = first_row + i
        topic: str | None = (topics[i] if topics else None) or options.topic
        if topic is None:
            raise OptionError("topic", None, f"row {row} has no topic and no default is set")
        if not body:
            raise OptionError("body", None, f"row {row} has a {'null' if body is None else 'empty'} body")
        assert isinstance(body, bytes)
        if len(body) > MAX_BODY_BYTES:
            raise OptionError("body", None, f"row {row} is {len(body)} bytes; the limit is {MAX_BODY_BYTES}")
        uniq = f"{prefix}{row:012X}"
        text = f"{_UNIQ}{uniq}{_SEP}"
        key = keys[i] if keys else None
        if key:
            text = f"{_KEYS}{_checked('keys', str(key), row)}{_SEP}{text}"
        tag = tags[i] if tags else None
        if tag:
            text = f"{_TAGS}{_checked('tags', str(tag), row)}{_SEP}{text}"
        props = text.encode()
        chunk = open_.get(topic)
        if chunk is not None and (len(chunk[1]) >= limit or chunk[2] + len(body) > MAX_BATCH_BYTES):
            yield Encoded(topic, b"".join(chunk[0]), tuple(chunk[1]))
            chunk = None
        if chunk is None:
            chunk = open_[topic] = ([], [], 0)
        parts, uniqs, size = chunk
        parts += (pack_head(BATCH_MIN_ENTRY + len(body) + len(props), 0, 0, 0, len(body)), body,
                  pack_i16(len(props)), props)
        uniqs.append(uniq)
        open_[topic] = (parts, uniqs, size + len(body) + ENTRY_ALLOWANCE)
    for topic, (parts, uniqs, _) in open_.items():
        yield Encoded(topic, b"".join(parts), tuple(uniqs))
