"""Which broker of a group a consumer reads (RocketMQ's PullAPIWrapper rule)."""

from __future__ import annotations

from ferrymq.client.route import read_addr

GROUP = {0: "m:1", 1: "s1:1", 2: "s2:1"}


def test_the_suggested_broker_when_listed_else_the_master_else_a_slave() -> None:
    assert read_addr(GROUP, 2) == "s2:1"
    assert read_addr(GROUP, 0) == "m:1"
    assert read_addr(GROUP, 5) == "m:1"  # suggested but not (or no longer) in the route
    assert read_addr({1: "s1:1", 2: "s2:1"}, 0) == "s1:1"  # the master is away
    assert read_addr({2: "s2:1"}, 1) == "s2:1"
    assert read_addr({}, 0) is None
