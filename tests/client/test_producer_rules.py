"""Producer rules that need no broker: validation, sharding-key hashing, fault tolerance."""

from __future__ import annotations

import pytest

from ferrymq.client.errors import MessageValidationError
from ferrymq.client.fault import LatencyFaultTolerance
from ferrymq.client.producer_async import hash_queue_index, validate_message
from ferrymq.common.message import Message
from ferrymq.common.names import InvalidNameError


def test_empty_body_is_refused_before_sending() -> None:
    with pytest.raises(MessageValidationError) as info:
        validate_message(Message("t", b""))
    assert info.value.field == "body"


def test_body_over_the_limit_is_refused() -> None:
    with pytest.raises(MessageValidationError, match="limit is 4194304"):
        validate_message(Message("t", b"x" * (4 * 1024 * 1024 + 1)))
    validate_message(Message("t", b"x" * (4 * 1024 * 1024)))


def test_bad_topic_names_and_system_topics_are_refused() -> None:
    with pytest.raises(InvalidNameError):
        validate_message(Message("no spaces", b"x"))
    with pytest.raises(MessageValidationError, match="reserved"):
        validate_message(Message("TBW102", b"x"))


def test_property_with_a_separator_is_refused() -> None:
    with pytest.raises(MessageValidationError) as info:
        validate_message(Message("t", b"x", properties={"a": "b\x01c"}))
    assert info.value.field == "properties"


def test_sharding_key_hash_matches_javas_select_by_hash() -> None:
    # "abc".hashCode() == 96354; "polygenelubricants".hashCode() == Integer.MIN_VALUE.
    assert hash_queue_index("abc", 4) == 96354 % 4
    assert hash_queue_index("polygenelubricants", 3) == 2  # Math.abs(MIN_VALUE % 3)
    assert hash_queue_index(-7, 4) == 3  # Integer.hashCode is the value itself
    assert all(0 <= hash_queue_index(f"key-{i}", 5) < 5 for i in range(100))


def test_a_failed_broker_is_avoided_until_its_isolation_ends() -> None:
    now = [100.0]
    fault = LatencyFaultTolerance(isolation_seconds=5.0, clock=lambda: now[0])
    fault.update("broker-a", 10, isolation=True)
    assert not fault.is_available("broker-a")
    assert fault.is_available("broker-b")
    now[0] += 5.0
    assert fault.is_available("broker-a")


def test_a_slow_broker_is_avoided_by_rocketmqs_latency_table() -> None:
    now = [0.0]
    fault = LatencyFaultTolerance(clock=lambda: now[0])
    fault.update("fast", 40, isolation=False)
    fault.update("slow", 600, isolation=False)  # >= 550 ms: 30 s out
    assert fault.is_available("fast")
    assert not fault.is_available("slow")
    assert fault.least_bad() == "fast"
