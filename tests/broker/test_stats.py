"""Traffic counters of GET_BROKER_RUNTIME_INFO, with injected clocks: rates per window over
complete seconds, totals of the day that roll at midnight."""

from __future__ import annotations

from ferrymq.broker.stats import TrafficStats


class Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def test_rates_cover_complete_seconds_of_each_window() -> None:
    mono, wall = Clock(1000.0), Clock(1_700_000_000.0)
    stats = TrafficStats(clock=mono, wall_clock=wall)
    for second in range(1000, 1020):  # 20 messages a second for 20 s
        mono.now = second + 0.5
        stats.add_put(20)
    mono.now = 1020.5
    stats.add_got(7)  # in the current (incomplete) second: not in the rates yet
    table = stats.runtime_table()
    assert table["putTps"] == "20.00 6.67 0.67"
    assert table["getTransferedTps"] == "0.00 0.00 0.00"
    assert (table["msgPutTotalTodayNow"], table["msgGetTotalTodayNow"]) == ("400", "7")
    mono.now = 1021.0
    assert stats.runtime_table()["getTransferedTps"] == "0.70 0.12 0.01"


def test_buckets_stay_within_the_longest_window() -> None:
    mono = Clock(0.0)
    stats = TrafficStats(clock=mono, wall_clock=Clock(1_700_000_000.0))
    for second in range(5000):
        mono.now = float(second)
        stats.add_put(1)
    assert len(stats.put.buckets) <= 600
    assert stats.runtime_table()["putTps"] == "1.00 1.00 1.00"


def test_day_totals_roll_at_midnight() -> None:
    wall, mono = Clock(1_700_000_000.0), Clock(0.0)
    stats = TrafficStats(clock=mono, wall_clock=wall)
    stats.add_put(5)
    wall.now += 86_400  # the next day
    mono.now += 86_400
    stats.add_put(2)
    table = stats.runtime_table()
    assert table["msgPutTotalTodayMorning"] == "5"
    assert table["msgPutTotalTodayNow"] == "7"
    assert table["msgPutTotalYesterdayMorning"] == "0"


def test_topic_and_group_figures_over_the_minute_hour_and_day() -> None:
    """VIEW_BROKER_STATS_DATA's figures: what was counted within each window, from the
    snapshots the traffic itself takes (every 10 s for the minute)."""
    mono = Clock(0.0)
    stats = TrafficStats(clock=mono, wall_clock=Clock(1_700_000_000.0))
    assert stats.window_figures("put", "orders") is None
    for second in range(0, 7200, 5):  # two hours: 3 messages stored, 1 delivered every 5 s
        mono.now = float(second)
        stats.add_put(3)
        # What count_put and count_got add per topic and group (they take the store's types).
        stats.topic_put.setdefault("orders", [0, 0])[0] += 3
        stats.add_got(1)
        stats.group_got.setdefault(("orders", "g"), [0, 0])[0] += 1
    mono.now = 7200.0
    put = stats.window_figures("put", "orders")
    got = stats.window_figures("got", ("orders", "g"))
    assert put is not None and got is not None
    # Snapshots are 10 s apart: a window reaches back to the newest one at least its length old.
    assert 3 * 12 <= put["statsMinute"].sum <= 3 * 14 and abs(put["statsMinute"].tps - 0.6) < 0.1
    assert 3 * 720 <= put["statsHour"].sum <= 3 * 840
    assert put["statsDay"].sum == 3 * 1440  # younger than a day: everything since the start
    assert abs(put["statsDay"].tps - 0.6) < 0.01
    assert 12 <= got["statsMinute"].sum <= 14 and got["statsDay"].sum == 1440
    assert stats.window_figures("got", ("orders", "other")) is None


def test_snapshots_keep_what_changed_and_figures_stay_exact() -> None:
    """200 topics, one of them busy, for a day: the snapshots hold the busy topic's totals and
    the others' once per tier, not 200 entries per snapshot; figures stay exact."""
    mono = Clock(0.0)
    stats = TrafficStats(clock=mono, wall_clock=Clock(1_700_000_000.0))
    for i in range(200):
        stats.topic_put[f"t{i}"] = [i, 0]
    for second in range(0, 90_000, 30):  # the busy topic: one message every 30 s
        mono.now = float(second)
        stats.add_put(1)
        stats.topic_put["t0"][0] += 1
    mono.now = 90_000.0
    # One complete snapshot per tier, then the busy topic's changes (full copies: ~7,800).
    assert stats.history.kept() < 3 * 200 + 50
    busy, idle = stats.window_figures("put", "t0"), stats.window_figures("put", "t7")
    assert busy is not None and idle is not None
    assert 2 <= busy["statsMinute"].sum <= 3 and 120 <= busy["statsHour"].sum <= 140
    assert 2880 <= busy["statsDay"].sum <= 3000
    assert (idle["statsMinute"].sum, idle["statsDay"].sum) == (0, 0)
