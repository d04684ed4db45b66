"""Calling the user's listener: plain functions on a thread pool (consume_threads of them),
coroutine functions on the event loop with at most consume_threads in flight, and plain
functions registered with `blocking=False` on the event loop itself, one call after another.
An exception is logged and becomes "no result", which the services treat as a failure.

The last kind exists because the hop to a worker thread is most of what a quick listener
costs: waking the worker, the interpreter lock handed over and back, and the wake-up that
brings the result back to the loop. A listener that only counts, parses or appends to an
in-memory structure pays that for nothing; one that waits on I/O must keep its thread.

Concurrent consumption hands the runner runs of consume requests (`submit`), not one
executor hop per message: workers take requests one at a time from a shared deque, so a
listener blocked on one message never strands the others, and finished requests come back
to the event loop in runs (`on_done`), one wake-up for as many as finished meanwhile. A
worker checks that the request's queue is still owned right before calling the listener
(RocketMQ's processQueue.isDropped() in ConsumeRequest.run): messages buffered for a queue
this member gave away are never consumed here.

Workers are added while requests wait in the queue longer than SPAWN_AFTER and the workers
running are waiting (a listener blocked in I/O, a sleep, a lock), up to consume_threads. Not
while they compute: a run of quick listener calls (a pull of a hundred messages at listener
batch 1) can take longer than SPAWN_AFTER to go through, and more threads would only fight
the one running it, and the event loop, for the interpreter lock. The workers' CPU clocks,
read on each look, tell the two apart."""

from __future__ import annotations

import asyncio
import inspect
import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Protocol

from ...common.message import MessageExt

log = logging.getLogger("ferrymq.client.listener")

# A worker is added when the oldest queued request has waited this long.
SPAWN_AFTER = 0.002


def is_async_callable(fn: Callable[..., Any]) -> bool:
    # Callable objects count too when their class's __call__ is a coroutine function.
    return inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(
        vars(type(fn)).get("__call__")
    )


def _listener_failed(exc: Exception, msgs: list[MessageExt], ctx: Any) -> None:
    """One line per failure: a listener that fails on every message of a backlog would
    otherwise print a traceback per message. The traceback is there at debug level."""
    log.warning(
        "listener raised %s on %d message(s) of %s (first %s): %s",
        type(exc).__name__,
        len(msgs),
        ctx.message_queue,
        msgs[0].msg_id if msgs else "-",
        exc,
    )
    log.debug("listener traceback", exc_info=exc)


class Droppable(Protocol):
    dropped: bool


class ConsumeRequest:
    """One listener call: its messages, context and, once run, its result."""

    __slots__ = ("ctx", "msgs", "pq", "queued", "ran", "result", "started")

    def __init__(self, pq: Any, msgs: list[MessageExt], ctx: Any) -> None:
        self.pq = pq  # a ProcessQueue; only `dropped` is read off the loop
        self.msgs = msgs
        self.ctx = ctx
        self.result: Any = None
        self.ran = False  # False: its queue was dropped before it started
        self.started = 0.0  # time.time() when the listener was called
        self.queued = 0.0  # time.monotonic() when it was submitted


