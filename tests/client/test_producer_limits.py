"""Producer behaviour at its edges against a real standalone broker: the first sends of a
topic share one route lookup, the client's size check matches what the broker stores, and a
shut-down producer says so with a typed error."""

from __future__ import annotations

import array
import asyncio
import os
from typing import Any

import pytest
from scenario_util import FAST_PRODUCER

from ferrymq import (
    AdminClient,
    ClientClosedError,
    Message,
    MessageValidationError,
    Producer,
    SendStatus,
    aio,
)
from ferrymq.client.outgoing import BROKER_PROPERTY_HEADROOM
from ferrymq.client.producer_async import AsyncProducer
from ferrymq.common import props as P
from ferrymq.common.message import MessageQueue
from ferrymq.common.record import record_size

# The tests here each use their own topics and groups: one server serves the module.
pytestmark = pytest.mark.shared_standalone


async def test_concurrent_first_sends_share_one_route_lookup(standalone: Any) -> None:
    with AdminClient(standalone.namesrv) as admin:
        admin.create_topic("perfcheck", 4)
    async with aio.Producer("p-lookup", standalone.namesrv) as producer:
        api = producer.instance.api
        lookups: list[str] = []
        real = api.get_route

        async def counting(topic: str) -> Any:
            lookups.append(topic)
            return await real(topic)

        api.get_route = counting  # type: ignore[method-assign]
        results = await asyncio.gather(
            *(producer.send_async(Message("perfcheck", b"x")) for _ in range(200))
        )
    assert lookups == ["perfcheck"]
    assert {r.queue_id for r in results} <= {0, 1, 2, 3}


def _largest_body(topic: str, limit: int) -> int:
    props = P.properties_to_string({P.PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX: "0" * 32})
    return limit - BROKER_PROPERTY_HEADROOM - record_size(0, len(topic), len(props))


def test_the_largest_body_the_client_allows_is_stored_by_the_broker(standalone: Any) -> None:
    with Producer("p-size", standalone.namesrv, **FAST_PRODUCER) as producer:
        room = _largest_body("sizes", producer._impl.max_message_size)
        # incompressible, so the body goes as it is
        assert producer.send(Message("sizes", os.urandom(room))).status is SendStatus.SEND_OK
        with pytest.raises(MessageValidationError, match="stored message would be"):
            producer.send(Message("sizes", os.urandom(room + 1)))


def test_a_body_set_to_a_view_after_the_message_was_made_is_sent_as_its_bytes(standalone: Any) -> None:
    # Message() turns a view into bytes; a body set on it afterwards went as it was, and a
    # batch entry's length (len() of a view: its items) then disagreed with its bytes: the
    # pure-Python lane's batch was malformed and its futures never settled.
    with AdminClient(standalone.namesrv) as admin:
        admin.create_topic("view-body", 1)
        with Producer("p-view", standalone.namesrv, **FAST_PRODUCER) as producer:
            producer.send(Message("view-body", b"warm"))
            msg = Message("view-body", b"x")
            msg.body = memoryview(array.array("q", range(100)))  # type: ignore[assignment]
            result = producer.send_async(msg).result(30)
            assert result.status is SendStatus.SEND_OK
            batch = [Message("view-body", b"x"), Message("view-body", b"y")]
            batch[0].body = memoryview(array.array("q", range(50)))  # type: ignore[assignment]
            batched = producer.send_batch(batch)
            assert batched.status is SendStatus.SEND_OK
        got = admin.pull(MessageQueue("view-body", result.broker, result.queue_id), result.queue_offset, 1)
        assert got.messages[0].body == array.array("q", range(100)).tobytes()
        got = admin.pull(MessageQueue("view-body", batched.broker, batched.queue_id), batched.queue_offset, 2)
        assert [m.body for m in got.messages] == [array.array("q", range(50)).tobytes(), b"y"]


def test_each_entry_of_a_batch_is_held_to_the_stored_record_limit() -> None:
    producer = AsyncProducer("p-batch-size", "127.0.0.1:1")
    room = _largest_body("t", producer.max_message_size)
    producer._prepare_batch([Message("t", b"x" * room)])
    with pytest.raises(MessageValidationError, match="stored message would be"):
        producer._prepare_batch([Message("t", b"x" * (room + 1))])


async def test_a_shut_down_producer_raises_a_typed_closed_error(standalone: Any) -> None:
    blocking = Producer("p-closed", standalone.namesrv, **FAST_PRODUCER).start()
    blocking.shutdown()
    for send in (blocking.send, blocking.send_async, blocking.send_oneway):
        with pytest.raises(ClientClosedError, match="Producer is shut down"):
            send(Message("t", b"x"))
    producer = aio.Producer("p-closed-aio", standalone.namesrv)
    await producer.start()
    await producer.shutdown()
    with pytest.raises(ClientClosedError):
        await producer.send(Message("t", b"x"))
    with pytest.raises(ClientClosedError):
        producer.send_async(Message("t", b"x"))
