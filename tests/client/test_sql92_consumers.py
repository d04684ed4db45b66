"""SQL92 selectors through ferrymq's consumers on a real standalone: a push consumer and a
simple (pop) consumer with MessageSelector.by_sql get exactly the messages whose properties
match, and an invalid selector is refused at subscribe time."""

from __future__ import annotations

from typing import Any

import pytest
from scenario_util import FAST_CONSUMER, FAST_PRODUCER, Recorder, committed

from ferrymq import (
    AdminClient,
    ConsumeFromWhere,
    ConsumeStatus,
    Message,
    MessageExt,
    MessageSelector,
    Producer,
    PushConsumer,
    SelectorError,
    SimpleConsumer,
)
from waits import wait_until

# The tests here each use their own topics and groups: one server serves the module.
pytestmark = pytest.mark.shared_standalone

SELECTOR = "region = 'EU' AND amount BETWEEN 10 AND 40 OR TAGS = 'vip'"


def _orders(topic: str, n: int) -> list[Message]:
    out = []
    for i in range(n):
        props = {"amount": str(i)}
        if i % 4:
            props["region"] = "EU" if i % 2 else "US"
        out.append(Message(topic, f"o{i}".encode(), tags="vip" if i % 25 == 0 else "std", properties=props))
    return out


def _matching(msgs: list[Message]) -> set[bytes]:
    def ok(m: Message) -> bool:
        p = m.properties
        return (p.get("region") == "EU" and 10 <= int(p["amount"]) <= 40) or p.get("TAGS") == "vip"

    return {m.body for m in msgs if ok(m)}


def test_a_push_consumer_with_an_sql92_selector_receives_exactly_the_matching_messages(standalone: Any) -> None:
    topic, group = "sql-push", "sql-push-g"
    admin = AdminClient(standalone.namesrv)
    admin.create_topic(topic, 4)
    rec = Recorder()

    def listener(msgs: list[MessageExt], ctx: Any) -> ConsumeStatus:
        rec.add(msgs)
        return ConsumeStatus.CONSUME_SUCCESS

    consumer = PushConsumer(group, standalone.namesrv, consume_from_where=ConsumeFromWhere.FIRST_OFFSET,
                            **FAST_CONSUMER)
    consumer.subscribe(topic, MessageSelector.by_sql(SELECTOR))
    consumer.register_listener(listener)
    consumer.start()
    try:
        msgs = _orders(topic, 100)
        with Producer("sql-p", standalone.namesrv, **FAST_PRODUCER) as producer:
            for m in msgs:
                producer.send(m)
        want = _matching(msgs)
        assert 10 < len(want) < 50
        wait_until(lambda: rec.count() >= len(want), what="the matching messages")
        # The group's offsets reach the end of every queue: the rest were passed over, not held.
        ends = {mq.queue_id: admin.max_offset(mq) for mq in admin.message_queues(topic)}
        wait_until(lambda: committed(admin, group, topic) == ends, what="offsets at the end of every queue")
        assert sorted(rec.bodies()) == sorted(want)
        for m in rec.snapshot():
            assert m.properties.get("region") == "EU" or m.tags == "vip"
    finally:
        consumer.shutdown()
        admin.close()


def test_subscribe_refuses_an_invalid_selector_with_its_position(standalone: Any) -> None:
    with pytest.raises(SelectorError) as info:
        MessageSelector.by_sql("amount >> 5")
    assert (info.value.expression, info.value.position) == ("amount >> 5", 8)
    consumer = PushConsumer("sql-bad-g", standalone.namesrv)
    with pytest.raises(ValueError, match=r"MessageSelector\.by_sql"):
        consumer.subscribe("t", "amount > 5")  # a plain string is a tag expression
    consumer.subscribe("t", MessageSelector.by_tag("TagA || TagB"))
    assert consumer._impl.subscriptions["t"].tags == frozenset({"TagA", "TagB"})


async def test_a_simple_consumer_with_an_sql92_selector_pops_only_matching_messages(standalone: Any) -> None:
    from ferrymq.aio import AdminClient as AsyncAdmin
    from ferrymq.aio import Producer as AsyncProducer
    from ferrymq.aio import SimpleConsumer as AsyncSimple

    topic, group = "sql-pop", "sql-pop-g"
    admin = AsyncAdmin(standalone.namesrv)
    await admin.create_topic(topic, 1)
    msgs = _orders(topic, 60)
    async with AsyncProducer("sql-pop-p", standalone.namesrv, **FAST_PRODUCER) as producer:
        for m in msgs:
            await producer.send(m)
    consumer = AsyncSimple(group, standalone.namesrv, await_duration=0.5)
    consumer.subscribe(topic, MessageSelector.by_sql(SELECTOR))
    await consumer.start()
    try:
        got: list[bytes] = []
        for _ in range(100):
            views = await consumer.receive(32, invisible_duration=30)
            for v in views:
                got.append(v.body)
                await consumer.ack(v)
            if len(got) >= len(_matching(msgs)) and not views:
                break
        assert sorted(got) == sorted(_matching(msgs))
    finally:
        await consumer.shutdown()
        await admin.close()


def test_the_blocking_facade_takes_a_selector(standalone: Any) -> None:
    c = SimpleConsumer("sql-facade-g", standalone.namesrv)
    c.subscribe("sql-facade", MessageSelector.by_sql("a IS NOT NULL"))
    assert c._impl.subscriptions["sql-facade"].expression_type == "SQL92"
