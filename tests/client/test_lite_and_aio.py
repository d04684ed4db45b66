"""LitePullConsumer and the asyncio API on a real standalone broker."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from scenario_util import FAST_CONSUMER, FAST_PRODUCER

from ferrymq import (
    AdminClient,
    ConsumeFromWhere,
    ConsumeStatus,
    LitePullConsumer,
    Message,
    MessageExt,
    Producer,
    aio,
)
from ferrymq.common.message import MessageQueue
from waits import wait_until

# The tests here each use their own topics and groups: one server serves the module.
pytestmark = pytest.mark.shared_standalone


def _fill(namesrv: str, topic: str, per_queue: int, queues: int) -> None:
    with Producer("p", namesrv, **FAST_PRODUCER) as producer:
        for q in range(queues):
            mq = MessageQueue(topic, "broker-a", q)
            for i in range(per_queue):
                producer.send_to_queue(Message(topic, f"q{q}-{i}".encode()), mq)


def _poll_until(consumer: LitePullConsumer, n: int) -> list[MessageExt]:
    got: list[MessageExt] = []
    wait_until(lambda: got.extend(consumer.poll(0.2)) or len(got) >= n, what=f"{n} polled")
    return got


def test_lite_pull_assign_poll_commit_seek_pause_resume(standalone: Any) -> None:
    admin = AdminClient(standalone.namesrv)
    admin.create_topic("lite", 2)
    _fill(standalone.namesrv, "lite", 5, 2)
    q0, q1 = admin.message_queues("lite")
    consumer = LitePullConsumer(
        "g-lite",
        standalone.namesrv,
        auto_commit=False,
        consume_from_where=ConsumeFromWhere.FIRST_OFFSET,
        **FAST_CONSUMER,
    )
    consumer.assign([q0, q1])
    with consumer:
        got = _poll_until(consumer, 10)
        assert sorted(m.body for m in got) == sorted(
            f"q{q}-{i}".encode() for q in (0, 1) for i in range(5)
        )
        by_queue = [[m.queue_offset for m in got if m.queue_id == q] for q in (0, 1)]
        assert by_queue == [list(range(5)), list(range(5))]  # offset order per queue
        assert admin.query_consumer_offset("g-lite", q0) in (-1, 0)  # nothing committed yet
        consumer.commit()
        assert admin.query_consumer_offset("g-lite", q0) == 5
        assert consumer.committed(q1) == 5

        consumer.seek(q0, 2)
        again = _poll_until(consumer, 3)
        assert [m.queue_offset for m in again] == [2, 3, 4] and {m.queue_id for m in again} == {0}

        consumer.pause([q1])
        _fill(standalone.namesrv, "lite", 1, 2)
        only = _poll_until(consumer, 1)
        assert [m.queue_id for m in only] == [0]
        assert consumer.poll(0.3) == []  # q1 holds a message, but it is paused
        consumer.resume([q1])
        resumed = _poll_until(consumer, 1)
        assert [(m.queue_id, m.queue_offset) for m in resumed] == [(1, 5)]
    admin.close()


def test_lite_pull_subscribe_auto_commits_what_was_polled(standalone: Any) -> None:
    admin = AdminClient(standalone.namesrv)
    admin.create_topic("lite-sub", 2)
    _fill(standalone.namesrv, "lite-sub", 4, 2)
    consumer = LitePullConsumer(
        "g-lite-sub",
        standalone.namesrv,
        consume_from_where=ConsumeFromWhere.FIRST_OFFSET,
        **FAST_CONSUMER,
    )
    consumer.subscribe("lite-sub")
    with consumer:
        assert len(_poll_until(consumer, 8)) == 8
        assert consumer.assignment() == set(admin.message_queues("lite-sub"))
    # Shutting down with auto-commit acknowledges everything polled.
    assert [
        admin.query_consumer_offset("g-lite-sub", mq) for mq in admin.message_queues("lite-sub")
    ] == [4, 4]
    admin.close()


def _poll_exactly(consumer: LitePullConsumer, n: int) -> list[MessageExt]:
    got: list[MessageExt] = []
    wait_until(lambda: got.extend(consumer.poll(0.2, n - len(got))) or len(got) >= n, what=f"{n} polled")
    return got


def test_lite_pull_committed_reads_without_moving_the_consumer_back(standalone: Any) -> None:
    admin = AdminClient(standalone.namesrv)
    admin.create_topic("lite-look", 1)
    _fill(standalone.namesrv, "lite-look", 90, 1)
    (mq,) = admin.message_queues("lite-look")
    # The commit loop and the periodic persist never run during the test: the broker holds
    # only what commit() sent, so its offset and the consumer's can differ, as when a commit
    # is still on its way.
    consumer = LitePullConsumer(
        "g-lite-look",
        standalone.namesrv,
        consume_from_where=ConsumeFromWhere.FIRST_OFFSET,
        **{**FAST_CONSUMER, "persist_interval": 3600.0, "commit_delay": 3600.0},
    )
    consumer.assign([mq])
    with consumer:
        assert [m.queue_offset for m in _poll_exactly(consumer, 30)] == list(range(30))
        consumer.commit()
        assert admin.query_consumer_offset("g-lite-look", mq) == 30
        assert [m.queue_offset for m in _poll_exactly(consumer, 60)] == list(range(30, 90))
        assert consumer.poll(0.05) == []  # auto-commit: all 90 acknowledged, on this side only
        assert consumer.committed(mq) == 30
        consumer.commit()
        assert admin.query_consumer_offset("g-lite-look", mq) == 90
        assert consumer.committed(mq) == 90
    admin.close()


def test_asyncio_api_with_an_async_listener(standalone: Any) -> None:
    async def scenario() -> list[bytes]:
        async with aio.AdminClient(standalone.namesrv) as admin:
            await admin.create_topic("aio", 2)
        got: list[bytes] = []
        done = asyncio.Event()

        async def listener(msgs: list[MessageExt], ctx: Any) -> ConsumeStatus:
            await asyncio.sleep(0)
            got.extend(m.body for m in msgs)
            if len(got) >= 10:
                done.set()
            return ConsumeStatus.CONSUME_SUCCESS

        consumer = aio.PushConsumer(
            "g-aio",
            standalone.namesrv,
            consume_from_where=ConsumeFromWhere.FIRST_OFFSET,
            **FAST_CONSUMER,
        )
        consumer.subscribe("aio")
        consumer.register_listener(listener)
        async with consumer, aio.Producer("p", standalone.namesrv, **FAST_PRODUCER) as producer:
            results = await asyncio.gather(
                *(producer.send(Message("aio", f"a{i}".encode())) for i in range(5))
            )
            assert all(r.queue_offset >= 0 for r in results)
            for i in range(5, 10):
                await producer.send_async(Message("aio", f"a{i}".encode()))
            await asyncio.wait_for(done.wait(), 20)
        return got

    got = asyncio.run(scenario())
    assert sorted(got) == sorted(f"a{i}".encode() for i in range(10))
