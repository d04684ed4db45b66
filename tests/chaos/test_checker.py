"""The checker must catch every kind of failure it names, and pass a clean run."""

from __future__ import annotations

import pytest
from checker import check
from hypothesis import given
from hypothesis import strategies as st


def ids(*ns: int) -> list[str]:
    return [f"m{n}" for n in ns]


def test_a_clean_run_passes() -> None:
    r = check(ids(1, 2, 3), ids(1, 2, 3), ids(1, 2, 3), {"m1": 0, "m2": 1, "m3": 2})
    assert r.ok and r.lost == () and r.duplicated == {} and r.unexpected == () and r.window is None
    assert (r.attempted, r.acked, r.received, r.deliveries) == (3, 3, 3, 3)


def test_an_acknowledged_message_never_received_is_lost() -> None:
    r = check(ids(1, 2, 3), ids(1, 2, 3), ids(1, 3))
    assert not r.ok and r.lost == ("m2",)
    assert "lost=1" in r.summary() and "m2" in r.summary()


def test_an_unacknowledged_message_may_be_missing_or_present() -> None:
    r = check(ids(1, 2, 3), ids(1), ids(1, 3))
    assert r.ok and r.unacked_received == 1 and r.unacked_missing == 1


def test_repeats_are_duplicates_reported_but_allowed() -> None:
    r = check(ids(1, 2), ids(1, 2), ["m1", "m2", "m2", "m2"])
    assert r.ok and r.duplicated == {"m2": 3} and r.deliveries == 4 and r.received == 2
    assert check(ids(1, 2), ids(1, 2), {"m1": 2, "m2": 1}).duplicated == {"m1": 2}


def test_a_message_never_attempted_is_unexpected() -> None:
    r = check(ids(1), ids(1), ids(1, 9))
    assert not r.ok and r.unexpected == ("m9",)


def test_a_zero_count_is_not_a_delivery() -> None:
    r = check(ids(1), ids(1), {"m1": 0, "m9": 0})
    assert r.lost == ("m1",) and r.unexpected == () and r.received == 0


def test_acked_must_be_attempted() -> None:
    with pytest.raises(ValueError, match="m5"):
        check(ids(1), ids(1, 5), ids(1))


def test_loss_window_spans_first_to_last_lost_send_and_counts_acked_in_it() -> None:
    send_ms = {f"m{n}": 100.0 * n for n in range(10)}
    r = check(ids(*range(10)), ids(*range(10)), ids(0, 1, 2, 4, 5, 7, 8, 9), send_ms)
    assert r.lost == ("m3", "m6")  # in send order
    assert r.window is not None
    assert (r.window.first_ms, r.window.last_ms, r.window.ms) == (300.0, 600.0, 300.0)
    assert r.window.acked_in_window == 4 and r.window.lost == 2  # m3 m4 m5 m6
    assert "loss_window=300ms/4 acked msgs" in r.summary()


@given(
    st.sets(st.integers(0, 60)),
    st.data(),
)
def test_properties(attempted_n: set[int], data: st.DataObject) -> None:
    attempted = {f"m{n}" for n in attempted_n}
    acked = data.draw(st.sets(st.sampled_from(sorted(attempted)))) if attempted else set()
    pool = sorted(attempted | {"x1", "x2"})
    deliveries = data.draw(st.lists(st.sampled_from(pool), max_size=120))
    r = check(attempted, acked, deliveries)
    got = set(deliveries)
    assert set(r.lost) == acked - got
    assert set(r.unexpected) == got - attempted
    assert r.duplicated == {k: deliveries.count(k) for k in got if deliveries.count(k) > 1}
    assert r.ok == (acked <= got and got <= attempted)
    assert r.unacked_received + r.unacked_missing == len(attempted - acked)
    assert r.deliveries == len(deliveries)