class ListenerRunner:
    def __init__(self, fn: Callable[..., Any], threads: int, name: str, *,
                 blocking: bool = True) -> None:
        self.fn = fn
        self.threads = threads
        self.is_async = is_async_callable(fn)
        # A plain function that promised not to block runs on the loop, in the pull's turn.
        self.inline = not blocking and not self.is_async
        self._executor: ThreadPoolExecutor | None = None
        self._semaphore: asyncio.Semaphore | None = None
        self._name = name
        self.on_done: Callable[[list[ConsumeRequest]], None] = lambda reqs: None
        self._queue: deque[ConsumeRequest] = deque()
        self._lock = threading.Lock()
        self._workers = 0
        self._running: set[ConsumeRequest] = set()
        self._done: deque[ConsumeRequest] = deque()
        self._wake_pending = False
        self._loop: asyncio.AbstractEventLoop | None = None
        self._check: asyncio.TimerHandle | None = None
        self._worker_ids: set[int] = set()  # threads inside _work
        self._cpu_seen: dict[int, float] = {}  # each worker's CPU clock at the last look
        self._cpu_seen_at = 0.0
        self._outstanding = 0
        self._idle: asyncio.Event | None = None

    # --- one call, awaited (orderly consumption, CONSUME_MESSAGE_DIRECTLY) ---------------------
    async def call(self, msgs: list[MessageExt], ctx: Any) -> Any:
        """The listener's return value, or None when it raised."""
        if self.is_async:
            if self._semaphore is None:
                self._semaphore = asyncio.Semaphore(self.threads)
            async with self._semaphore:
                try:
                    return await self.fn(list(msgs), ctx)
                except Exception as exc:
                    _listener_failed(exc, msgs, ctx)
                    return None
        if self.inline:
            return self._call_sync(msgs, ctx)
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._pool(), self._call_sync, msgs, ctx)

    def _call_sync(self, msgs: list[MessageExt], ctx: Any) -> Any:
        try:
            return self.fn(list(msgs), ctx)
        except Exception as exc:
            _listener_failed(exc, msgs, ctx)
            return None

    def _pool(self) -> ThreadPoolExecutor:
        if self._executor is None:
            self._executor = ThreadPoolExecutor(self.threads, thread_name_prefix=self._name)
        return self._executor

    # --- runs of requests (concurrent consumption) ---------------------------------------------
    def submit(self, reqs: list[ConsumeRequest], *, prompt: bool = False) -> None:
        """Queue requests; `on_done` gets them back on this loop once they ran (or were
        skipped because their queue was dropped). `prompt`: the caller is caught up (the
        pull brought less than a full batch), so this run's latency is what counts."""
        if not reqs:
            return
        if self._loop is None:
            self._loop = asyncio.get_running_loop()
            self._idle = asyncio.Event()
        assert self._idle is not None
        favour = prompt and self._outstanding == 0
        self._outstanding += len(reqs)
        self._idle.clear()
        if self.inline:
            self._run_inline(reqs)
            return
        if self.is_async:
            self._queue.extend(reqs)
            while self._workers < self.threads and self._workers < len(self._queue):
                self._workers += 1
                self._loop.create_task(self._awork())
            return
        now = time.monotonic()
        for req in reqs:
            req.queued = now
        with self._lock:
            self._queue.extend(reqs)
        self._add_worker_if_needed(first=True, favour=favour)

    def _waited(self) -> float:
        """How long the oldest queued request has waited (0: none waits)."""
        try:
            return time.monotonic() - self._queue[0].queued
        except IndexError:  # a worker took the last one meanwhile
            return 0.0

    def _watch(self) -> None:
        """While requests wait, look again shortly whether the workers are stuck."""
        if self._check is None and self._queue and self._workers < self.threads:
            assert self._loop is not None
            self._check = self._loop.call_later(SPAWN_AFTER, self._recheck)

    def _recheck(self) -> None:
        self._check = None
        self._add_worker_if_needed(first=False)

    def _add_worker_if_needed(self, *, first: bool, favour: bool = False) -> None:
        """Start a worker when none runs (on submit) or the oldest request has waited longer
        than SPAWN_AFTER; then keep watching while requests wait. `favour`: hand the started
        worker the interpreter lock at once."""
        with self._lock:
            start = (first and self._workers == 0) or (
                self._workers < self.threads and self._waited() > SPAWN_AFTER
                and not self._workers_computing()
            )
            if start:
                self._workers += 1
        if start:
            self._pool().submit(self._work)
            if favour:
                # The loop would otherwise keep the interpreter lock through what it does next
                # (the queue's next pull), and the woken worker waits until the loop blocks or
                # the 5 ms switch interval forces a switch: 125-350 us median, 7-21 ms p99 per
                # hand-over on a loaded machine, 20-30 us and 2-4 ms with this. Only for a
                # caught-up consumer whose runner was idle: done for a backlog's full pulls too,
                # it cost a fifth of the consume throughput (docs/hot-path.md, "Latency").
                time.sleep(0)
        self._watch()

    def _workers_computing(self) -> bool:
        """Whether the workers spent at least a quarter of the time since the last look on the
        CPU (running listener code, not waiting in it). A quarter, not a half: computing
        workers on a loaded machine (or behind the loop thread's hold of the interpreter lock)
        get well under all of the wall time, while workers waiting in I/O or a sleep get a few
        per cent. A thread seen for the first time only gives a reading."""
        now = time.monotonic()
        clocks: dict[int, float] = {}
        for ident in list(self._worker_ids):
            try:
                clocks[ident] = time.clock_gettime(time.pthread_getcpuclockid(ident))
            except (OSError, OverflowError):  # the thread ended meanwhile
                continue
        seen, at = self._cpu_seen, self._cpu_seen_at
        self._cpu_seen, self._cpu_seen_at = clocks, now
        known = [c - seen[i] for i, c in clocks.items() if i in seen]
        if not known:
            return True
        return sum(known) >= 0.25 * (now - at)

    def _work(self) -> None:
        ident = threading.get_ident()
        self._worker_ids.add(ident)
        try:
            self._work_requests()
        finally:
            self._worker_ids.discard(ident)

    def _work_requests(self) -> None:
        queue = self._queue
        while True:
            try:
                req = queue.popleft()
            except IndexError:
                with self._lock:
                    if queue:
                        continue
                    self._workers -= 1
                    return
            # In the running set before its queue's dropped flag is read: a release waiting
            # for the queue's calls (busy_with, on the loop, after setting the flag) either
            # sees this call, or this thread sees the flag and skips it.
            self._running.add(req)
            if not req.pq.dropped:
                req.ran = True
                req.started = time.time()
                try:
                    req.result = self.fn(list(req.msgs), req.ctx)
                except Exception as exc:
                    _listener_failed(exc, req.msgs, req.ctx)
            # Handed back before it leaves the running set: busy_with never sees a request
            # in neither.
            self._done.append(req)
            self._running.discard(req)
            if not self._wake_pending:
                self._wake_pending = True
                assert self._loop is not None
                try:
                    self._loop.call_soon_threadsafe(self._deliver)
                except RuntimeError:  # the loop closed under a listener that outlived it
                    return

    def _run_inline(self, reqs: list[ConsumeRequest]) -> None:
        """Every request now, on the loop; their results go back in the next loop turn, as a
        worker's would, so the caller (in the middle of handing a pull over) is not re-entered."""
        for req in reqs:
            if not req.pq.dropped:
                req.ran = True
                req.started = time.time()
                req.result = self._call_sync(req.msgs, req.ctx)
            self._done.append(req)
        if not self._wake_pending:
            self._wake_pending = True
            assert self._loop is not None
            self._loop.call_soon(self._deliver)

    async def _awork(self) -> None:
        try:
            while self._queue:
                req = self._queue.popleft()
                if not req.pq.dropped:
                    req.ran = True
                    req.started = time.time()
                    self._running.add(req)
                    try:
                        req.result = await self.fn(list(req.msgs), req.ctx)
                    except Exception as exc:
                        _listener_failed(exc, req.msgs, req.ctx)
                    finally:
                        self._running.discard(req)
                self._done.append(req)
                if not self._wake_pending:
                    self._wake_pending = True
                    asyncio.get_running_loop().call_soon(self._deliver)
        finally:
            self._workers -= 1

    def _deliver(self) -> None:
        self._wake_pending = False
        self.collect()

    def collect(self) -> None:
        """Hand every finished request to on_done now (also called before a queue is
        released, so what finished is acknowledged before the offset goes out)."""
        done = self._done
        if not done:
            return
        reqs = [done.popleft() for _ in range(len(done))]
        self._outstanding -= len(reqs)
        try:
            self.on_done(reqs)
        finally:
            if self._outstanding <= 0 and self._idle is not None:
                self._idle.set()

    def running(self) -> list[ConsumeRequest]:
        """Requests whose listener call is in progress."""
        return [req for req in list(self._running) if req.ran]

    def busy_with(self, pq: object) -> bool:
        """A listener call on `pq` is in progress, or finished and not yet handed back."""
        return any(req.pq is pq for req in list(self._running)) or any(
            req.pq is pq and req.ran for req in list(self._done))

    async def wait_idle(self) -> None:
        """Until every submitted request ran and was handed back."""
        if self._idle is not None and self._outstanding > 0:
            await self._idle.wait()

    def shutdown(self) -> None:
        if self._check is not None:
            self._check.cancel()
            self._check = None
        self._queue.clear()
        if self._executor is not None:
            self._executor.shutdown(wait=False, cancel_futures=True)
            self._executor = None
