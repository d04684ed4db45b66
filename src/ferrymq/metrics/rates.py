"""Per-second rates over about the last minute, from counters sampled at scrape time.

rocketmq-exporter's *_tps gauges are RocketMQ's one-minute statistics. Here the counters are
plain totals (broker/stats.py); at each scrape the current totals are compared with the oldest
sample that is at most a window old, so the send path keeps no time buckets per topic. Before
a window's worth of samples exists the base is the start (all zeros): the first scrapes give the
mean rate since the broker started."""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Hashable, Mapping, Sequence
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)

Totals = dict[K, tuple[int, ...]]


class RateWindow(Generic[K]):
    def __init__(self, window_s: float = 60.0, sample_every_s: float = 5.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._window_s = window_s
        self._every_s = sample_every_s
        self._clock = clock
        start: Totals[K] = {}
        self._samples: deque[tuple[float, Totals[K]]] = deque([(clock(), start)])

    def rates(self, totals: Mapping[K, Sequence[int]]) -> dict[K, tuple[float, ...]]:
        """Per-second rate of each total (each a row of counters) since the base sample."""
        now = self._clock()
        current: Totals[K] = {k: tuple(v) for k, v in totals.items()}
        samples = self._samples
        # Keep one sample at or before the window's start: it is the base.
        while len(samples) > 1 and samples[1][0] <= now - self._window_s:
            samples.popleft()
        base_t, base = samples[0]
        if now - samples[-1][0] >= self._every_s:
            samples.append((now, current))
        elapsed = now - base_t
        out: dict[K, tuple[float, ...]] = {}
        for key, row in current.items():
            before = base.get(key)
            if elapsed <= 0:
                out[key] = tuple(0.0 for _ in row)
            elif before is None:
                out[key] = tuple(v / elapsed for v in row)
            else:
                out[key] = tuple(max(0, v - b) / elapsed for v, b in zip(row, before, strict=False))
        return out
