"""Traffic counters for GET_BROKER_RUNTIME_INFO: messages stored and delivered, as totals of the
day and as rates over the last 10 s, 1 min and 10 min (RocketMQ's putTps/getTransferedTps).

Counting costs a clock read and two additions per put or pull (under a microsecond); rates come
from one-second buckets kept for the longest window, so memory is bounded by that window
whatever the traffic.

Beside them, the figures the metrics endpoint exports (docs/metrics.md): messages and bytes per
topic, per topic and consuming group, send-backs per group, and the send and pull latency
histograms. Each is a dict increment per request (not per message) or one histogram
observation; nothing here builds labels."""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from ..common.histogram import Histogram
from .stats_history import StatsHistory, WindowFigure

if TYPE_CHECKING:
    from ..store import PutResult, StoreMessage

RATE_WINDOWS = (10, 60, 600)  # seconds, the three figures RocketMQ's putTps carries


class _Counter:
    def __init__(self) -> None:
        self.total = 0
        self.today_morning = 0  # the total when the current day began
        self.yesterday_morning = 0
        # [second, count in that second], oldest first, at most the longest window.
        self.buckets: deque[list[int]] = deque()
        self._current: list[int] = [-1, 0]

    def add(self, n: int, second: int) -> None:
        self.total += n
        current = self._current
        if current[0] == second:
            current[1] += n
            return
        self._current = current = [second, n]
        self.buckets.append(current)
        horizon = second - RATE_WINDOWS[-1]
        while self.buckets[0][0] <= horizon:
            self.buckets.popleft()

    def rates(self, second: int) -> list[float]:
        """Per-second rates over each window, counting complete seconds only."""
        out = []
        for window in RATE_WINDOWS:
            count = sum(c for s, c in self.buckets if second - window <= s < second)
            out.append(count / window)
        return out

    def new_day(self) -> None:
        self.yesterday_morning = self.today_morning
        self.today_morning = self.total


class TrafficStats:
    def __init__(
        self,
        *,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        self._clock = clock
        self._wall = wall_clock
        self.put = _Counter()
        self.got = _Counter()
        # topic -> [messages, bytes] stored
        self.topic_put: dict[str, list[int]] = {}
        # (topic, group) -> [messages, bytes] delivered
        self.group_got: dict[tuple[str, str], list[int]] = {}
        # (original topic, group) -> [sent back for retry, dead-lettered]
        self.send_back: dict[tuple[str, str], list[int]] = {}
        self.send_latency = Histogram()
        self.pull_latency = Histogram()
        self._day = self._today()
        self._next_day_check = self._clock() + 1.0
        self.history = StatsHistory(self._clock())

    def _today(self) -> int:
        return time.localtime(self._wall()).tm_yday

    def _roll(self) -> int:
        now = self._clock()
        if now >= self._next_day_check:  # the calendar is asked once a second, not per message
            self._next_day_check = now + 1.0
            self.history.maybe_sample(now, self.topic_put, self.group_got)
            day = self._today()
            if day != self._day:
                self._day = day
                self.put.new_day()
                self.got.new_day()
        return int(now)

    def add_put(self, n: int) -> None:
        self.put.add(n, self._roll())

    def add_got(self, n: int) -> None:
        self.got.add(n, self._roll())

    def current_rates(self) -> tuple[list[float], list[float]]:
        """Stored and delivered per second over each of RATE_WINDOWS."""
        second = self._roll()
        return self.put.rates(second), self.got.rates(second)

    def count_put(self, msgs: Sequence[StoreMessage], result: PutResult) -> None:
        """Messages and bytes per topic of a stored put. A put is one topic but for the
        timer's deliveries, which may mix topics."""
        appended = result.messages
        if not appended:
            return
        topic = msgs[0].topic
        if len(msgs) == 1 or all(m.topic == topic for m in msgs):
            # One put is one contiguous run of the log.
            last = appended[-1]
            self._add_topic(topic, len(appended), last.phys_offset + last.size - appended[0].phys_offset)
            return
        for m, a in zip(msgs, appended, strict=False):
            self._add_topic(m.topic, 1, a.size)

    def _add_topic(self, topic: str, n: int, nbytes: int) -> None:
        row = self.topic_put.get(topic)
        if row is None:
            self.topic_put[topic] = [n, nbytes]
        else:
            row[0] += n
            row[1] += nbytes

    def count_got(self, topic: str, group: str, n: int, nbytes: int) -> None:
        key = (topic, group)
        row = self.group_got.get(key)
        if row is None:
            self.group_got[key] = [n, nbytes]
        else:
            row[0] += n
            row[1] += nbytes

    def count_send_back(self, topic: str, group: str, dead_lettered: bool) -> None:
        row = self.send_back.setdefault((topic, group), [0, 0])
        row[1 if dead_lettered else 0] += 1

    def window_figures(self, kind: str, key: str | tuple[str, str]) -> dict[str, WindowFigure] | None:
        """Messages stored to topic `key` ("put") or delivered to (topic, group) `key` ("got")
        over the last minute, hour and day; None when the broker has counted none."""
        if kind == "put":
            row = self.topic_put.get(key) if isinstance(key, str) else None
        else:
            row = self.group_got.get(key) if isinstance(key, tuple) else None
        if row is None:
            return None
        now = self._clock()
        self.history.maybe_sample(now, self.topic_put, self.group_got)
        return self.history.figures(now, kind, key, row[0])

    def runtime_table(self) -> dict[str, str]:
        """RocketMQ's keys (BrokerController's runtime info) and value formats."""
        second = self._roll()
        return {
            "msgPutTotalTodayNow": str(self.put.total),
            "msgGetTotalTodayNow": str(self.got.total),
            "msgPutTotalTodayMorning": str(self.put.today_morning),
            "msgGetTotalTodayMorning": str(self.got.today_morning),
            "msgPutTotalYesterdayMorning": str(self.put.yesterday_morning),
            "msgGetTotalYesterdayMorning": str(self.got.yesterday_morning),
            "putTps": " ".join(f"{r:.2f}" for r in self.put.rates(second)),
            "getTransferedTps": " ".join(f"{r:.2f}" for r in self.got.rates(second)),
        }
