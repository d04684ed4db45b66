"""The sink: `df.write.format("ferrymq")` and `df.writeStream.format("ferrymq")`.

Columns: `body` (binary or string, required); optional `topic` (string; null or absent means
the `topic` option), `keys` (string, space separated), `tags` (string), `properties`
(map<string,string>). Other columns are ignored. Options: namesrv, topic, producerGroup,
sendBatchSize; for batch writes also queryId and batchId (see below).

Guarantee: at-least-once. RocketMQ has no producer transactions here, so messages are on the
broker as soon as a task sends them; a task retried by Spark, or a micro-batch replayed after
a driver crash, sends its rows again. Every row carries a deterministic UNIQ_KEY derived from
(query id, batch id, partition, row number), so a replayed row has the same UNIQ_KEY as its
first copy and consumers can drop duplicates by msg_id. A batch write (`df.write`) has no
query: its keys derive from a random write id, unless the options `queryId` and `batchId`
are given (a foreachBatch function passes its query id and batch id, and its replays are
recognisable too). `commit(batchId)` only records the
batch (idempotent); `abort` after a commit that took effect does nothing, and otherwise
cannot take sent rows back (it says so in the log)."""

from __future__ import annotations

import atexit
import concurrent.futures
import logging
import threading
import uuid
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, TypeVar

import pyarrow as pa
from pyspark import TaskContext
from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    WriterCommitMessage,
)
from pyspark.sql.types import BinaryType, MapType, StringType, StructType

from ..client.producer import Producer
from ..common import props as P
from ..common.message import Message
from .errors import OptionError
from .options import WriterOptions
from .sink_encode import MAX_BATCH_BYTES, encode_rows, key_prefix, row_key
from .sink_encode import uniq_key as uniq_key  # where callers have imported it from

log = logging.getLogger("ferrymq.spark")

# Spark's local properties naming the running streaming query and micro-batch.
QUERY_ID_PROPERTY = "sql.streaming.queryId"
BATCH_ID_PROPERTY = "streaming.sql.batchId"
IN_FLIGHT = 4  # sends of one task awaiting their answers at once

# Set by the broker or the consumer side; copying them from rows read elsewhere would lie.
_DROPPED = frozenset(
    {
        P.PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX,
        P.PROPERTY_MIN_OFFSET,
        P.PROPERTY_MAX_OFFSET,
        P.PROPERTY_REAL_TOPIC,
        P.PROPERTY_REAL_QUEUE_ID,
        P.PROPERTY_RETRY_TOPIC,
        P.PROPERTY_CONSUME_START_TIMESTAMP,
        P.PROPERTY_RECONSUME_TIME,
        P.PROPERTY_MAX_RECONSUME_TIMES,
        P.PROPERTY_ORIGIN_MESSAGE_ID,
        P.PROPERTY_CLUSTER,
    }
)


@dataclass(frozen=True)
class WriteReport(WriterCommitMessage):  # type: ignore[misc]
    partition: int
    rows: int
    first_key: str | None


def check_schema(schema: StructType, options: WriterOptions) -> None:
    fields = {f.name: f.dataType for f in schema.fields}
    body = fields.get("body")
    if not isinstance(body, BinaryType | StringType):
        raise OptionError("schema", str(schema.simpleString()), "needs a binary or string 'body'")
    for name in ("topic", "keys", "tags"):
        if name in fields and not isinstance(fields[name], StringType):
            raise OptionError("schema", schema.simpleString(), f"'{name}' must be a string")
    if "properties" in fields:
        typ = fields["properties"]
        if not (
            isinstance(typ, MapType)
            and isinstance(typ.keyType, StringType)
            and isinstance(typ.valueType, StringType)
        ):
            raise OptionError(
                "schema", schema.simpleString(), "'properties' must be map<string,string>"
            )
    if "topic" not in fields and options.topic is None:
        raise OptionError("topic", None, "name a topic, or give the rows a 'topic' column")


_producers: dict[tuple[str, str, type[Producer]], Producer] = {}
_producers_lock = threading.Lock()
ProducerT = TypeVar("ProducerT", bound=Producer)


