"""Producer rules that need no broker: validation, sharding-key hashing, fault tolerance."""

from __future__ import annotations

import itertools

import pytest

from ferrymq.client.errors import MessageValidationError
from ferrymq.client.fault import LatencyFaultTolerance
from ferrymq.client.outgoing import validate_message
from ferrymq.client.producer_async import AsyncProducer, hash_queue_index
from ferrymq.common.ids import UniqIdGenerator, decode_uniq_id
from ferrymq.common.message import Message, MessageBatchItem
from ferrymq.common.names import InvalidNameError
from ferrymq.common.props import properties_to_string
from ferrymq.common.record import decode_batch, encode_batch


def test_empty_body_is_refused_before_sending() -> None:
    with pytest.raises(MessageValidationError) as info:
        validate_message(Message("t", b""))
    assert info.value.field == "body"


def test_a_flag_or_properties_the_wire_cannot_carry_are_refused_before_sending() -> None:
    with pytest.raises(MessageValidationError) as info:
        validate_message(Message("t", b"x", flag=2**31))
    assert info.value.field == "flag"
    with pytest.raises(MessageValidationError, match="at most 32767") as info:
        validate_message(Message("t", b"x", properties={"big": "v" * 33_000}))
    assert info.value.field == "properties"
    validate_message(Message("t", b"x", flag=-(2**31), properties={"fits": "v" * 32_000}))
    producer = AsyncProducer("rules-flag")
    for msg in (Message("t", b"x", flag=-(2**31) - 1), Message("t", b"x", tags="a", flag=2**40)):
        with pytest.raises(MessageValidationError, match="32-bit"):
            producer._prepare(msg)
    with pytest.raises(MessageValidationError, match="32-bit"):
        producer._prepare_batch([Message("t", b"x"), Message("t", b"y", flag=2**31)])


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


# --- what a send carries: properties encoded once, the unique id appended -------------------

def _expected_text(props: dict[str, str]) -> str:
    return properties_to_string(props)


@pytest.mark.parametrize("props", [
    {},
    {"TAGS": "a", "KEYS": "k1 k2"},
    {"UNIQ_KEY": "7F0000010001000000000000000000AA"},
    {"TAGS": "a", "UNIQ_KEY": "", "KEYS": "k"},  # present but empty: a fresh id in its place
])
def test_a_prepared_send_carries_its_map_with_the_unique_id(props: dict[str, str]) -> None:
    producer = AsyncProducer("rules")
    msg = Message("t", b"x", properties=dict(props))
    out = producer._prepare(msg)
    assert msg.properties["UNIQ_KEY"] == out.uniq_id != ""
    assert out.text == _expected_text(msg.properties)
    assert out.properties == msg.properties and out.properties is not msg.properties


def test_a_prepared_retry_topic_send_moves_the_counters_to_the_header() -> None:
    producer = AsyncProducer("rules")
    out = producer._prepare(Message("%RETRY%g", b"x", properties={"RECONSUME_TIME": "2", "TAGS": "a"}))
    assert out.reconsume_times == 2 and "RECONSUME_TIME" not in out.properties
    assert out.text == _expected_text(out.properties)


def test_a_prepared_batch_encodes_each_map_with_its_unique_id() -> None:
    producer = AsyncProducer("rules")
    msgs = [Message("t", b"a"), Message("t", b"b", properties={"TAGS": "x"}),
            Message("t", b"c", properties={"UNIQ_KEY": "", "KEYS": "k"}),
            Message("t", b"d", properties={"UNIQ_KEY": "7F0000010001000000000000000000AA"})]
    out = producer._prepare_batch(msgs)
    items = decode_batch(out.body)
    assert [i.body for i in items] == [b"a", b"b", b"c", b"d"]
    assert [i.properties for i in items] == [m.properties for m in msgs]
    assert out.uniq_id.split(",") == [m.properties["UNIQ_KEY"] for m in msgs]
    assert len(set(out.uniq_id.split(","))) == 4
    assert out.body == encode_batch([MessageBatchItem(m.flag, m.body, dict(m.properties)) for m in msgs])


def test_a_batch_refuses_like_single_sends_do_in_message_order() -> None:
    producer = AsyncProducer("rules")
    with pytest.raises(MessageValidationError) as info:
        producer._prepare_batch([Message("t", b"a"), Message("u", b"")])
    assert info.value.field == "body"  # checked before the topic mismatch, as validate_message
    with pytest.raises(MessageValidationError, match="same topic"):
        producer._prepare_batch([Message("t", b"a"), Message("u", b"b")])
    with pytest.raises(InvalidNameError):
        producer._prepare_batch([Message("t", b"a"), Message("no spaces", b"b")])
    with pytest.raises(MessageValidationError, match="delayed"):
        producer._prepare_batch([Message("t", b"a", delay_level=2)])
    with pytest.raises(MessageValidationError, match="retry topic"):
        producer._prepare_batch([Message("%RETRY%g", b"a")])
    with pytest.raises(MessageValidationError, match="reserved"):
        producer._prepare(Message("TBW102", b"a"))
    with pytest.raises(MessageValidationError, match="reserved"):
        producer._prepare(Message("TBW102", b"a"))  # a remembered verdict is only a valid one


def test_unique_ids_taken_together_are_the_ids_taken_one_by_one() -> None:
    gen = UniqIdGenerator()
    ids = [*gen.next_ids(5), gen.next_id()]
    decoded = [decode_uniq_id(i) for i in ids]
    assert len(set(ids)) == 6
    assert [d.counter for d in decoded] == [1, 2, 3, 4, 5, 6]
    assert all(len(i) == 32 and i == i.upper() for i in ids)
    gen._counter = itertools.count(0xFFFF)
    assert [decode_uniq_id(i).counter for i in gen.next_ids(3)] == [0xFFFF, 0, 1]
    assert decode_uniq_id(gen.next_id()).counter == 2


def test_a_message_owns_an_immutable_body() -> None:
    """bytes are kept as they are; a bytearray or memoryview is copied (a later change to the
    caller's buffer does not reach the message); anything else is refused."""
    raw = b"body"
    assert Message("t", raw).body is raw
    buf = bytearray(b"abc")
    from_array, from_view = Message("t", buf), Message("t", memoryview(buf))
    buf[0] = ord("z")
    assert from_array.body == from_view.body == b"abc"
    assert type(from_array.body) is bytes and type(from_view.body) is bytes
    with pytest.raises(TypeError, match="must be bytes, not str"):
        Message("t", "text")  # type: ignore[arg-type]
    props = {"a": "1"}
    msg = Message("t", raw, properties=props)
    msg.properties["b"] = "2"
    assert props == {"a": "1"}
