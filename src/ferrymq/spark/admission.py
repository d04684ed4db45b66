"""Admission control: how far each queue may advance in one micro-batch.

`maxOffsetsPerTrigger` caps the rows of a micro-batch; the cap is shared among queues in
proportion to their backlog (as Spark's Kafka source does), so a queue far behind catches up
faster and no queue starves. `minOffsetsPerTrigger` and `maxTriggerDelay` decide whether a
trigger runs at all (TriggerGate). Unit-tested without Spark."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping

from .offsets import QueueKey


def split_limit(
    start: Mapping[QueueKey, int], latest: Mapping[QueueKey, int], max_rows: int
) -> dict[QueueKey, int]:
    """End offsets advancing at most `max_rows` rows in total beyond `start` (which must name
    every queue of `latest`). A queue whose start is past its latest end stays at its start:
    offsets never move backwards.

    Every queue gets floor(max_rows * backlog / total); the rows left by rounding go one each
    to the queues with the largest remainders (ties by queue order), so the whole budget is
    used whenever the backlog is at least `max_rows`, and the result is deterministic."""
    backlog = {k: max(latest[k] - start[k], 0) for k in latest}
    total = sum(backlog.values())
    if total <= max_rows:
        return {k: start[k] + backlog[k] for k in latest}
    grant: dict[QueueKey, int] = {}
    remainders: list[tuple[int, QueueKey]] = []
    for key in sorted(backlog):
        share, rest = divmod(max_rows * backlog[key], total)
        grant[key] = share
        remainders.append((-rest, key))
    left = max_rows - sum(grant.values())
    for _neg_rest, key in sorted(remainders):
        if left <= 0:
            break
        if grant[key] < backlog[key]:
            grant[key] += 1
            left -= 1
    return {k: start[k] + grant[k] for k in latest}


class TriggerGate:
    """`minOffsetsPerTrigger` with `maxTriggerDelay`, as Spark's Kafka source applies them: a
    trigger with fewer than `min_rows` new offsets is skipped, unless `max_delay_ms` has passed
    since the last trigger that ran. The first trigger with new offsets always runs (the clock
    starts there, as Kafka's starts at zero), and a trigger with nothing new neither runs nor
    restarts the clock, so the delay bounds how long data that has arrived can wait.

    Lives in the driver-side reader, which Spark keeps for the whole query; the clock is
    injectable so the rule is tested without waiting."""

    def __init__(
        self, min_rows: int, max_delay_ms: int, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.min_rows = min_rows
        self.max_delay_ms = max_delay_ms
        self._clock = clock
        self._last: float | None = None  # clock reading of the last admitted trigger

    def admit(self, new_rows: int) -> bool:
        if new_rows <= 0:
            return False
        now = self._clock()
        if (
            self._last is not None
            and new_rows < self.min_rows
            and (now - self._last) * 1000 < self.max_delay_ms
        ):
            return False
        self._last = now
        return True
