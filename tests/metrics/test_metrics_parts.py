"""The pieces the endpoint is built from, alone: the latency histogram and the rate window."""

from __future__ import annotations

from ferrymq.common.histogram import Histogram
from ferrymq.metrics.rates import RateWindow


def test_histogram_buckets_are_cumulative_and_bounds_inclusive() -> None:
    h = Histogram((0.001, 0.01, 0.1))
    for v in (0.0005, 0.001, 0.002, 0.05, 0.1, 3.0):
        h.observe(v)
    assert h.cumulative() == [("0.001", 2), ("0.01", 3), ("0.1", 5), ("+Inf", 6)]
    assert h.count == 6
    assert abs(h.sum - 3.1535) < 1e-9


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_rates_before_a_window_are_the_mean_since_start() -> None:
    clock = Clock()
    window: RateWindow[str] = RateWindow(window_s=60, sample_every_s=5, clock=clock)
    clock.now += 10
    assert window.rates({"t": [100, 1000]}) == {"t": (10.0, 100.0)}


def test_rates_are_over_the_last_window_once_it_has_samples() -> None:
    clock = Clock()
    window: RateWindow[str] = RateWindow(window_s=60, sample_every_s=5, clock=clock)
    totals = {"t": [0]}
    for _ in range(30):  # 150 s at 10 msgs/s, scraped every 5 s
        clock.now += 5
        totals["t"][0] += 50
        window.rates(totals)
    clock.now += 5
    totals["t"][0] += 500  # a burst: 100 msgs/s over the last 5 s
    rate = window.rates(totals)["t"][0]
    # The base is the sample at or just before 60 s ago: (55 s x 10 + 500) / 60 s.
    assert abs(rate - (550 + 500) / 60) < 1e-9
    # Memory is bounded by the window, not by the number of scrapes.
    assert len(window._samples) <= 60 / 5 + 2


def test_a_new_key_counts_from_zero_and_a_reset_counter_is_not_negative() -> None:
    clock = Clock()
    window: RateWindow[str] = RateWindow(window_s=4, sample_every_s=1, clock=clock)
    clock.now += 2
    window.rates({"a": [20]})
    clock.now += 4  # the sample above is now the base
    rates = window.rates({"a": [10], "b": [8]})
    assert rates["a"] == (0.0,)  # a topic deleted and created again: no negative rate
    assert rates["b"] == (2.0,)  # absent from the base: 8 over the 4 s since it
