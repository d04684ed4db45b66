"""Per-topic and per-group rates for VIEW_BROKER_STATS_DATA (mqadmin's statsAll): messages
stored per topic and delivered per topic and group over the last minute, hour and day.

TrafficStats keeps running totals per key; this keeps snapshots of them in three tiers
(RocketMQ's StatsItem samples each minute, hour and day the same way): every 10 s for a
minute, every 10 min for an hour, every hour for a day. A window's figure is the total now
minus the total at the newest snapshot at least that old. Snapshots are taken by the traffic
itself (TrafficStats' once-a-second clock check) and by each query: while nothing moves no
snapshot is needed, as the totals do not change."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Any

# (spacing, horizon) in seconds: statsMinute, statsHour, statsDay.
TIERS = {"statsMinute": (10.0, 60.0), "statsHour": (600.0, 3600.0), "statsDay": (3600.0, 86400.0)}

Totals = dict[Any, list[int]]  # key -> [messages, bytes], as TrafficStats keeps them


@dataclass(frozen=True, slots=True)
class WindowFigure:
    """RocketMQ's StatsSnapshot: messages in the window and their rate per second."""

    sum: int
    tps: float

    def to_json(self) -> dict[str, Any]:
        return {"sum": self.sum, "tps": round(self.tps, 2)}


class _Tier:
    """Snapshots keep only the totals that changed since the previous one (a broker with 10,000
    topics keeps about 40 snapshots over the three tiers: full copies would hold 400,000
    entries, most of them repeats); the oldest snapshot kept is complete, as an evicted one is
    folded into it."""

    def __init__(self, spacing: float, horizon: float) -> None:
        self.spacing = spacing
        self.horizon = horizon
        self.samples: deque[tuple[float, dict[Any, int]]] = deque()
        self._last: dict[Any, int] = {}  # every total as of the newest snapshot

    def maybe_sample(self, now: float, totals: Totals) -> None:
        if self.samples and now - self.samples[-1][0] < self.spacing:
            return
        last = self._last
        changed = {k: v[0] for k, v in totals.items() if last.get(k) != v[0]}
        last.update(changed)
        self.samples.append((now, changed))
        # Keep one sample at least `horizon` old: it is the one the window is measured from.
        while len(self.samples) > 1 and now - self.samples[1][0] >= self.horizon:
            _, evicted = self.samples.popleft()
            head = self.samples[0][1]
            for k, v in evicted.items():
                head.setdefault(k, v)

    def figure(self, now: float, key: Any, total: int, started: float) -> WindowFigure:
        base_time, base = started, 0
        for at, snap in self.samples:
            if now - at < self.horizon:
                break
            base_time = at
            base = snap.get(key, base)  # unchanged since an older snapshot: that one's total
        span = max(min(now - base_time, self.horizon), 1.0)
        return WindowFigure(total - base, (total - base) / span)


class StatsHistory:
    def __init__(self, now: float) -> None:
        self.started = now
        self._tiers = {
            kind: {name: _Tier(*TIERS[name]) for name in TIERS} for kind in ("put", "got")
        }

    def maybe_sample(self, now: float, topic_put: Totals, group_got: Totals) -> None:
        for kind, totals in (("put", topic_put), ("got", group_got)):
            for tier in self._tiers[kind].values():
                tier.maybe_sample(now, totals)

    def kept(self) -> int:
        """How many totals the snapshots hold, all tiers together (what the history costs)."""
        return sum(len(snap) for tiers in self._tiers.values() for tier in tiers.values()
                   for _, snap in tier.samples)

    def figures(self, now: float, kind: str, key: Any, total: int) -> dict[str, WindowFigure]:
        """`kind` "put" (key: topic) or "got" (key: (topic, group))."""
        return {name: tier.figure(now, key, total, self.started)
                for name, tier in self._tiers[kind].items()}
