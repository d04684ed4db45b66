"""Coalescing: work asked for many times while it runs is run once more, not once per ask.

Used where each change used to trigger its own full rewrite (topics.json, the registration to
the name servers, notifications to a group's members): under a burst of changes the cost is
bounded by how long one run takes, not by the number of changes."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

log = logging.getLogger("ferrymq.broker")


class Coalescer:
    """Runs `work` on the event loop whenever asked; asks made while a run is in progress are
    served together by one further run. An ask's future resolves when a run that started
    after the ask has finished (so it saw the state as of the ask), with that run's error if
    it failed."""

    def __init__(self, work: Callable[[], Awaitable[None]], name: str, *, min_interval: float = 0.0,
                 pace: float | None = None) -> None:
        self._work = work
        self._name = name
        # Runs start at least this long after the previous one ended: an ask when all is quiet
        # runs at once, but under a burst of asks the work (which may hold the loop for a
        # while, as a full registration does) cannot fill the loop back to back.
        self._min_interval = min_interval
        # pace: the gap is `pace` times the previous run's duration, capped by min_interval.
        # Work that takes a millisecond (a registration of a few topics) is then not held back
        # a whole min_interval behind an unrelated run (a new consumer group's heartbeat
        # waits for its retry topic's registration), while work that holds the loop for long
        # still leaves it free most of the time.
        self._pace = pace
        self._last_duration = 0.0
        self._last_end = float("-inf")
        self._asked = 0
        self._task: asyncio.Task[None] | None = None
        self._waiters: list[tuple[int, asyncio.Future[None]]] = []

    def ask(self) -> asyncio.Future[None]:
        loop = asyncio.get_running_loop()
        self._asked += 1
        fut: asyncio.Future[None] = loop.create_future()
        self._waiters.append((self._asked, fut))
        if self._task is None or self._task.done():
            self._task = loop.create_task(self._run(), name=f"ferrymq-{self._name}")
        return fut

    def ask_nowait(self) -> None:
        """Ask without waiting; a failure is logged by the run."""
        fut = self.ask()
        fut.add_done_callback(_retrieve)

    @property
    def busy(self) -> bool:
        return self._task is not None and not self._task.done()

    async def idle(self) -> None:
        """Wait until no run is in progress or asked for."""
        while self._task is not None and not self._task.done():
            await asyncio.shield(self._task)

    def _gap(self) -> float:
        if self._pace is None:
            return self._min_interval
        return min(self._min_interval, self._pace * self._last_duration)

    async def _run(self) -> None:
        done = 0
        loop = asyncio.get_running_loop()
        while done < self._asked:
            wait = self._last_end + self._gap() - loop.time()
            if wait > 0:
                await asyncio.sleep(wait)
            target = self._asked
            error: BaseException | None = None
            began = loop.time()
            try:
                await self._work()
            except Exception as exc:
                log.exception("%s failed", self._name)
                error = exc
            done = target
            self._last_end = loop.time()
            self._last_duration = self._last_end - began
            served = [w for w in self._waiters if w[0] <= target]
            self._waiters = [w for w in self._waiters if w[0] > target]
            for _, fut in served:
                if fut.done():
                    continue
                if error is None:
                    fut.set_result(None)
                else:
                    fut.set_exception(error)


def _retrieve(fut: asyncio.Future[None]) -> None:
    if not fut.cancelled():
        fut.exception()
