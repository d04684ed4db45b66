"""A consumer's figures per topic for its running info (RocketMQ's ConsumerStatsManager and
ConsumeStatus): pull and consume rates and round trips over the last minute, failed messages
over the last hour.

Counts go into 10-second buckets (RocketMQ samples its stats every 10 s too), at most an
hour's worth per topic. The consume services add one count per run of finished listener
calls and topic, and the pull loop one per answered pull, so the cost is a clock read and a
few additions per pull or run, not per message."""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from typing import Any

BUCKET = 10.0  # seconds
MINUTE, HOUR = 60.0, 3600.0

# Slots of a bucket (after its start time): messages pulled, pulls, pull ms (sum); messages
# consumed, failed, listener calls, consume ms (sum).
_PULLED, _PULLS, _PULL_MS, _OK, _FAILED, _CALLS, _CONSUME_MS = range(1, 8)


class ConsumeStats:
    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._started = clock()
        self._topics: dict[str, deque[list[float]]] = {}

    def _bucket(self, topic: str) -> list[float]:
        now = self._clock()
        start = now - now % BUCKET
        buckets = self._topics.get(topic)
        if buckets is None:
            buckets = self._topics[topic] = deque()
        if not buckets or buckets[-1][0] != start:
            buckets.append([start, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0])
            while buckets[0][0] <= start - HOUR:
                buckets.popleft()
        return buckets[-1]

    def pulled(self, topic: str, msgs: int, rt_ms: float) -> None:
        b = self._bucket(topic)
        b[_PULLED] += msgs
        b[_PULLS] += 1
        b[_PULL_MS] += rt_ms

    def consumed(self, topic: str, ok: int, failed: int, calls: int, rt_ms_sum: float) -> None:
        b = self._bucket(topic)
        b[_OK] += ok
        b[_FAILED] += failed
        b[_CALLS] += calls
        b[_CONSUME_MS] += rt_ms_sum

    def status_table(self) -> dict[str, dict[str, Any]]:
        """topic -> RocketMQ's ConsumeStatus fields."""
        now = self._clock()
        span = max(min(now - self._started, MINUTE), 1.0)
        out: dict[str, dict[str, Any]] = {}
        for topic, buckets in list(self._topics.items()):
            minute = [0.0] * 8
            failed_hour = 0.0
            for b in buckets:
                if b[0] <= now - HOUR:
                    continue
                failed_hour += b[_FAILED]
                if b[0] > now - MINUTE - BUCKET:
                    for i in range(1, 8):
                        minute[i] += b[i]
            out[topic] = {
                "pullTPS": round(minute[_PULLED] / span, 2),
                "pullRT": round(minute[_PULL_MS] / minute[_PULLS], 2) if minute[_PULLS] else 0.0,
                "consumeOKTPS": round(minute[_OK] / span, 2),
                "consumeFailedTPS": round(minute[_FAILED] / span, 2),
                "consumeRT": round(minute[_CONSUME_MS] / minute[_CALLS], 2) if minute[_CALLS] else 0.0,
                "consumeFailedMsgs": int(failed_hour),
            }
        return out
