"""Coalescing of concurrent asynchronous puts (group commit on the loop side).

Puts made on one event loop that are waiting at the same time are appended together: their
messages go through one `append` (one encode, one lock acquisition, one commit-log `pwrite`,
one consume-queue write per queue) and, under SYNC_FLUSH, wait for the fsync as one flush
waiter. Each caller still gets its own PutResult: its own offsets and message ids, its own
status.

Nothing waits on purpose: the first put of a loop turn schedules the append with `call_soon`,
so a lone put is appended in the turn it was made in, and puts made meanwhile (other tasks
of the same turn, or writers released by the previous fsync together) join it. No task is
created per put or per group.

When the appended group is refused for its content (an illegal message: nothing was written),
its puts are appended one by one, so only the culprit fails. A refusal for the store's state
(disk full, shutting down, a failed write, all before anything stays written) is every put's
answer."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence

from .flush import FlushService
from .model import PutResult, PutStatus, StoreMessage

log = logging.getLogger("ferrymq.store")

AppendFn = Callable[[Sequence[StoreMessage]], PutResult]

# Refusals for what a put carries, decided before anything is written: the group's puts are
# retried one by one so that only the put that carries the culprit fails.
_CONTENT_REFUSALS = frozenset({PutStatus.MESSAGE_ILLEGAL, PutStatus.PROPERTIES_SIZE_EXCEEDED})

# Estimated bytes a record adds to its body (properties, fixed fields, topic, hosts); only
# bounds a group's size.
_RECORD_OVERHEAD = 256

_Put = tuple[Sequence[StoreMessage], "asyncio.Future[PutResult]"]


class _Group:
    """Puts appended together, waiting for the fsync that covers the last of them: the flush
    service's waiter (a future's `done`/`set_result`) for all of them."""

    __slots__ = ("futures", "results", "settled", "timeout_ms")

    def __init__(self, futures: list[asyncio.Future[PutResult]], results: list[PutResult],
                 timeout_ms: int) -> None:
        self.futures = futures
        self.results = results
        self.timeout_ms = timeout_ms
        self.settled = False

    def done(self) -> bool:
        return self.settled

    def set_result(self, flushed: bool, /) -> None:
        if self.settled:
            return
        self.settled = True
        for fut, result in zip(self.futures, self.results, strict=True):
            if fut.done():
                continue  # the caller was cancelled; its messages are stored all the same
            if not flushed and result.status is PutStatus.PUT_OK:
                result.status = PutStatus.FLUSH_DISK_TIMEOUT
                result.reason = f"not flushed to disk within {self.timeout_ms} ms"
            fut.set_result(result)


class PutCoalescer:
    """Per event loop, the puts waiting to be appended; see the module's description."""

    def __init__(self, append: AppendFn, flusher: FlushService, sync: bool,
                 sync_timeout_ms: int, max_group_bytes: int) -> None:
        self._append = append
        self._flusher = flusher
        self._sync = sync
        self._timeout_ms = sync_timeout_ms
        self._max_bytes = max_group_bytes
        self._queued: dict[asyncio.AbstractEventLoop, list[_Put]] = {}
        # What coalescing achieved, for tests and operators: appends made for two or more
        # puts, and the puts they carried.
        self.groups = 0
        self.grouped_puts = 0

    def submit(self, msgs: Sequence[StoreMessage]) -> asyncio.Future[PutResult]:
        """Queue a put on the running loop; its future gets the put's own result."""
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[PutResult] = loop.create_future()
        queued = self._queued.get(loop)
        if queued is None:
            queued = self._queued[loop] = []
            loop.call_soon(self._run, loop)
        queued.append((msgs, fut))
        return fut

    def _run(self, loop: asyncio.AbstractEventLoop) -> None:
        puts = self._queued.pop(loop, [])
        start = 0
        size = 0
        for i, (msgs, fut) in enumerate(puts):
            if fut.done():  # cancelled before it was appended: nothing of it is stored
                continue
            put_size = sum(len(m.body) for m in msgs) + _RECORD_OVERHEAD * len(msgs)
            if size and size + put_size > self._max_bytes:
                self._append_group(loop, puts[start:i])
                start, size = i, 0
            size += put_size
        self._append_group(loop, puts[start:])

    def _append_group(self, loop: asyncio.AbstractEventLoop, puts: list[_Put]) -> None:
        live = [p for p in puts if not p[1].done()]
        if not live:
            return
        try:
            results = self._append_all(live)
        except Exception as exc:  # an unexpected failure is every caller's, not the loop's
            log.exception("append of %d coalesced puts failed", len(live))
            for _, fut in live:
                if not fut.done():
                    fut.set_exception(exc)
            return
        futures = [fut for _, fut in live]
        if self._sync:
            end = max((r.end_offset for r in results if r.status is PutStatus.PUT_OK),
                      default=0)
            if end > self._flusher.log.flushed:
                group = _Group(futures, results, self._timeout_ms)
                self._flusher.add_waiter(end, group, loop, self._timeout_ms / 1000)
                return
        for fut, result in zip(futures, results, strict=True):
            if not fut.done():
                fut.set_result(result)

    def _append_all(self, puts: list[_Put]) -> list[PutResult]:
        """One result per put, in order; the puts appended with one `append` when they can."""
        append = self._append
        if len(puts) == 1:
            return [append(puts[0][0])]
        msgs = [m for p in puts for m in p[0]]
        result = append(msgs)
        status = result.status
        if status is PutStatus.PUT_OK:
            self.groups += 1
            self.grouped_puts += len(puts)
            return _split(result, puts)
        if status in _CONTENT_REFUSALS:
            return [append(p[0]) for p in puts]
        return [PutResult(status, [], result.end_offset, result.reason) for _ in puts]


def _split(result: PutResult, puts: list[_Put]) -> list[PutResult]:
    """The group's result cut into one per put: its own messages, ending where its last
    record ends."""
    appended = result.messages
    out: list[PutResult] = []
    at = 0
    for msgs, _ in puts:
        mine = appended[at:at + len(msgs)]
        at += len(msgs)
        last = mine[-1]
        out.append(PutResult(PutStatus.PUT_OK, mine, last.phys_offset + last.size))
    return out
