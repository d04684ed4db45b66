"""Executor side: read one queue's offset range into Arrow record batches.

A pull thread keeps the next PULL_MESSAGE in flight while the task decodes and hands the
previous batch to Spark, so the broker round trip and the decoding overlap. Responses are
joined until `rows_per_batch` rows (decoding many rows at once amortises the Arrow kernel
overhead). One AdminClient per name server is kept per Python worker process: Spark reuses
workers across tasks, and a connection per micro-batch would cost more than the pull."""

from __future__ import annotations

import atexit
import logging
import queue
import threading
from collections import deque
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.datasource import InputPartition

from ..client.admin import AdminClient
from ..client.results import PullStatus, RawPullResult
from .decode import decode_to_batch
from .errors import DataLossError
from .offsets import QueueKey

log = logging.getLogger("ferrymq.spark")

_PREFETCH = 8  # pull responses buffered ahead of the decoder
_WINDOW = 4  # pulls in flight per partition


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

    @property
    def filtered(self) -> bool:
        return bool(self.tags) or self.expression_type != "TAG"

    def __repr__(self) -> str:
        return f"QueueRange({self.key} [{self.start}, {self.end}))"


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


class _Done:
    pass


_DONE = _Done()


def read_range(part: QueueRange) -> Iterator[pa.RecordBatch]:
    """Yield the rows of `part` in queue order, each offset exactly once."""
    if part.end <= part.start:
        return
    try:
        yield from _read(part, admin_for(part.namesrv))
    except Exception:
        drop_admin(part.namesrv)
        raise


# A pulled body, the offsets it was taken for [first, end) and how many offsets that is.
_Item = tuple[bytes, int, int]


def _read(part: QueueRange, admin: AdminClient) -> Iterator[pa.RecordBatch]:
    responses: queue.Queue[_Item | _Done | BaseException] = queue.Queue(_PREFETCH)
    stop = threading.Event()
    puller = threading.Thread(
        target=_pull_loop, args=(part, admin, responses, stop), name="ferrymq-pull", daemon=True
    )
    puller.start()
    try:
        pending: list[_Item] = []
        pending_rows = 0
        while True:
            item = responses.get()
            if isinstance(item, BaseException):
                raise item
            if isinstance(item, _Done):
                break
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
    finally:
        stop.set()
        # Unblock a puller waiting on a full queue; it checks `stop` after every put.
        while puller.is_alive():
            try:
                responses.get(timeout=0.1)
            except queue.Empty:
                pass
            puller.join(0.1)


def _decode(items: list[_Item], part: QueueRange) -> pa.RecordBatch:
    if part.filtered:
        return _decode_filtered(items, part)
    bodies = [item[0] for item in items]
    batch = decode_to_batch(bodies[0] if len(bodies) == 1 else b"".join(bodies), part.key.broker)
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


def _pull_loop(
    part: QueueRange,
    admin: AdminClient,
    out: queue.Queue[_Item | _Done | BaseException],
    stop: threading.Event,
) -> None:
    """Pull [start, end) in order; each item is a response body and the offsets it covers.

    Up to _WINDOW pulls are in flight at once, for consecutive slices of the range (a pull
    asks for at most pull_batch_size messages from a given offset, so the slices are known
    in advance). One request at a time leaves the broker idle for a round trip per pull."""
    inflight: deque[tuple[int, int, Future[RawPullResult]]] = deque()
    planned = part.start
    offset = part.start  # the next offset to hand to the task
    with ThreadPoolExecutor(_WINDOW, thread_name_prefix="ferrymq-pull") as pool:
        try:
            while offset < part.end and not stop.is_set():
                while len(inflight) < _WINDOW and planned < part.end:
                    want = min(part.pull_batch_size, part.end - planned)
                    inflight.append((planned, want, pool.submit(_pull, admin, part, planned, want)))
                    planned += want
                first, want, future = inflight.popleft()
                res = future.result()
                if first != offset:  # an earlier answer was short: re-plan from `offset`
                    _cancel(inflight)
                    planned = offset
                    continue
                offset = _take(part, res, offset, first + want, out)
                if offset < first + want:  # short answer or a gap: re-plan from there
                    _cancel(inflight)
                    planned = offset
            out.put(_DONE)
        except BaseException as exc:  # handed to the task thread, which raises it
            _cancel(inflight)
            _put_until_stopped(out, exc, stop)


def _pull(admin: AdminClient, part: QueueRange, offset: int, want: int) -> RawPullResult:
    return admin.pull_raw(part.key.mq, offset, want, expression=part.expression,
                          expression_type=part.expression_type)


def _cancel(inflight: deque[tuple[int, int, Future[RawPullResult]]]) -> None:
    while inflight:
        inflight.popleft()[2].cancel()


def _take(
    part: QueueRange,
    res: RawPullResult,
    offset: int,
    slice_end: int,
    out: queue.Queue[_Item | _Done | BaseException],
) -> int:
    """Hand over one answer for a pull at `offset`; returns the next offset to read."""
    if res.status is PullStatus.FOUND:
        count = min(res.next_begin_offset, slice_end) - offset
        if count <= 0:
            raise DataLossError(str(part.key), offset, res.min_offset, "empty found answer")
        out.put((res.body, offset, offset + count))
        return offset + count
    if res.status is PullStatus.NO_MATCHED_MSG and res.next_begin_offset > offset:
        return min(res.next_begin_offset, slice_end)  # filtered out by the broker
    # NO_NEW_MSG or OFFSET_ILLEGAL before the planned end: the messages are gone.
    first = res.min_offset
    if offset < first:
        if part.fail_on_data_loss:
            raise DataLossError(str(part.key), offset, first)
        log.warning("data loss on %s: skipping offsets %d..%d", part.key, offset, first - 1)
        return first
    if part.fail_on_data_loss:
        raise DataLossError(
            str(part.key),
            offset,
            first,
            f"the queue ends at {res.max_offset}, the batch was planned up to {part.end}",
        )
    log.warning("data loss on %s: offsets %d..%d are gone", part.key, offset, part.end - 1)
    return part.end


def _put_until_stopped(
    out: queue.Queue[_Item | _Done | BaseException],
    item: BaseException,
    stop: threading.Event,
) -> None:
    while not stop.is_set():
        try:
            out.put(item, timeout=0.1)
            return
        except queue.Full:
            continue
