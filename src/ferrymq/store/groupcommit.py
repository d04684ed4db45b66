"""Coalescing of concurrent asynchronous puts (group commit on the loop side).

Puts made on one event loop that are waiting at the same time are appended together: their
messages go through one `append` (one encode, one lock acquisition, one commit-log `pwrite`,
one consume-queue write per queue) and, under SYNC_FLUSH, wait for the fsync as one flush
waiter. Each caller still gets its own PutResult: its own offsets and message ids, its own
status.

Nothing waits on purpose: the first put of a loop turn schedules the append with `call_soon`,
so a lone put is appended in the next turn, and puts made meanwhile (other tasks of the same
turn, or writers released by the previous fsync together) join it. No task is created per put
or per group.

A writer that is alone does not even pay that turn: after a run of groups of one put, a loop's
puts are appended at once, in the caller's step, until a put from another task arrives in the
same turn (then they are queued again). A task putting again and again without yielding is
still alone: nobody else can put meanwhile.

When the appended group is refused for its content (an illegal message: nothing was written),
its puts are appended one by one, so only the culprit fails. A refusal for the store's state
(disk full, shutting down, a failed write, all before anything stays written) is every put's
answer."""

from __future__ import annotations

import asyncio
import logging
import weakref
from collections.abc import Callable, Sequence
from typing import Any

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

# Groups of one put in a row after which a loop's puts are appended at once.
SINGLES_BEFORE_EAGER = 8

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


class _LoopPuts:
    """One loop's queued puts and whether its writer looks alone."""

    __slots__ = ("eager", "queued", "singles", "turn_task")

    def __init__(self) -> None:
        self.queued: list[_Put] = []
        self.eager = False
        self.singles = 0
        # The task whose put was appended at once in this turn; None once the turn is over.
        self.turn_task: asyncio.Task[Any] | None = None

    def end_turn(self) -> None:
        self.turn_task = None


