"""Consumer group lag over time: a sampler asks the cluster every interval and keeps a bounded
history per group in memory (nothing is stored: a restarted dashboard starts a new chart)."""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..client.admin_async import AsyncAdminClient
from ..common.errors import FerryMQError

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class LagSample:
    timestamp_ms: int
    lag: int
    # Lag of the group's retry topic apart: messages waiting to be consumed again.
    retry_lag: int = 0

    def to_json(self) -> dict[str, int]:
        return {"t": self.timestamp_ms, "lag": self.lag, "retry_lag": self.retry_lag}


@dataclass(slots=True)
class LagHistory:
    """The last `capacity` samples of each group, for at most `max_groups` groups (the ones
    sampled most recently are kept when more appear)."""

    capacity: int
    max_groups: int = 2000
    _series: dict[str, deque[LagSample]] = field(default_factory=dict)

    def add(self, group: str, sample: LagSample) -> None:
        series = self._series.pop(group, None)
        if series is None:
            series = deque(maxlen=self.capacity)
        series.append(sample)
        self._series[group] = series  # re-inserted: the dict's order is least recent first
        while len(self._series) > self.max_groups:
            del self._series[next(iter(self._series))]

    def series(self, group: str) -> list[LagSample]:
        return list(self._series.get(group, ()))

    def latest(self, group: str) -> LagSample | None:
        series = self._series.get(group)
        return series[-1] if series else None

    def groups(self) -> list[str]:
        return sorted(self._series)


@dataclass(frozen=True, slots=True)
class SamplerConfig:
    interval: float = 10.0
    history: int = 360
    # How many groups are asked at once in a round.
    fanout: int = 8


class LagSampler:
    """Samples every consumer group's total lag each `interval` seconds into `history`."""

    def __init__(self, admin: AsyncAdminClient, config: SamplerConfig,
                 clock: Callable[[], float] = time.time) -> None:
        self.admin = admin
        self.config = config
        self.history = LagHistory(config.history)
        self.rounds = 0
        self.last_error: str | None = None
        self._clock = clock
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="lag-sampler")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None

    async def sample_once(self) -> None:
        groups = await self.admin.consumer_groups()
        now_ms = int(self._clock() * 1000)
        limit = asyncio.Semaphore(self.config.fanout)

        async def one(group: str) -> None:
            async with limit:
                try:
                    rows = await self.admin.group_progress(group)
                except FerryMQError as exc:
                    log.debug("lag of %s not sampled: %s", group, exc)
                    return
            retry = sum(r.lag for r in rows if r.topic.startswith("%RETRY%"))
            total = sum(r.lag for r in rows)
            self.history.add(group, LagSample(now_ms, total - retry, retry))

        await asyncio.gather(*(one(g) for g in groups))
        self.rounds += 1

    async def _run(self) -> None:
        while True:
            try:
                await self.sample_once()
                self.last_error = None
            except (FerryMQError, OSError, TimeoutError) as exc:
                self.last_error = str(exc)
                log.warning("lag sampling failed: %s", exc)
            await asyncio.sleep(self.config.interval)

    def status(self) -> dict[str, Any]:
        return {
            "interval": self.config.interval,
            "history": self.config.history,
            "rounds": self.rounds,
            "last_error": self.last_error,
        }
