"""The exactly-once sink: `option("guarantee", "exactly-once")` (docs/spark.md, "Exactly-once").

Each task sends its rows as batch half messages (a RocketMQ transaction each, holding up to
sendBatchSize rows; docs/transactions.md, "Batch half messages"): consumers see none of them
yet. Its commit message names them and a random token of the task attempt. The driver's
commit first records the micro-batch on the broker (sink_record.py: the tokens and halves of
the attempts Spark kept), then ends every half with COMMIT, waiting for the answers. A batch
Spark replays after a crash finds its record: the driver commits what the record names (an
earlier driver may have died among its END_TRANSACTIONs) and rolls back the replay's halves.
Halves nobody ends (a killed task attempt, a killed driver) are decided by the broker's check:
any producer of the sink's group answers from the records; once no such producer is left, the
check's limits discard them (never delivered).

FERRYMQ_SPARK_SINK_FAULT=<point>[:<batchId>] (read when a writer is made) SIGKILLs the Spark
driver at a named point of the commit, for the fault-injection tests: `before-commit` (tasks
prepared, nothing recorded), `mid-commit` (recorded, half of the halves ended),
`after-commit` (everything ended, Spark's commit log not yet written). With
FERRYMQ_SPARK_SINK_FAULT_STOP=<file> set too, the process committing stops there instead
(SIGSTOP, after writing its pid to <file>): a test can then kill a broker in the middle of the
commit and let the driver go on (SIGCONT) against the dead broker."""

from __future__ import annotations

import concurrent.futures
import logging
import os
import signal
import threading
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    WriterCommitMessage,
)

from ..client.admin import AdminClient
from ..client.errors import MessageNotFoundError
from ..client.transaction import TransactionProducer
from ..common import props as P
from ..common.errors import FerryMQError
from ..common.ids import decode_offset_msg_id
from ..common.message import Message
from ..common.record import encode_batch
from .errors import OptionError
from .options import WriterOptions
from .sink_encode import Encoded, encode_rows, key_prefix, row_key
from .sink_record import (
    PROPERTY_BATCH,
    PROPERTY_QUERY,
    PROPERTY_TASK,
    BatchRecord,
    Half,
    SinkChecker,
    admin_for,
    ensure_record_topic,
    find_record,
    record_message,
)
from .writer import (
    InFlight,
    WriteReport,
    cached_producer,
    chunks,
    drop_producer,
    has_properties,
    row_messages,
    stream_ids,
    task_partition,
)

log = logging.getLogger("ferrymq.spark")

FAULT_ENV = "FERRYMQ_SPARK_SINK_FAULT"
FAULT_STOP_ENV = "FERRYMQ_SPARK_SINK_FAULT_STOP"
FAULT_POINTS = ("before-commit", "mid-commit", "after-commit")
END_THREADS = 8  # END_TRANSACTIONs in flight at once from a committing driver


@dataclass(frozen=True)
class PreparedReport(WriteReport):
    """A task's commit message: its rows are on the broker as these open halves."""

    query_id: str = ""
    batch_id: int = 0
    token: str = ""
    halves: tuple[Half, ...] = ()


@dataclass(frozen=True)
class FaultHook:
    point: str
    batch_id: int | None
    stop_file: str | None = None  # stop (and say so in this file) rather than kill

    @classmethod
    def from_env(cls) -> FaultHook | None:
        text = os.environ.get(FAULT_ENV, "").strip()
        if not text:
            return None
        point, _, batch = text.partition(":")
        if point not in FAULT_POINTS:
            raise OptionError(FAULT_ENV, text, f"expected one of {', '.join(FAULT_POINTS)}[:batchId]")
        return cls(point, int(batch) if batch.strip() else None,
                   os.environ.get(FAULT_STOP_ENV, "").strip() or None)

    def hit(self, point: str, batch_id: int) -> None:
        if point != self.point or self.batch_id not in (None, batch_id):
            return
        if self.stop_file is not None:
            log.warning("ferrymq sink: fault point %s of batch %d: stopping (pid in %s)", point,
                        batch_id, self.stop_file)
            # Written whole before it is seen: the test reads the pid once the name exists.
            tmp = f"{self.stop_file}.tmp"
            with open(tmp, "w") as out:
                out.write(str(os.getpid()))
            os.replace(tmp, self.stop_file)
            os.kill(os.getpid(), signal.SIGSTOP)
            return
        log.warning("ferrymq sink: fault point %s of batch %d: killing the driver", point, batch_id)
        # The driver's session (its Python process and JVM), then this worker's own group
        # (PySpark's daemon moves its workers to a group of their own).
        os.killpg(os.getsid(0), signal.SIGKILL)
        os.killpg(os.getpgrp(), signal.SIGKILL)


def hit(fault: FaultHook | None, point: str, batch_id: int) -> None:
    if fault is not None:
        fault.hit(point, batch_id)


