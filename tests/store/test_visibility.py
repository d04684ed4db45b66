"""Readers see records only up to the confirmed commit-log offset while the gate is closed
(store/visibility.py): pulls, max offsets, queue-entry scans and store times; arrival
listeners fire when records become readable, append listeners at every append."""

from __future__ import annotations

from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st
from store_util import msg, open_store

from ferrymq.store import GetStatus, MessageStore, PutStatus


def put(store: MessageStore, *msgs: tuple[str, int]) -> int:
    r = store.put_messages([msg(t, q, f"{t}{q}".encode()) for t, q in msgs])
    assert r.status is PutStatus.PUT_OK
    return r.end_offset


def test_an_open_gate_shows_every_append_at_once(tmp_path: Path) -> None:
    store = open_store(tmp_path)
    arrived: list[tuple[str, int, int]] = []
    appends: list[int] = []
    store.add_arrival_listener(lambda t, q, m: arrived.append((t, q, m)))
    store.add_append_listener(lambda: appends.append(store.max_phy_offset))
    try:
        end = put(store, ("A", 0), ("A", 0), ("B", 1))
        assert store.confirmed_offset is None
        assert store.reads.get_max_offset("A", 0) == 2 and store.reads.get_max_offset("B", 1) == 1
        assert sorted(arrived) == [("A", 0, 2), ("B", 1, 1)]
        assert appends == [end]
    finally:
        store.shutdown()


def test_records_past_the_confirmed_offset_wait_and_arrive_when_confirmed(tmp_path: Path) -> None:
    store = open_store(tmp_path)
    arrived: list[tuple[str, int, int]] = []
    appends = 0

    def appended() -> None:
        nonlocal appends
        appends += 1

    store.add_arrival_listener(lambda t, q, m: arrived.append((t, q, m)))
    store.add_append_listener(appended)
    try:
        first = put(store, ("A", 0))
        store.set_confirmed(first)  # the gate closes with everything so far on the replicas
        second = put(store, ("A", 0), ("B", 0))
        third = put(store, ("A", 0))
        assert appends == 3 and arrived == [("A", 0, 1)]  # appends seen, nothing readable yet
        assert store.reads.get_max_offset("A", 0) == 1
        assert store.reads.get_max_offset("B", 0) == 0
        res = store.reads.get_messages("A", 0, 1, 32)
        assert res.status is GetStatus.OFFSET_OVERFLOW_ONE and res.max_offset == 1
        assert store.reads.read_queue_entries("A", 0, 0, 10) == store.reads.read_queue_entries("A", 0, 0, 1)
        assert store.reads.get_store_time("A", 0, 1) == -1
        assert store.reads.get_messages("A", 0, 0, 32).count == 1

        store.set_confirmed(second - 1)  # part of the second batch: it stays held back
        assert store.reads.get_max_offset("A", 0) == 1 and arrived == [("A", 0, 1)]
        store.set_confirmed(second)
        assert store.reads.get_max_offset("A", 0) == 2 and store.reads.get_max_offset("B", 0) == 1
        assert sorted(arrived[1:]) == [("A", 0, 2), ("B", 0, 1)]
        assert store.reads.get_messages("A", 0, 1, 32).count == 1
        assert store.reads.get_store_time("A", 0, 2) == -1

        store.set_confirmed(first)  # reports never take back what readers saw
        assert store.reads.get_max_offset("A", 0) == 2
        store.set_confirmed(third)
        assert store.reads.get_max_offset("A", 0) == 3
        assert store.reads.get_messages("A", 0, 0, 32).count == 3
        assert arrived[-1] == ("A", 0, 3)
    finally:
        store.shutdown()


def test_opening_the_gate_releases_everything_held(tmp_path: Path) -> None:
    store = open_store(tmp_path)
    try:
        store.set_confirmed(-1)  # a waited-for slave that has reported nothing yet
        put(store, ("A", 0))
        put(store, ("A", 1))
        assert store.reads.get_max_offset("A", 0) == 0 and store.reads.get_max_offset("A", 1) == 0
        store.set_confirmed(None)
        assert store.reads.get_max_offset("A", 0) == 1 and store.reads.get_max_offset("A", 1) == 1
        put(store, ("A", 0))  # open: readable at once
        assert store.reads.get_max_offset("A", 0) == 2
    finally:
        store.shutdown()


def test_a_truncated_log_shows_what_is_left_and_a_deleted_queue_is_forgotten(tmp_path: Path) -> None:
    store = open_store(tmp_path)
    try:
        kept = put(store, ("A", 0))
        store.set_confirmed(kept)
        put(store, ("A", 0))
        put(store, ("D", 0))
        assert store.reads.get_max_offset("A", 0) == 1
        store.delete_queue("D")
        store.replica.truncate_log(kept)  # a demoted master cuts what its successor never had
        assert store.confirmed_offset is None
        assert store.reads.get_max_offset("A", 0) == 1
        assert store.reads.get_messages("A", 0, 1, 32).status is GetStatus.OFFSET_OVERFLOW_ONE
        put(store, ("A", 0))
        assert store.reads.get_max_offset("A", 0) == 2
    finally:
        store.shutdown()


@settings(max_examples=40, deadline=None)
@given(st.lists(st.one_of(
    st.tuples(st.just("put"), st.lists(st.integers(0, 2), min_size=1, max_size=4)),
    st.tuples(st.just("confirm"), st.integers(0, 100)),
), min_size=1, max_size=30))
def test_readers_never_see_an_unconfirmed_record_nor_lose_a_seen_one(
        steps: list[tuple[str, object]]) -> None:
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        store = open_store(Path(d))
        try:
            ends: dict[int, list[int]] = {0: [], 1: [], 2: []}  # per queue: each entry's batch end
            seen = {0: 0, 1: 0, 2: 0}
            store.set_confirmed(0)
            confirm = 0
            for kind, arg in steps:
                if kind == "put":
                    assert isinstance(arg, list)
                    end = put(store, *[("Q", q) for q in arg])
                    for q in arg:
                        ends[q].append(end)
                else:
                    assert isinstance(arg, int)
                    # A confirm somewhere in what was written (percent of the log).
                    target = store.max_phy_offset * arg // 100
                    store.set_confirmed(target)
                    confirm = max(confirm, target)
                for q in ends:
                    visible = store.reads.get_max_offset("Q", q) if ends[q] else 0
                    # Exactly the entries whose batch ends at or before the confirmed offset.
                    assert visible == sum(1 for e in ends[q] if e <= confirm)
                    assert visible >= seen[q]
                    seen[q] = visible
                    if visible:
                        got = store.reads.get_messages("Q", q, 0, 1000)
                        assert got.count == visible
        finally:
            store.shutdown()