def cached_producer(options: WriterOptions, kind: type[ProducerT],
                    make: Callable[[], ProducerT]) -> ProducerT:
    """One started producer per (name server, group, kind) per Python worker; workers are
    reused across tasks, and starting a producer per task would cost more than small batches."""
    key = (options.namesrv, options.producer_group, kind)
    with _producers_lock:
        producer = _producers.get(key)
        if not isinstance(producer, kind):
            producer = make()
            producer.start()
            _producers[key] = producer
        return producer


def producer_for(options: WriterOptions) -> Producer:
    return cached_producer(
        options, Producer, lambda: Producer(options.producer_group, options.namesrv)
    )


def drop_producer(options: WriterOptions, kind: type[Producer] = Producer) -> None:
    with _producers_lock:
        producer = _producers.pop((options.namesrv, options.producer_group, kind), None)
    if producer is not None:
        try:
            producer.shutdown()
        except Exception:
            log.debug("producer shutdown failed", exc_info=True)


@atexit.register
def _shutdown_all() -> None:
    with _producers_lock:
        producers = list(_producers.values())
        _producers.clear()
    for producer in producers:
        try:
            producer.shutdown()
        except Exception:
            log.debug("producer shutdown failed", exc_info=True)


_send_pool: concurrent.futures.ThreadPoolExecutor | None = None
_send_pool_lock = threading.Lock()
R = TypeVar("R")


class InFlight:
    """A task's sends, up to IN_FLIGHT at once: one at a time, a task waited a round trip
    (and the broker's put) per send with nothing else to do. Each send is a blocking producer
    call on a thread of the worker's pool (the producer is thread-safe)."""

    def __init__(self) -> None:
        global _send_pool
        with _send_pool_lock:
            if _send_pool is None:
                _send_pool = concurrent.futures.ThreadPoolExecutor(
                    IN_FLIGHT, thread_name_prefix="ferrymq-sink-send")
            self._pool = _send_pool
        self._pending: deque[concurrent.futures.Future[Any]] = deque()

    def submit(self, fn: Callable[..., R], *args: Any) -> concurrent.futures.Future[R]:
        while len(self._pending) >= IN_FLIGHT:
            self._pending.popleft().result()
        future = self._pool.submit(fn, *args)
        self._pending.append(future)
        return future

    def wait(self) -> None:
        """Every send answered; the first failure raises, after all have ended."""
        pending, self._pending = list(self._pending), deque()
        concurrent.futures.wait(pending)
        for future in pending:
            future.result()

    def settle(self) -> None:
        """After a failure: let the sends still out end, whatever their outcome."""
        concurrent.futures.wait(list(self._pending))
        self._pending.clear()


def has_properties(batch: pa.RecordBatch) -> bool:
    return bool(batch.schema.get_field_index("properties") >= 0)


def send_batches(
    options: WriterOptions,
    batches: Iterator[pa.RecordBatch],
    query_id: str,
    batch_id: int,
    partition: int,
) -> WriteReport:
    producer = producer_for(options)
    prefix = key_prefix(query_id, batch_id, partition)
    sends = InFlight()
    row = 0
    try:
        for batch in batches:
            if has_properties(batch):
                messages = row_messages(options, batch, prefix, row)
                _send(producer, options, messages, sends)
            else:
                for enc in encode_rows(options, batch, prefix, row):
                    sends.submit(producer.send_encoded_batch, enc.topic, enc.body, enc.uniq_ids)
            row += batch.num_rows
        sends.wait()
    except Exception:
        sends.settle()
        drop_producer(options)
        raise
    return WriteReport(partition, row, row_key(prefix, 0) if row else None)


def _column(batch: pa.RecordBatch, name: str) -> list[Any] | None:
    idx = batch.schema.get_field_index(name)
    return None if idx < 0 else batch.column(idx).to_pylist()


def row_messages(
    options: WriterOptions, batch: pa.RecordBatch, prefix: str, first_row: int,
) -> list[Message]:
    """A Message per row: the way of rows with a `properties` column (sink_encode.py encodes
    the others straight from their columns, to the same bytes)."""
    bodies = _column(batch, "body") or []
    topics = _column(batch, "topic")
    keys = _column(batch, "keys")
    tags = _column(batch, "tags")
    props = _column(batch, "properties")
    out: list[Message] = []
    for i, body in enumerate(bodies):
        topic = (topics[i] if topics else None) or options.topic
        if topic is None:
            raise OptionError(
                "topic", None, f"row {first_row + i} has no topic and no default is set"
            )
        if body is None:
            raise OptionError("body", None, f"row {first_row + i} has a null body")
        extra = (
            {k: v for k, v in (props[i] or []) if k not in _DROPPED and v is not None}
            if props
            else {}
        )
        msg = Message(
            topic,
            body.encode() if isinstance(body, str) else body,
            tags=tags[i] if tags else None,
            keys=keys[i] if keys else None,
            properties=extra,
        )
        msg.properties[P.PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX] = row_key(prefix, first_row + i)
        out.append(msg)
    return out


