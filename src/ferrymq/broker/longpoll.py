"""Long polling: a PULL that finds nothing waits here until a message arrives on its queue or its
suspend time runs out (RocketMQ's PullRequestHoldService), then is answered by pulling again."""

from __future__ import annotations

import asyncio
from collections import defaultdict

from ..common.waits import expire_after


class PullWaiters:
    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._waiters: dict[tuple[str, int], list[tuple[int, asyncio.Future[bool]]]] = defaultdict(list)
        self.woken = 0  # held pulls woken so far

    async def wait(self, topic: str, queue_id: int, offset: int, timeout_s: float) -> bool:
        """Returns True when woken by an arrival beyond `offset`, False on timeout."""
        fut: asyncio.Future[bool] = self._loop.create_future()
        key = (topic, queue_id)
        entry = (offset, fut)
        self._waiters[key].append(entry)
        try:
            with expire_after(fut, timeout_s):
                return await fut
        except TimeoutError:
            return False
        finally:
            waiters = self._waiters.get(key)
            if waiters is not None:
                try:
                    waiters.remove(entry)
                except ValueError:
                    pass
                if not waiters:
                    self._waiters.pop(key, None)

    def notify(self, topic: str, queue_id: int, max_offset: int) -> None:
        """Called from the store after messages become readable; may come from any thread."""
        if self._loop.is_closed():
            return
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is self._loop:
            self._wake(topic, queue_id, max_offset)
        else:
            self._loop.call_soon_threadsafe(self._wake, topic, queue_id, max_offset)

    def _wake(self, topic: str, queue_id: int, max_offset: int) -> None:
        waiters = self._waiters.get((topic, queue_id))
        if not waiters:
            return
        for offset, fut in waiters:
            if max_offset > offset and not fut.done():
                fut.set_result(True)
                self.woken += 1

    def wake_all(self) -> None:
        for waiters in self._waiters.values():
            for _, fut in waiters:
                if not fut.done():
                    fut.set_result(True)

    def pending(self) -> int:
        return sum(len(w) for w in self._waiters.values())
