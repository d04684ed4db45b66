"""A consumer's figures per topic for its running info (statusTable), with an injected clock:
rates over the last minute, round trips per pull and per listener call, failures over the
last hour."""

from __future__ import annotations

from ferrymq.client.consumer.consume_stats import ConsumeStats


class Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def test_status_table_rates_round_trips_and_failures() -> None:
    clock = Clock(1000.0)
    stats = ConsumeStats(clock)
    assert stats.status_table() == {}
    for second in range(0, 7200, 2):  # two hours: a pull of 4 and two listener calls every 2 s
        clock.now = 1000.0 + second
        stats.pulled("orders", 4, 20.0)
        stats.consumed("orders", 3, 1, 2, 10.0)
    clock.now = 1000.0 + 7200
    fig = stats.status_table()["orders"]
    # The minute is counted from 10 s buckets: 60 to 70 s of traffic over 60 s.
    assert 2.0 <= fig["pullTPS"] <= 2.4 and fig["pullRT"] == 20.0
    assert 1.5 <= fig["consumeOKTPS"] <= 1.8 and 0.5 <= fig["consumeFailedTPS"] <= 0.6
    assert fig["consumeRT"] == 5.0  # 10 ms over 2 calls
    assert 1790 <= fig["consumeFailedMsgs"] <= 1800  # the last hour's failures only
    clock.now += 3600  # an idle hour later
    fig = stats.status_table()["orders"]
    assert (fig["pullTPS"], fig["consumeOKTPS"], fig["consumeFailedMsgs"]) == (0.0, 0.0, 0)
