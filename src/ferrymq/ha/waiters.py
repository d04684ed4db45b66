"""Sends waiting for their slaves (SYNC_MASTER): one deque in append order, so a report
releases a prefix and one timer covers the oldest deadline."""

from __future__ import annotations

import asyncio
import enum
from collections import deque
from collections.abc import Callable


class ReplicaAck(enum.Enum):
    OK = "OK"
    TIMEOUT = "FLUSH_SLAVE_TIMEOUT"
    NO_SLAVE = "SLAVE_NOT_AVAILABLE"
    DEMOTED = "DEMOTED"  # the broker stopped being the master while the send waited


class ReplicationWaiters:
    def __init__(self, loop: asyncio.AbstractEventLoop, acked: Callable[[], int | None]) -> None:
        """`acked()`: the offset every slave the master waits for has reached; None when it
        waits for none."""
        self._loop = loop
        self._acked = acked
        self._q: deque[tuple[int, float, asyncio.Future[ReplicaAck]]] = deque()
        self._timer: asyncio.TimerHandle | None = None

    def __len__(self) -> int:
        return len(self._q)

    def wait(self, end: int, timeout: float) -> asyncio.Future[ReplicaAck]:
        fut: asyncio.Future[ReplicaAck] = self._loop.create_future()
        acked = self._acked()
        if acked is None:
            fut.set_result(ReplicaAck.NO_SLAVE)
        elif acked >= end:
            fut.set_result(ReplicaAck.OK)
        else:
            self._q.append((end, self._loop.time() + timeout, fut))
            if self._timer is None:
                self._arm()
        return fut

    def release(self) -> None:
        """After a report or a change of the set waited for."""
        acked = self._acked()
        q = self._q
        while q:
            end, _, fut = q[0]
            if acked is not None and acked < end:
                break
            q.popleft()
            if not fut.done():
                fut.set_result(ReplicaAck.OK if acked is not None else ReplicaAck.NO_SLAVE)

    def fail_all(self, outcome: ReplicaAck) -> None:
        while self._q:
            _, _, fut = self._q.popleft()
            if not fut.done():
                fut.set_result(outcome)

    def _arm(self) -> None:
        self._timer = None
        if self._q:
            self._timer = self._loop.call_at(self._q[0][1], self._expire)

    def _expire(self) -> None:
        now = self._loop.time()
        q = self._q
        while q and q[0][1] <= now:
            _, _, fut = q.popleft()
            if not fut.done():
                fut.set_result(ReplicaAck.TIMEOUT)
        self._timer = None
        self._arm()