def chunks(options: WriterOptions, messages: list[Message]) -> Iterator[list[Message]]:
    """Messages grouped per topic into sends of at most sendBatchSize messages and
    MAX_BATCH_BYTES (bodies plus an allowance for properties)."""
    by_topic: dict[str, list[Message]] = {}
    for msg in messages:
        by_topic.setdefault(msg.topic, []).append(msg)
    for group in by_topic.values():
        chunk: list[Message] = []
        size = 0
        for msg in group:
            if chunk and (
                len(chunk) >= options.send_batch_size or size + len(msg.body) > MAX_BATCH_BYTES
            ):
                yield chunk
                chunk, size = [], 0
            chunk.append(msg)
            size += len(msg.body) + 64
        if chunk:
            yield chunk


def _send(producer: Producer, options: WriterOptions, messages: list[Message], sends: InFlight) -> None:
    """Batched sends per topic; delayed messages one by one (a batch cannot carry a delay)."""
    batchable: list[Message] = []
    for msg in messages:
        if msg.delay_level:
            sends.submit(producer.send, msg)
        else:
            batchable.append(msg)
    for chunk in chunks(options, batchable):
        sends.submit(producer.send_batch, chunk)


def task_partition() -> int:
    ctx = TaskContext.get()
    return ctx.partitionId() if ctx is not None else 0


def stream_ids() -> tuple[str, int]:
    """The running streaming query's id and micro-batch id, as Spark tells a task."""
    ctx = TaskContext.get()
    query_id = (ctx.getLocalProperty(QUERY_ID_PROPERTY) if ctx else None) or "no-query"
    batch_text = ctx.getLocalProperty(BATCH_ID_PROPERTY) if ctx else None
    batch_id = int(batch_text) if batch_text and batch_text.lstrip("-").isdigit() else 0
    return query_id, batch_id


class FerryMQBatchWriter(DataSourceArrowWriter):  # type: ignore[misc]
    def __init__(self, options: WriterOptions) -> None:
        self.options = options
        # Made once on the driver and pickled to every task: retried tasks reuse it. Options
        # queryId/batchId make it stable across runs (e.g. inside foreachBatch).
        self.write_id = options.query_id or uuid.uuid4().hex

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriteReport:
        return send_batches(
            self.options, iterator, self.write_id, self.options.batch_id, task_partition()
        )

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        rows = sum(m.rows for m in messages if isinstance(m, WriteReport))
        log.info("ferrymq sink: batch write %s sent %d rows", self.write_id, rows)

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        sent = sum(m.rows for m in messages if isinstance(m, WriteReport))
        log.warning(
            "ferrymq sink: write %s aborted; %d rows already sent stay on the broker"
            " (at-least-once; their UNIQ_KEYs identify them)",
            self.write_id,
            sent,
        )


class FerryMQStreamWriter(DataSourceStreamArrowWriter):  # type: ignore[misc]
    def __init__(self, options: WriterOptions) -> None:
        self.options = options
        self._committed: set[int] = set()

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriteReport:
        query_id, batch_id = stream_ids()
        return send_batches(self.options, iterator, query_id, batch_id, task_partition())

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        if batchId in self._committed:
            return  # a replayed batch: its rows went out again with the same UNIQ_KEYs
        self._committed.add(batchId)
        rows = sum(m.rows for m in messages if isinstance(m, WriteReport))
        log.info("ferrymq sink: micro-batch %d committed, %d rows", batchId, rows)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        if batchId in self._committed:
            return  # the commit took effect; nothing to undo
        sent = sum(m.rows for m in messages if isinstance(m, WriteReport))
        log.warning(
            "ferrymq sink: micro-batch %d aborted; %d rows already sent stay on the broker"
            " and are sent again (same UNIQ_KEYs) when the batch is retried",
            batchId,
            sent,
        )
