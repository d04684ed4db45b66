"""Latency fault tolerance (RocketMQ's MQFaultStrategy): after a send to a broker fails, or is
slow, the producer avoids that broker for a while as long as another one is available."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

# RocketMQ's table: a send that took at least LATENCY_MAX[i] ms makes the broker unavailable
# for NOT_AVAILABLE_MS[i] ms. A failed send counts as taking ISOLATION_LATENCY_MS.
LATENCY_MAX_MS = (50, 100, 550, 1000, 2000, 3000, 15000)
NOT_AVAILABLE_MS = (0, 0, 30000, 60000, 120000, 180000, 600000)
ISOLATION_LATENCY_MS = 30000


@dataclass(slots=True)
class FaultItem:
    broker: str
    latency_ms: int
    available_at: float  # monotonic seconds


class LatencyFaultTolerance:
    def __init__(
        self, *, isolation_seconds: float | None = None, clock: Callable[[], float] = time.monotonic
    ) -> None:
        """isolation_seconds overrides how long a failed broker is avoided (RocketMQ: 600 s
        through its latency table); tests and small clusters want it shorter."""
        self.isolation_seconds = isolation_seconds
        self._clock = clock
        self._items: dict[str, FaultItem] = {}

    def _duration(self, latency_ms: int, isolation: bool) -> float:
        if isolation and self.isolation_seconds is not None:
            return self.isolation_seconds
        for i in range(len(LATENCY_MAX_MS) - 1, -1, -1):
            if latency_ms >= LATENCY_MAX_MS[i]:
                return NOT_AVAILABLE_MS[i] / 1000
        return 0.0

    def update(self, broker: str, latency_ms: int, *, isolation: bool) -> None:
        latency = ISOLATION_LATENCY_MS if isolation else latency_ms
        duration = self._duration(latency, isolation)
        self._items[broker] = FaultItem(broker, latency, self._clock() + duration)

    def is_available(self, broker: str) -> bool:
        item = self._items.get(broker)
        return item is None or self._clock() >= item.available_at

    def least_bad(self) -> str | None:
        """When every broker is marked, the one that becomes available first."""
        if not self._items:
            return None
        return min(self._items.values(), key=lambda i: (i.available_at, i.latency_ms)).broker

    def remove(self, broker: str) -> None:
        self._items.pop(broker, None)
