"""A latency histogram cheap enough for the send and pull paths: one bisect and two additions
per observation, no lock and no labels. Exported as a Prometheus histogram at scrape time
(metrics/families.py turns the per-bucket counts into cumulative ones)."""

from __future__ import annotations

from bisect import bisect_left

# Seconds, from 100 µs (a put into the page cache) to 10 s (a sync flush or a slave timing out);
# RocketMQ's put-time ranges (rocketmq_brokeruntime_pmdt_*) are among them.
LATENCY_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.2,
                   0.25, 0.5, 1.0, 2.0, 2.5, 3.0, 4.0, 5.0, 10.0)


class Histogram:
    __slots__ = ("bounds", "counts", "sum")

    def __init__(self, bounds: tuple[float, ...] = LATENCY_BUCKETS) -> None:
        self.bounds = bounds
        # counts[i] holds observations in (bounds[i-1], bounds[i]]; the last slot is +Inf.
        self.counts = [0] * (len(bounds) + 1)
        self.sum = 0.0

    def observe(self, value: float) -> None:
        self.counts[bisect_left(self.bounds, value)] += 1
        self.sum += value

    def cumulative(self) -> list[tuple[str, int]]:
        """(upper bound, observations <= it) pairs ending with +Inf, as Prometheus wants them."""
        out: list[tuple[str, int]] = []
        total = 0
        for bound, count in zip((*self.bounds, float("inf")), self.counts, strict=True):
            total += count
            out.append(("+Inf" if bound == float("inf") else repr(bound), total))
        return out

    @property
    def count(self) -> int:
        return sum(self.counts)
