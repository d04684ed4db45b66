"""Queue allocation: every member computes its share from the same sorted inputs."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ferrymq.client.consumer.allocate import (
    allocate_averagely,
    allocate_by_circle,
    consistent_hash,
    resolve,
)
from ferrymq.common.message import MessageQueue

QUEUES = [MessageQueue("t", "broker-a", i) for i in range(8)]


def test_averagely_gives_contiguous_blocks_extra_to_the_first_members() -> None:
    cids = ["c1", "c2", "c3"]
    shares = [[mq.queue_id for mq in allocate_averagely("g", c, QUEUES, cids)] for c in cids]
    assert shares == [[0, 1, 2], [3, 4, 5], [6, 7]]


def test_more_members_than_queues_leaves_the_last_ones_idle() -> None:
    cids = [f"c{i}" for i in range(10)]
    shares = [allocate_averagely("g", c, QUEUES, cids) for c in cids]
    assert [len(s) for s in shares] == [1] * 8 + [0, 0]


def test_circle_deals_queues_round_robin() -> None:
    got = [mq.queue_id for mq in allocate_by_circle("g", "b", QUEUES, ["a", "b", "c"])]
    assert got == [1, 4, 7]


def test_unknown_member_gets_nothing() -> None:
    assert allocate_averagely("g", "stranger", QUEUES, ["a", "b"]) == []


@pytest.mark.parametrize("name", ["averagely", "circle", "consistent_hash"])
@given(st.integers(min_value=1, max_value=40), st.integers(min_value=1, max_value=12))
def test_every_queue_has_exactly_one_owner(name: str, n_queues: int, n_members: int) -> None:
    strategy = resolve(name)
    mqs = [MessageQueue("t", "b", i) for i in range(n_queues)]
    cids = sorted(f"10.0.0.1@{i}#1" for i in range(n_members))
    owned = [mq for c in cids for mq in strategy("g", c, mqs, cids)]
    assert sorted(owned) == mqs


def test_consistent_hash_moves_few_queues_when_a_member_leaves() -> None:
    strategy = consistent_hash()
    mqs = [MessageQueue("t", "b", i) for i in range(64)]
    before = {c: set(strategy("g", c, mqs, ["a", "b", "c", "d"])) for c in "abcd"}
    after = {c: set(strategy("g", c, mqs, ["a", "b", "c"])) for c in "abc"}
    for c in "abc":
        assert before[c] <= after[c]  # survivors keep what they had


def test_unknown_strategy_name_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown allocation strategy"):
        resolve("random")
