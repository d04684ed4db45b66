"""ProcessQueue: the acknowledgement arithmetic of the seeds, as pure data structure tests."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from ferrymq.client.consumer.process_queue import ProcessQueue
from ferrymq.common.message import MessageExt, MessageQueue

MQ = MessageQueue("t", "broker-a", 0)


def msgs(offsets: range | list[int], size: int = 10) -> list[MessageExt]:
    return [MessageExt("t", b"x" * size, queue_offset=o) for o in offsets]


def test_oldest_unfinished_message_holds_the_offset_as_in_the_seed() -> None:
    # 002: 2101..2200 pulled, 2102..2200 consumed, 2101 stuck -> the offset stays at 2101.
    pq = ProcessQueue(MQ)
    batch = msgs(range(2101, 2201))
    pq.put(batch)
    assert pq.remove(batch[1:]) == 2101
    assert pq.acked_ranges() == [(2102, 2201)]
    assert pq.remove(batch[:1]) == 2201  # max offset + 1 once empty
    assert pq.acked_ranges() == []
    assert pq.remove(batch[:1]) == -1  # nothing held: nothing to commit


def test_partial_batch_keeps_the_first_unconsumed_offset() -> None:
    # 000/001: m1 and m3 consumed, m2 failed and still held -> commit m2's offset.
    pq = ProcessQueue(MQ)
    m1, m2, m3 = msgs([5, 6, 7])
    pq.put([m1, m2, m3])
    assert pq.remove([m1, m3]) == 6
    assert pq.acked_ranges() == [(7, 8)]


def test_repeated_pull_does_not_hold_a_message_twice() -> None:
    pq = ProcessQueue(MQ)
    assert len(pq.put(msgs([1, 2, 3]))) == 3
    assert [m.queue_offset for m in pq.put(msgs([2, 3, 4]))] == [4]
    assert pq.count == 4


@given(st.lists(st.integers(min_value=0, max_value=60), unique=True, min_size=1), st.data())
def test_commit_offset_is_smallest_held_or_max_plus_one(
    offsets: list[int], data: st.DataObject
) -> None:
    offsets.sort()
    pq = ProcessQueue(MQ)
    held = msgs(offsets)
    pq.put(held)
    done = data.draw(st.lists(st.sampled_from(held), unique_by=lambda m: m.queue_offset))
    commit = pq.remove(done)
    remaining = sorted(set(offsets) - {m.queue_offset for m in done})
    assert commit == (remaining[0] if remaining else offsets[-1] + 1)
    # Precise ranges: exactly the offsets above the commit point not held any more.
    acked = {o for a, b in pq.acked_ranges() for o in range(a, b)}
    expected = set(range(commit, offsets[-1] + 1)) - set(remaining) if remaining else set()
    assert acked == expected


def test_orderly_take_commit_and_reconsume_keep_offset_order() -> None:
    pq = ProcessQueue(MQ, in_order=True)
    pq.put(msgs(range(10, 15)))
    first = pq.take(2)
    assert [m.queue_offset for m in first] == [10, 11]
    pq.reconsume(first)  # suspended: given back, consumed again first
    again = pq.take(3)
    assert [m.queue_offset for m in again] == [10, 11, 12]
    assert pq.commit_offset() == 10
    assert pq.commit() == 13
    assert pq.commit_offset() == 13
    assert [m.queue_offset for m in pq.take(5)] == [13, 14]
    assert pq.commit() == 15 and pq.empty


def test_flow_control_closes_and_reopens_on_count_and_bytes() -> None:
    pq = ProcessQueue(MQ, max_count=3, max_bytes=1000)
    batch = msgs(range(3))
    pq.put(batch)
    assert pq.over_limit() and not pq.space.is_set()
    pq.remove(batch[:1])
    assert not pq.over_limit() and pq.space.is_set()
    big = ProcessQueue(MQ, max_count=100, max_bytes=100)
    big.put(msgs([1], size=150))
    assert big.over_limit()


def test_ranges_acknowledged_before_a_takeover_are_skipped_and_still_reported() -> None:
    # The broker had 3..8 and 10..12 acknowledged above offset 2 when this member took over.
    pq = ProcessQueue(MQ, acked_above=[(3, 8), (10, 12)])
    added = pq.put(msgs(range(2, 10)))
    assert [m.queue_offset for m in added] == [2, 8, 9]
    assert pq.commit_offset() == 2
    # Not reached yet (10..12) still goes back to the broker with the rest.
    assert pq.acked_ranges() == [(3, 8), (10, 12)]
    assert pq.remove(added[:1]) == 8
    assert pq.acked_ranges() == [(10, 12)]
    assert pq.remove(added[1:]) == 10
    assert pq.acked_ranges() == [(11, 12)]  # 10 itself is the commit offset's neighbour
    assert [m.queue_offset for m in pq.put(msgs(range(10, 14)))] == [12, 13]


def test_acknowledging_out_of_order_keeps_the_oldest_held_offset() -> None:
    pq = ProcessQueue(MQ)
    batch = msgs(range(100))
    pq.put(batch)
    assert pq.remove(batch[1:50]) == 0
    assert pq.acked_ranges() == [(1, 50)]
    assert pq.remove(batch[:1]) == 50
    assert pq.remove(batch[50:]) == 100 and pq.empty and pq.bytes == 0


def _ranges_by_scan(held: set[int], top: int, skip: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """What acked_ranges means, computed from scratch: the gaps between held offsets, the
    tail after the last held one up to what was pulled, the ranges taken over beyond it; all
    above the commit offset's neighbour."""
    ranges, last = [], -1
    for off in sorted(held):
        if last >= 0 and off > last + 1:
            ranges.append((last + 1, off))
        last = off
    if last >= 0 and top > last:
        ranges.append((last + 1, top + 1))
    ranges += [(max(a, top + 1), b) for a, b in skip if b > top + 1]
    floor = (min(held) if held else top + 1) + 1
    return [(max(a, floor), b) for a, b in ranges if b > max(a, floor)]


