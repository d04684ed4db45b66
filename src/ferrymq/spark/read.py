"""Executor side: read one queue's offset range into Arrow record batches.

Pulls are read ahead: up to _WINDOW of them are on their way on the task's connection to the
broker (`puller`: pipelined on one socket, answered on the task's own thread) while the task
decodes and Spark takes the previous batch, so the broker's work, the decoding and the
hand-over to the JVM overlap. Answers are decoded together until `rows_per_batch` rows
(decoding many rows at once amortises the per-batch work). One AdminClient per name server
(for routes) and one connection per broker are kept per Python worker: Spark reuses workers
across tasks, and connecting per micro-batch would cost more than the pull."""

from __future__ import annotations

import atexit
import logging
import threading
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Protocol

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.datasource import InputPartition

from ..client.admin import AdminClient
from ..client.results import PullStatus, RawPullResult
from ..common.message import MessageQueue
from .decode import decode_to_batch, with_headers
from .errors import DataLossError
from .offsets import QueueKey
from .puller import BrokerPuller, close_connections

log = logging.getLogger("ferrymq.spark")

# Pulls in flight per partition: with the default sizes (1024 messages a pull, 8192 rows a
# batch) the next batch is on its way while Spark takes the current one.
_WINDOW = 8
# A read of a pull's answer that waits this long fails the task (Spark retries it).
_PULL_TIMEOUT = 30.0
_PULL_WAIT = 60.0  # the ceiling a future's result is asked with (the socket's is below it)


@dataclass(frozen=True)
class QueueRange(InputPartition):  # type: ignore[misc]
    """One Spark partition: offsets [start, end) of one queue. Picklable, connection-free."""

    namesrv: str
    key: QueueKey
    start: int
    end: int
    fail_on_data_loss: bool
    pull_batch_size: int
    rows_per_batch: int
    # Tag filter: the broker filters by the expression's tag hash codes, which collide, and a
    # filtered pull may scan past the slice it was planned for; rows are checked again here.
    # SQL92: the broker evaluates the selector exactly; only the slice is checked here.
    expression: str = "*"
    tags: frozenset[str] = frozenset()
    expression_type: str = "TAG"
    include_headers: bool = False  # add Kafka's `headers` column (decode.with_headers)

    @property
    def filtered(self) -> bool:
        return bool(self.tags) or self.expression_type != "TAG"

    def __repr__(self) -> str:
        return f"QueueRange({self.key} [{self.start}, {self.end}))"


@dataclass(frozen=True)
class QueueRanges(InputPartition):  # type: ignore[misc]
    """Several queue ranges read one after the other in one Spark partition (maxPartitions)."""

    ranges: tuple[QueueRange, ...]

    def __repr__(self) -> str:
        return f"QueueRanges({', '.join(map(repr, self.ranges))})"


def read_partition(partition: InputPartition) -> Iterator[pa.RecordBatch]:
    """The rows of a partition planned by `planning`: one queue range or a group of them."""
    if isinstance(partition, QueueRanges):
        for part in partition.ranges:
            yield from read_range(part)
    elif type(partition) is InputPartition and partition.value is None:
        # What Spark reads when partitions() planned none (an empty topic, or nothing between
        # the starting and ending offsets): it asks for one partition of its own anyway.
        return
    else:
        assert isinstance(partition, QueueRange), partition
        yield from read_range(partition)


_clients: dict[str, AdminClient] = {}
_clients_lock = threading.Lock()


def admin_for(namesrv: str) -> AdminClient:
    with _clients_lock:
        client = _clients.get(namesrv)
        if client is None:
            client = _clients[namesrv] = AdminClient(namesrv)
        return client


def drop_admin(namesrv: str) -> None:
    """Forget a client after an error, so the next task starts on a fresh connection."""
    with _clients_lock:
        client = _clients.pop(namesrv, None)
    if client is not None:
        try:
            client.close()
        except Exception:  # closing a broken client must not hide the original error
            log.debug("closing admin client failed", exc_info=True)


@atexit.register
def _close_all() -> None:
    for namesrv in list(_clients):
        drop_admin(namesrv)


def read_range(part: QueueRange) -> Iterator[pa.RecordBatch]:
    """Yield the rows of `part` in queue order, each offset exactly once."""
    if part.end <= part.start:
        return
    try:
        yield from _read(part, BrokerPuller(admin_for(part.namesrv), _PULL_TIMEOUT))
    except Exception:
        drop_admin(part.namesrv)
        close_connections()
        raise


# A pulled body, the offsets it was taken for [first, end) and how many offsets that is.
_Item = tuple[bytes, int, int]


class PullFuture(Protocol):
    """A pull on its way (a concurrent Future fits; puller.PendingPull is the reader's)."""

    def result(self, timeout: float | None = None) -> RawPullResult: ...

    def cancel(self) -> bool: ...


class Puller(Protocol):
    """What the reader needs of a client (puller.BrokerPuller; tests pass fakes and spies)."""

    def submit_pull_raw(
        self, mq: MessageQueue, offset: int, max_nums: int = 32, *, expression: str = "*",
        expression_type: str = "TAG",
    ) -> PullFuture: ...