ALREADY_ENDED = "the transaction has already ended"  # the broker's remark for a repeated end


class HalfLostError(FerryMQError):
    """A half message the driver commits was ended without being committed: the broker's check
    discarded it (asked transactionCheckMax times) before the micro-batch committed. Its rows
    are in TRANS_CHECK_MAX_TIME_TOPIC, not in the topic; see docs/spark.md, "Exactly-once"."""

    def __init__(self, half: Half) -> None:
        super().__init__(
            f"half message {half.transaction_id} on {half.broker} (topic {half.topic}) was ended "
            "by the broker's check before its micro-batch committed: the batch took longer than "
            "transactionTimeOut + transactionCheckMax x transactionCheckInterval")
        self.half = half


class SinkCommitError(FerryMQError):
    """The driver could not end a micro-batch's half messages; Spark fails the batch, and a
    restart from the checkpoint finishes it from the batch's record."""

    def __init__(self, query_id: str, batch_id: int, failed: int, cause: BaseException) -> None:
        super().__init__(f"micro-batch {batch_id} of query {query_id}: {failed} half message(s) "
                         f"not committed: {cause}")
        self.query_id = query_id
        self.batch_id = batch_id
        self.failed = failed


def _encoded(options: WriterOptions, batch: pa.RecordBatch, prefix: str, row: int) -> Iterator[Encoded]:
    """The batch's halves' bodies: straight from the columns, or (rows with properties) from
    Messages, which may not ask for a delay."""
    if not has_properties(batch):
        yield from encode_rows(options, batch, prefix, row)
        return
    messages = row_messages(options, batch, prefix, row)
    for i, msg in enumerate(messages):
        if msg.delay_level:
            raise OptionError("properties", P.PROPERTY_DELAY_TIME_LEVEL,
                              f"row {row + i}: the exactly-once sink cannot send delayed messages")
    for chunk in chunks(options, messages):
        yield Encoded(chunk[0].topic, encode_batch(chunk), ",".join(m.uniq_key or "" for m in chunk),
                      len(chunk))


# --- tasks ---------------------------------------------------------------------------------------
def transaction_producer(options: WriterOptions) -> TransactionProducer:
    """The worker's producer of the sink's group. It answers the broker's checks too, from the
    records, for as long as the worker lives."""
    return cached_producer(options, TransactionProducer, lambda: TransactionProducer(
        options.producer_group, options.namesrv, listener=SinkChecker(options.namesrv),
        # Members are stored as sent: a compressed batch half is refused.
        compress_over=1 << 30,
    ))


def prepare_batches(
    options: WriterOptions, batches: Iterator[pa.RecordBatch], query_id: str, batch_id: int,
    partition: int,
) -> PreparedReport:
    """Send the task's rows as half messages; nothing is visible until the driver commits."""
    producer = transaction_producer(options)
    token = uuid.uuid4().hex
    marks = {PROPERTY_QUERY: query_id, PROPERTY_BATCH: str(batch_id), PROPERTY_TASK: token,
             P.PROPERTY_TRANSACTION_BATCH: "true"}
    prefix = key_prefix(query_id, batch_id, partition)
    sends = InFlight()
    futures: list[concurrent.futures.Future[Half]] = []

    def send_half(topic: str, body: bytes, first_key: str) -> Half:
        result = producer.send_half(Message(topic, body, properties=dict(marks)))
        return Half(result.broker, topic, result.msg_id, result.queue_offset,
                    decode_offset_msg_id(result.offset_msg_id).offset, first_key)

    row = 0
    try:
        for batch in batches:
            for enc in _encoded(options, batch, prefix, row):
                futures.append(sends.submit(send_half, enc.topic, enc.body, enc.first_key))
            row += batch.num_rows
        sends.wait()
    except Exception:
        sends.settle()
        # Not left to the check: this attempt's halves can go at once.
        halves = [f.result() for f in futures if f.done() and f.exception() is None]
        end_halves(admin_for(options.namesrv), options.producer_group, halves, commit=False)
        drop_producer(options, TransactionProducer)
        raise
    halves = [f.result() for f in futures]
    first = row_key(prefix, 0) if row else None
    return PreparedReport(partition, row, first, query_id, batch_id, token, tuple(halves))


# --- the driver ----------------------------------------------------------------------------------
_pool: concurrent.futures.ThreadPoolExecutor | None = None
_pool_lock = threading.Lock()


def _end_pool() -> concurrent.futures.ThreadPoolExecutor:
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = concurrent.futures.ThreadPoolExecutor(END_THREADS, thread_name_prefix="ferrymq-sink-end")
        return _pool


