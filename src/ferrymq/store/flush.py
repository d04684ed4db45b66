"""Commit-log flushing: one thread owns every fsync of the log.

ASYNC_FLUSH: the thread flushes every flush_interval_ms. SYNC_FLUSH: a put registers the
offset its bytes end at and wakes the thread; the thread fsyncs everything written so far and
releases every waiter that fsync covered. Writers that arrive while an fsync runs are covered
by the next one, so concurrent writers share fsyncs (group commit). Blocking callers wait on a
condition; asyncio callers get their futures resolved on their own loop, one callback per loop
per fsync. A waiter is anything with a future's `done`/`set_result(bool)`: the store registers
one per group of coalesced puts (store/groupcommit.py), not one per put. A waiter that is not
durable in time gets False: one timer per loop (set for the oldest waiter's deadline) expires
them, not a timer per put. Waiters are registered in append order and all share one timeout,
so deadlines are in order too.

Gathering (waiting a moment before an fsync for more writers to join it) is adaptive: the
thread waits only while fewer waiters are outstanding than the previous fsync released, i.e.
while writers that came back from the last fsync are still arriving. A lone writer, or one
event loop whose puts are already coalesced into one waiter, never waits."""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections import defaultdict
from typing import Protocol

from ..common.histogram import Histogram
from .commitlog import CommitLog

log = logging.getLogger("ferrymq.store.flush")


class FlushWaiter(Protocol):
    """What the flush service resolves: an asyncio.Future[bool] is one."""

    def done(self) -> bool: ...

    def set_result(self, value: bool, /) -> None: ...


def _resolve(waiters: list[FlushWaiter], value: bool) -> None:
    for w in waiters:
        if not w.done():
            w.set_result(value)


_Waiter = tuple[int, FlushWaiter, asyncio.AbstractEventLoop, float]


class FlushService:
    def __init__(self, commitlog: CommitLog, sync: bool, interval_ms: int) -> None:
        self.log = commitlog
        self.sync = sync
        self.interval_s = interval_ms / 1000
        self._wake = threading.Event()
        self._cond = threading.Condition()
        self._waiters: list[_Waiter] = []
        # Per loop, the timer that expires its waiters; touched only from that loop's thread.
        self._sweepers: dict[asyncio.AbstractEventLoop, asyncio.TimerHandle] = {}
        self._stopping = False
        self._thread: threading.Thread | None = None
        self.last_error: OSError | None = None
        self.fsyncs = 0
        # Written by the flush thread only; read at scrape time (a count seen mid-update is
        # off by one for one scrape).
        self.latency = Histogram()
        self.gather_s = 0.0005
        # Callers blocked in wait_flushed, and how many waiters the last fsync released: the
        # gather waits for about that many to come back.
        self._blocked = 0
        self._released = 0
        self.gathers = 0  # fsyncs that waited for writers to join

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="ferrymq-flush", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stopping = True
        self._wake.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        self.flush_now()

    # --- callers ---------------------------------------------------------------------------
    def wait_flushed(self, offset: int, timeout_s: float) -> bool:
        if self.log.flushed >= offset:
            return True
        with self._cond:
            self._blocked += 1
            self._wake.set()
            try:
                return self._cond.wait_for(lambda: self.log.flushed >= offset, timeout_s)
            finally:
                self._blocked -= 1

    def add_waiter(self, offset: int, fut: FlushWaiter,
                   loop: asyncio.AbstractEventLoop, timeout_s: float) -> None:
        """Resolve `fut` (on `loop`, from whose thread this is called) with True once the log
        is flushed to `offset`, with False when it is not within `timeout_s`."""
        deadline = time.monotonic() + timeout_s
        with self._cond:
            self._waiters.append((offset, fut, loop, deadline))
        self._wake.set()
        if loop not in self._sweepers:
            self._sweepers[loop] = loop.call_later(timeout_s, self._sweep, loop)

    def _sweep(self, loop: asyncio.AbstractEventLoop) -> None:
        """On `loop`: fail its waiters past their deadline; re-arm for the next one."""
        self._sweepers.pop(loop, None)
        now = time.monotonic()
        expired: list[FlushWaiter] = []
        nxt: float | None = None
        with self._cond:
            keep: list[_Waiter] = []
            for w in self._waiters:
                if w[2] is loop and not w[1].done():
                    if w[3] <= now:
                        expired.append(w[1])
                        continue
                    if nxt is None:
                        nxt = w[3]
                keep.append(w)
            self._waiters = keep
        _resolve(expired, False)
        if nxt is not None:
            self._sweepers[loop] = loop.call_later(max(0.0, nxt - now), self._sweep, loop)

    def flush_now(self) -> None:
        self._flush_once()

    # --- the thread --------------------------------------------------------------------------
    def _run(self) -> None:
        # In SYNC_FLUSH puts wake the thread and the interval is a fallback; in ASYNC_FLUSH
        # only stop() wakes it, so it flushes on the interval.
        while not self._stopping:
            self._wake.wait(self.interval_s)
            self._wake.clear()
            if self._stopping:
                break
            if self.sync and self.gather_s:
                self._gather()
            self._flush_once()

    def _outstanding(self) -> int:
        return len(self._waiters) + self._blocked

    def _gather(self) -> None:
        """Let writers that are about to arrive join this fsync: while fewer waiters are
        outstanding than the last fsync released, wait as long as their number still grows,
        for at most gather_s. An fsync costs far more than the wait; a writer that is alone
        (or one loop's coalesced puts, one waiter) does not wait at all."""
        expected = self._released
        seen = self._outstanding()
        if seen >= expected:
            return
        self.gathers += 1
        deadline = time.monotonic() + self.gather_s
        while time.monotonic() < deadline:
            time.sleep(self.gather_s / 5)
            now = self._outstanding()
            if now == seen or now >= expected:
                return
            seen = now

    def _flush_once(self) -> None:
        target = self.log.write_pos
        if target > self.log.flushed:
            try:
                started = time.perf_counter()
                self.log.flush(target)
                self.latency.observe(time.perf_counter() - started)
                self.fsyncs += 1
                self.last_error = None
            except OSError as exc:
                # Waiters are not released; they time out with FLUSH_DISK_TIMEOUT.
                if self.last_error is None or self.last_error.errno != exc.errno:
                    log.error("commit log fsync failed: %s", exc)
                self.last_error = exc
                return
        flushed = self.log.flushed
        ready: dict[asyncio.AbstractEventLoop, list[FlushWaiter]] = defaultdict(list)
        released = 0
        with self._cond:
            released = self._blocked  # roughly: those whose bytes were written are released
            self._cond.notify_all()
            if self._waiters:
                keep = []
                for item in self._waiters:
                    if item[0] <= flushed:
                        ready[item[2]].append(item[1])
                        released += 1
                    elif not item[1].done():
                        keep.append(item)
                self._waiters = keep
        if released:
            self._released = released
        for loop, futures in ready.items():
            try:
                loop.call_soon_threadsafe(_resolve, futures, True)
            except RuntimeError:  # the loop is closed; nobody is waiting any more
                pass