def _read(part: QueueRange, admin: Puller) -> Iterator[pa.RecordBatch]:
    pending: list[_Item] = []
    pending_rows = 0
    for item in _pulled(part, admin):
        pending.append(item)
        pending_rows += item[2] - item[1]
        if pending_rows >= part.rows_per_batch:
            batch = _decode(pending, part)
            pending, pending_rows = [], 0
            yield batch
    if pending:
        batch = _decode(pending, part)
        if batch.num_rows:
            yield batch


def _decode(items: list[_Item], part: QueueRange) -> pa.RecordBatch:
    batch = _decode_rows(items, part)
    return with_headers(batch) if part.include_headers else batch


def _decode_rows(items: list[_Item], part: QueueRange) -> pa.RecordBatch:
    if part.filtered:
        return _decode_filtered(items, part)
    batch = decode_to_batch([item[0] for item in items], part.key.broker)
    offsets = batch.column(3)
    last = offsets[-1].as_py() if batch.num_rows else None
    if last is not None and last >= part.end:
        # A broker may answer with more than asked for; the range's end is exact.
        batch = batch.filter(pc.less(offsets, pa.scalar(part.end, pa.int64())))
    return batch


def _decode_filtered(items: list[_Item], part: QueueRange) -> pa.RecordBatch:
    """Each body on its own: a filtered pull may hold rows beyond its slice, which the next
    slice's pull returns too."""
    wanted = pa.array(sorted(part.tags), pa.string()) if part.tags else None
    batches = []
    for body, first, end in items:
        batch = decode_to_batch(body, part.key.broker)
        offsets = batch.column(3)
        keep = pc.and_(
            pc.greater_equal(offsets, pa.scalar(first, pa.int64())),
            pc.less(offsets, pa.scalar(min(end, part.end), pa.int64())),
        )
        if wanted is not None:
            keep = pc.and_(keep, pc.is_in(batch.column(6), value_set=wanted))
        batches.append(batch.filter(pc.fill_null(keep, False)))
    return batches[0] if len(batches) == 1 else pa.concat_batches(batches)


def _pulled(part: QueueRange, admin: Puller) -> Iterator[_Item]:
    """Pull [start, end) in order; each item is a response body and the offsets it covers.

    Up to _WINDOW pulls are in flight at once, for consecutive slices of the range (a pull
    asks for at most pull_batch_size messages from a given offset, so the slices are known
    in advance), and they stay in flight while the caller works on what was yielded. One
    request at a time would leave the broker idle for a round trip per pull."""
    inflight: deque[tuple[int, int, PullFuture]] = deque()
    planned = part.start
    offset = part.start  # the next offset to hand over
    try:
        while offset < part.end:
            while len(inflight) < _WINDOW and planned < part.end:
                want = min(part.pull_batch_size, part.end - planned)
                future = admin.submit_pull_raw(
                    part.key.mq, planned, want, expression=part.expression,
                    expression_type=part.expression_type,
                )
                inflight.append((planned, want, future))
                planned += want
            first, want, future = inflight.popleft()
            res = future.result(_PULL_WAIT)
            if first != offset:  # an earlier answer was short: re-plan from `offset`
                _cancel(inflight)
                planned = offset
                continue
            item, offset = _take(part, res, offset, first + want)
            if offset < first + want:  # short answer or a gap: re-plan from there
                _cancel(inflight)
                planned = offset
            if item is not None:
                yield item
    finally:  # also when the task stops reading early: no pull is left running
        _cancel(inflight)


def _cancel(inflight: deque[tuple[int, int, PullFuture]]) -> None:
    while inflight:
        inflight.popleft()[2].cancel()


def _take(
    part: QueueRange, res: RawPullResult, offset: int, slice_end: int
) -> tuple[_Item | None, int]:
    """One answer for a pull at `offset`: the item to hand over (if any) and the next offset
    to read."""
    if res.status is PullStatus.FOUND:
        count = min(res.next_begin_offset, slice_end) - offset
        if count <= 0:
            raise _loss(part, offset, res.min_offset, "empty found answer")
        return (res.body, offset, offset + count), offset + count
    if res.status is PullStatus.NO_MATCHED_MSG and res.next_begin_offset > offset:
        return None, min(res.next_begin_offset, slice_end)  # filtered out by the broker
    # NO_NEW_MSG or OFFSET_ILLEGAL before the planned end: the messages are gone.
    first = res.min_offset
    if offset < first:
        if part.fail_on_data_loss:
            raise _loss(part, offset, first)
        log.warning("data loss on %s: offsets %d..%d were removed by retention; continuing"
                    " from %d (failOnDataLoss=false)", part.key, offset, first - 1, first)
        return None, first
    if part.fail_on_data_loss:
        raise _loss(
            part, offset, first,
            f"the queue ends at {res.max_offset}, the batch was planned up to {part.end}",
        )
    log.warning("data loss on %s: offsets %d..%d are gone", part.key, offset, part.end - 1)
    return None, part.end


def _loss(part: QueueRange, wanted: int, first: int, detail: str = "") -> DataLossError:
    key = part.key
    return DataLossError(key.topic, key.broker, key.queue_id, wanted, first, detail)