def end_halves(admin: AdminClient, group: str, halves: Sequence[Half], *, commit: bool) -> int:
    """END_TRANSACTION for each half, several at once, waiting for every answer. A commit
    that fails raises (the first error) once all were tried; a failed rollback is logged, as
    the check rolls it back later. Returns how many were ended."""
    if not halves:
        return 0

    def end(half: Half) -> None:
        remark = admin.end_transaction(
            half.broker, producer_group=group, topic=half.topic, transaction_id=half.transaction_id,
            tran_state_table_offset=half.tran_state_table_offset,
            commit_log_offset=half.commit_log_offset, commit=commit)
        if commit and remark == ALREADY_ENDED:
            # Committed before (a replay, a check's COMMIT), or rolled back or discarded by the
            # check: the broker answers both alike, the topic tells them apart.
            try:
                admin.query_by_uniq_key(half.topic, half.first_key)
            except MessageNotFoundError:
                raise HalfLostError(half) from None

    futures = [_end_pool().submit(end, h) for h in halves]
    errors = [e for e in (f.exception() for f in futures) if e is not None]
    if errors and commit:
        raise errors[0]
    for error in errors:
        log.warning("ferrymq sink: rollback not acknowledged (%s); the broker's check ends it", error)
    return len(halves) - len(errors)


def prepared(messages: Sequence[WriterCommitMessage | None]) -> list[PreparedReport]:
    return [m for m in messages if isinstance(m, PreparedReport)]


def commit_prepared(
    options: WriterOptions, reports: Sequence[PreparedReport], batch_id: int, fault: FaultHook | None,
) -> None:
    if not reports:
        return
    hit(fault, "before-commit", batch_id)
    query_id = reports[0].query_id
    admin = admin_for(options.namesrv)
    group = options.producer_group
    halves = [h for r in reports for h in r.halves]
    recorded = find_record(admin, query_id, batch_id)
    if recorded is not None:
        # A replay of a batch committed before a crash: its first attempt's halves are the
        # batch (some may still be open), this attempt's go back.
        try:
            end_halves(admin, group, recorded.halves, commit=True)
        except Exception as exc:
            raise SinkCommitError(query_id, batch_id, len(recorded.halves), exc) from exc
        mine = set(recorded.halves)
        end_halves(admin, group, [h for h in halves if h not in mine], commit=False)
        log.info("ferrymq sink: micro-batch %d of query %s was committed before; its replay "
                 "is rolled back", batch_id, query_id)
        return
    record = BatchRecord(query_id, batch_id, frozenset(r.token for r in reports), tuple(halves))
    ensure_record_topic(admin)
    # The record goes first: from here on the batch is committed, whoever ends its halves.
    transaction_producer(options).send(record_message(record))
    middle = len(halves) // 2
    try:
        end_halves(admin, group, halves[:middle], commit=True)
        hit(fault, "mid-commit", batch_id)
        end_halves(admin, group, halves[middle:], commit=True)
    except Exception as exc:
        raise SinkCommitError(query_id, batch_id, len(halves), exc) from exc
    hit(fault, "after-commit", batch_id)
    log.info("ferrymq sink: micro-batch %d committed, %d rows in %d half message(s)", batch_id,
             sum(r.rows for r in reports), len(halves))


def abort_prepared(options: WriterOptions, reports: Sequence[PreparedReport], batch_id: int) -> None:
    if not reports:
        return
    admin = admin_for(options.namesrv)
    if find_record(admin, reports[0].query_id, batch_id) is not None:
        return  # committed after all (a commit that failed late); its halves are the record's
    halves = [h for r in reports for h in r.halves]
    ended = end_halves(admin, options.producer_group, halves, commit=False)
    log.warning("ferrymq sink: batch %d aborted; %d of %d half message(s) rolled back", batch_id,
                ended, len(halves))


class ExactlyOnceBatchWriter(DataSourceArrowWriter):  # type: ignore[misc]
    def __init__(self, options: WriterOptions) -> None:
        self.options = options
        # Made on the driver and pickled to every task; the record's key derives from it.
        self.write_id = options.query_id or uuid.uuid4().hex
        self.fault = FaultHook.from_env()

    def write(self, iterator: Iterator[pa.RecordBatch]) -> PreparedReport:
        return prepare_batches(self.options, iterator, self.write_id, self.options.batch_id,
                               task_partition())

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        commit_prepared(self.options, prepared(messages), self.options.batch_id, self.fault)

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        abort_prepared(self.options, prepared(messages), self.options.batch_id)


class ExactlyOnceStreamWriter(DataSourceStreamArrowWriter):  # type: ignore[misc]
    def __init__(self, options: WriterOptions) -> None:
        self.options = options
        self.fault = FaultHook.from_env()

    def write(self, iterator: Iterator[pa.RecordBatch]) -> PreparedReport:
        query_id, batch_id = stream_ids()
        return prepare_batches(self.options, iterator, query_id, batch_id, task_partition())

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        commit_prepared(self.options, prepared(messages), batchId, self.fault)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        abort_prepared(self.options, prepared(messages), batchId)