class PutCoalescer:
    """See the module's description."""

    def __init__(self, append: AppendFn, flusher: FlushService, sync: bool,
                 sync_timeout_ms: int, max_group_bytes: int) -> None:
        self._append = append
        self._flusher = flusher
        self._sync = sync
        self._timeout_ms = sync_timeout_ms
        self._max_bytes = max_group_bytes
        self._loops: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _LoopPuts] = (
            weakref.WeakKeyDictionary())
        # The loop used last and its state: a store is used from one loop almost always.
        self._last: tuple[asyncio.AbstractEventLoop | None, _LoopPuts] = (None, _LoopPuts())
        # What coalescing achieved, for tests and operators: appends made for two or more
        # puts, the puts they carried, and puts appended at once (a lone writer's).
        self.groups = 0
        self.grouped_puts = 0
        self.eager_puts = 0

    def put(self, msgs: Sequence[StoreMessage]) -> PutResult | asyncio.Future[PutResult]:
        """The put's own result, now (appended at once and nothing to wait for) or as a
        future of the running loop."""
        loop = asyncio.get_running_loop()
        last_loop, lp = self._last
        if last_loop is not loop:
            lp = self._loops.get(loop) or self._loops.setdefault(loop, _LoopPuts())
            self._last = (loop, lp)
        if lp.eager and not lp.queued:
            task = asyncio.current_task(loop)
            if lp.turn_task is None:
                lp.turn_task = task
                loop.call_soon(lp.end_turn)
                return self._append_now(loop, msgs)
            if lp.turn_task is task:
                return self._append_now(loop, msgs)
            lp.eager = False  # another writer in the same turn: coalesce from now on
            lp.singles = 0
        fut: asyncio.Future[PutResult] = loop.create_future()
        if not lp.queued:
            loop.call_soon(self._run, loop, lp)
        lp.queued.append((msgs, fut))
        return fut

    def _append_now(self, loop: asyncio.AbstractEventLoop,
                    msgs: Sequence[StoreMessage]) -> PutResult | asyncio.Future[PutResult]:
        self.eager_puts += 1
        result = self._append(msgs)
        if not self._sync or result.status is not PutStatus.PUT_OK:
            return result
        if result.end_offset <= self._flusher.log.flushed:
            return result
        fut: asyncio.Future[PutResult] = loop.create_future()
        self._flusher.add_waiter(result.end_offset, _Group([fut], [result], self._timeout_ms),
                                 loop, self._timeout_ms / 1000)
        return fut

    def _run(self, loop: asyncio.AbstractEventLoop, lp: _LoopPuts) -> None:
        puts, lp.queued = lp.queued, []
        if len(puts) == 1:
            lp.singles += 1
            if lp.singles >= SINGLES_BEFORE_EAGER:
                lp.eager = True
        else:
            lp.singles = 0
        # One pass: the live puts (a put cancelled before it was appended is not stored),
        # their messages, cut where a group would pass max_bytes.
        max_bytes = self._max_bytes
        live: list[_Put] = []
        msgs: list[StoreMessage] = []
        futures: list[asyncio.Future[PutResult]] = []
        size = 0
        for put in puts:
            put_msgs, fut = put
            if fut.done():
                continue
            put_size = (len(put_msgs[0].body) + _RECORD_OVERHEAD if len(put_msgs) == 1 else
                        sum(len(m.body) for m in put_msgs) + _RECORD_OVERHEAD * len(put_msgs))
            if live and size + put_size > max_bytes:
                self._append_group(loop, live, msgs, futures)
                live, msgs, futures, size = [], [], [], 0
            live.append(put)
            msgs.extend(put_msgs)
            futures.append(fut)
            size += put_size
        if live:
            self._append_group(loop, live, msgs, futures)

    def _append_group(self, loop: asyncio.AbstractEventLoop, puts: list[_Put],
                      msgs: list[StoreMessage],
                      futures: list[asyncio.Future[PutResult]]) -> None:
        try:
            results, end = self._append_all(puts, msgs)
        except Exception as exc:  # an unexpected failure is every caller's, not the loop's
            log.exception("append of %d coalesced puts failed", len(puts))
            for fut in futures:
                if not fut.done():
                    fut.set_exception(exc)
            return
        if self._sync and end > self._flusher.log.flushed:
            self._flusher.add_waiter(end, _Group(futures, results, self._timeout_ms), loop,
                                     self._timeout_ms / 1000)
            return
        for fut, result in zip(futures, results, strict=True):
            if not fut.done():
                fut.set_result(result)

    def _append_all(self, puts: list[_Put],
                    msgs: list[StoreMessage]) -> tuple[list[PutResult], int]:
        """One result per put, in order, and where the last stored byte ends (0: nothing
        stored); the puts (`msgs`: all their messages) appended with one `append` when they
        can."""
        append = self._append
        if len(puts) == 1:
            result = append(puts[0][0])
            return [result], result.end_offset if result.status is PutStatus.PUT_OK else 0
        result = append(msgs)
        status = result.status
        if status is PutStatus.PUT_OK:
            self.groups += 1
            self.grouped_puts += len(puts)
            return _split(result, puts), result.end_offset
        if status in _CONTENT_REFUSALS:
            results = [append(p[0]) for p in puts]
            return results, max((r.end_offset for r in results
                                 if r.status is PutStatus.PUT_OK), default=0)
        return [PutResult(status, [], result.end_offset, result.reason) for _ in puts], 0


def _split(result: PutResult, puts: list[_Put]) -> list[PutResult]:
    """The group's result cut into one per put: its own messages, ending where its last
    record ends."""
    appended = result.messages
    ok = PutStatus.PUT_OK
    out: list[PutResult] = []
    at = 0
    for msgs, _ in puts:
        n = len(msgs)
        if n == 1:
            last = appended[at]
            out.append(PutResult(ok, [last], last.phys_offset + last.size))
        else:
            mine = appended[at:at + n]
            last = mine[-1]
            out.append(PutResult(ok, mine, last.phys_offset + last.size))
        at += n
    return out
