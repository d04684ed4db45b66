"""Handing work from user threads to the client's event loop in bursts.

`run_coroutine_threadsafe` per call costs a task, a wake-up of the loop (a write to its
self-pipe) and two chained futures: more than the send itself at tens of thousands of calls a
second. An Intake collects calls in a list and wakes the loop once per burst; the loop then
starts them all in one turn, which is also what lets the producer's accumulator put them into
one batch."""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Callable
from typing import Generic, TypeVar

from .futures import LightFuture

T = TypeVar("T")
R = TypeVar("R")


class Intake(Generic[T, R]):
    def __init__(self, loop: asyncio.AbstractEventLoop,
                 start: Callable[[T, concurrent.futures.Future[R]], None]) -> None:
        self._loop = loop
        # Runs on the loop: begins the work for one item and settles its future when that
        # ends (directly: no asyncio future and no copying callback in between).
        self._start = start
        self._lock = threading.Lock()
        self._waiting: list[tuple[T, concurrent.futures.Future[R]]] = []
        self._closed: Callable[[], BaseException] | None = None

    def submit(self, item: T) -> concurrent.futures.Future[R]:
        result: concurrent.futures.Future[R] = LightFuture()
        with self._lock:
            closed = self._closed
            if closed is None:
                self._waiting.append((item, result))
                wake = len(self._waiting) == 1
        if closed is not None:
            result.set_exception(closed())
            return result
        if wake:
            self._loop.call_soon_threadsafe(self._drain)
        return result

    def close(self, error: Callable[[], BaseException]) -> None:
        """No more items: what is still waiting (handed over as the client shut down, after
        the loop's last turn, so no drain will come) and whatever is submitted from now on
        fails with `error()` instead of waiting forever."""
        with self._lock:
            self._closed = error
            stranded, self._waiting = self._waiting, []
        for _, result in stranded:
            if result.set_running_or_notify_cancel():
                result.set_exception(error())

    def _drain(self) -> None:
        with self._lock:
            batch, self._waiting = self._waiting, []
        start = self._start
        for item, result in batch:
            # Once running, the caller can no longer cancel it: whoever settles it later
            # needs no lock against the caller.
            if not result.set_running_or_notify_cancel():
                continue  # cancelled by the caller before it started
            try:
                start(item, result)
            except BaseException as exc:  # handed to the caller's future
                if not result.done():
                    result.set_exception(exc)


def copy_to(result: concurrent.futures.Future[R]) -> Callable[[asyncio.Future[R]], None]:
    """A done-callback settling `result` (running, so not cancellable) as `future` ended."""
    def copy(future: asyncio.Future[R]) -> None:
        if future.cancelled():
            result.set_exception(concurrent.futures.CancelledError())
            return
        exc = future.exception()
        if exc is not None:
            result.set_exception(exc)
        else:
            result.set_result(future.result())

    return copy
