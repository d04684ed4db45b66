"""Which messages a read-queue shrink would strand (broker/topics.check_read_shrink)."""

from __future__ import annotations

import pytest

from ferrymq.broker.topics import ReadShrinkRefused, StrandedQueue, check_read_shrink

BOUNDS = {0: (0, 9), 1: (0, 9), 2: (3, 10), 3: (4, 4)}


def _check(committed: dict[int, list[int]], new_read: int = 2) -> tuple[StrandedQueue, ...]:
    try:
        check_read_shrink("t", 4, new_read, BOUNDS.__getitem__, lambda q: committed.get(q, []))
    except ReadShrinkRefused as exc:
        assert (exc.topic, exc.read_queue_nums, exc.new_read_queue_nums) == ("t", 4, new_read)
        return exc.stranded
    return ()


def test_without_any_group_every_message_of_a_removed_queue_counts() -> None:
    # Queue 3 is empty (min == max): nothing of it counts.
    assert _check({}) == (StrandedQueue(2, 7),)


def test_the_least_advanced_group_decides_and_no_commit_counts_from_the_first_message() -> None:
    assert _check({2: [10, 6]}) == (StrandedQueue(2, 4),)
    assert _check({2: [10, -1]}) == (StrandedQueue(2, 7),)
    assert _check({2: [10, 10]}) == ()


def test_queues_kept_are_not_looked_at() -> None:
    assert _check({}, new_read=3) == ()  # queue 2 stays; queue 3 is empty
    with pytest.raises(ReadShrinkRefused, match=r"from 4 to 2 would strand 7 unconsumed"):
        check_read_shrink("t", 4, 2, BOUNDS.__getitem__, lambda q: [])