_step = st.one_of(
    st.tuples(st.just("put"), st.lists(st.integers(0, 4), min_size=1, max_size=8), st.integers(0, 3)),
    st.tuples(st.just("done"), st.lists(st.integers(0, 50), max_size=6), st.just(0)),
)


@given(st.lists(_step, min_size=1, max_size=25), st.booleans(),
       st.lists(st.tuples(st.integers(0, 30), st.integers(1, 6)), max_size=3))
def test_ranges_kept_as_they_change_are_the_ranges_a_scan_finds(
    steps: list[tuple[str, list[int], int]], in_order: bool, taken_over: list[tuple[int, int]]
) -> None:
    # Pulls with gaps (filtered out) and repeats, acknowledgements in any order (concurrent)
    # or batch by batch (in order), ranges taken over: reported as a full scan reports them.
    skip, end = [], 0
    for gap, length in taken_over:
        skip.append((end + gap, end + gap + length))
        end += gap + length
    pq = ProcessQueue(MQ, in_order=in_order, acked_above=skip)
    top = -1
    for kind, values, back in steps:
        if kind == "put":
            start, offsets = max(top - back, 0), []
            for gap in values:
                start += gap
                offsets.append(start)
                start += 1
            pq.put(msgs(offsets))
            top = max(top, offsets[-1])
        elif in_order:
            pq.take(len(values))
            pq.commit()
        else:
            held = pq.messages()
            pq.remove([held[i % len(held)] for i in values] if held else [])
        held_now = {m.queue_offset for m in pq.messages()}
        assert pq.acked_ranges() == _ranges_by_scan(held_now, top, skip)
        # Nothing kept below the commit offset: a held offset before each run.
        assert len(pq._run_end) <= len(held_now)
