"""Push consumer, concurrent listener: acknowledgement, retry, DLQ and start positions on a
real standalone broker with short delay levels."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
from scenario_util import FAST_CONSUMER, FAST_PRODUCER, Recorder, single_queue

from conftest import start_standalone
from ferrymq import (
    AdminClient,
    ConsumeFromWhere,
    ConsumeStatus,
    Message,
    MessageExt,
    Producer,
    PullStatus,
    PushConsumer,
)
from ferrymq.client.errors import NoRouteError
from ferrymq.common import props as P
from ferrymq.common.message import MessageQueue
from ferrymq.common.names import SCHEDULE_TOPIC, dlq_topic, retry_topic
from waits import wait_until

# The tests here each use their own topics and groups: one server serves the module.
pytestmark = pytest.mark.shared_standalone


def _send_n(
    namesrv: str, topic: str, n: int, prefix: str = "m", queue: int | None = None
) -> list[str]:
    with Producer("p", namesrv, **FAST_PRODUCER) as producer:
        ids = []
        for i in range(n):
            msg = Message(topic, f"{prefix}{i}".encode(), keys=f"{prefix}{i}")
            r = (
                producer.send_to_queue(msg, single_queue(topic, queue))
                if queue is not None
                else producer.send(msg)
            )
            ids.append(r.msg_id)
        return ids


def _pull_all(admin: AdminClient, mq: MessageQueue) -> list[MessageExt]:
    out: list[MessageExt] = []
    offset = admin.min_offset(mq)
    while True:
        r = admin.pull(mq, offset, 32)
        if r.status is not PullStatus.FOUND:
            return out
        out += r.messages
        offset = r.next_begin_offset


def test_partial_batch_ack_index_sends_back_only_the_messages_after_it(standalone: Any) -> None:
    """Seeds 000/001: with ack_index=1 in a batch of four, the last two go to the retry topic
    and come back (reconsume_times 1, original topic); the offset covers all four."""
    admin = AdminClient(standalone.namesrv)
    admin.create_topic("ack", 1)
    _send_n(standalone.namesrv, "ack", 4, queue=0)
    batches: list[list[MessageExt]] = []
    lock = threading.Lock()

    def listener(msgs: list[MessageExt], ctx: Any) -> ConsumeStatus:
        with lock:
            batches.append(msgs)
            first = len(batches) == 1
        if first:
            ctx.ack_index = 1
        return ConsumeStatus.CONSUME_SUCCESS

    consumer = PushConsumer(
        "g-ack",
        standalone.namesrv,
        consume_message_batch_max_size=4,
        consume_from_where=ConsumeFromWhere.FIRST_OFFSET,
        **FAST_CONSUMER,
    )
    consumer.subscribe("ack")
    consumer.register_listener(listener)
    with consumer:
        wait_until(lambda: sum(len(b) for b in batches) >= 6, what="the two retried messages")
        wait_until(
            lambda: admin.query_consumer_offset("g-ack", single_queue("ack")) == 4,
            what="offset 4 committed",
        )
    first, *rest = batches
    assert [m.body for m in first] == [b"m0", b"m1", b"m2", b"m3"]
    again = sorted((m for b in rest for m in b), key=lambda m: m.body)
    assert [m.body for m in again] == [b"m2", b"m3"]
    assert all(m.reconsume_times == 1 and m.topic == "ack" for m in again)
    assert {m.msg_id for m in again} == {m.msg_id for m in first[2:]}
    admin.close()


@pytest.mark.own_standalone  # it stops and restarts the server
def test_failed_send_back_is_kept_and_consumed_again_locally(standalone: Any) -> None:
    """The broker is gone when the listener fails: the send-back fails, the message stays in
    the client and is consumed again after local_retry_delay with reconsume_times + 1."""
    admin = AdminClient(standalone.namesrv)
    admin.create_topic("local", 1)
    (msg_id,) = _send_n(standalone.namesrv, "local", 1, queue=0)
    admin.close()
    seen: list[MessageExt] = []
    got_first = threading.Event()
    release = threading.Event()

    def listener(msgs: list[MessageExt], ctx: Any) -> ConsumeStatus:
        seen.extend(msgs)
        if len(seen) == 1:
            got_first.set()
            release.wait(30)
            return ConsumeStatus.RECONSUME_LATER
        return ConsumeStatus.CONSUME_SUCCESS

    consumer = PushConsumer(
        "g-local",
        standalone.namesrv,
        consume_from_where=ConsumeFromWhere.FIRST_OFFSET,
        **FAST_CONSUMER,
    )
    consumer.subscribe("local")
    consumer.register_listener(listener)
    consumer.start()
    restarted = None
    try:
        assert got_first.wait(20)
        ns_port = int(standalone.namesrv.rsplit(":", 1)[1])
        broker_port = int(standalone.broker.rsplit(":", 1)[1])
        standalone.stop()
        release.set()
        wait_until(lambda: len(seen) >= 2, what="the local re-consumption")
        assert seen[1].msg_id == msg_id and seen[1].reconsume_times == 1
        # Back up on the same ports: the consumer commits, and nothing went to %RETRY%.
        restarted = start_standalone(
            standalone.store_dir, namesrv_port=ns_port, broker_port=broker_port
        )
        with AdminClient(restarted.namesrv) as admin2:
            wait_until(
                lambda: admin2.query_consumer_offset("g-local", single_queue("local")) == 1,
                what="the offset after the local retry",
            )
            try:
                retried = admin2.max_offset(MessageQueue(retry_topic("g-local"), "broker-a", 0))
            except NoRouteError:
                retried = 0
            assert retried == 0
        assert len(seen) == 2
    finally:
        consumer.shutdown()
        if restarted is not None:
            restarted.stop()


def test_sixteen_failures_pass_every_delay_level_in_order_then_the_dlq(standalone: Any) -> None:
    admin = AdminClient(standalone.namesrv)
    admin.create_topic("doomed", 1)
    (msg_id,) = _send_n(standalone.namesrv, "doomed", 1, queue=0)
    rec = Recorder()

    def listener(msgs: list[MessageExt], ctx: Any) -> ConsumeStatus:
        rec.add(msgs)
        return ConsumeStatus.RECONSUME_LATER

    consumer = PushConsumer(
        "g-doomed",
        standalone.namesrv,
        max_reconsume_times=16,
        consume_from_where=ConsumeFromWhere.FIRST_OFFSET,
        **FAST_CONSUMER,
    )
    consumer.subscribe("doomed")
    consumer.register_listener(listener)
    dlq = MessageQueue(dlq_topic("g-doomed"), "broker-a", 0)
    with consumer:
        wait_until(lambda: _dlq_size(admin, dlq) == 1, timeout=60, what="the message in the DLQ")
    deliveries = rec.snapshot()
    assert [m.reconsume_times for m in deliveries] == list(range(17))
    assert {m.msg_id for m in deliveries} == {msg_id}
    assert all(m.topic == "doomed" for m in deliveries)
    (dead,) = _pull_all(admin, dlq)
    assert dead.msg_id == msg_id and dead.reconsume_times == 17
    assert dead.properties[P.PROPERTY_RETRY_TOPIC] == "doomed"
    # Each retry waited in the schedule queue of its level: 3 + reconsume times, in order.
    scheduled = []
    for level in range(1, 19):
        mq = MessageQueue(SCHEDULE_TOPIC, "broker-a", level - 1)
        scheduled += [
            (m.store_timestamp, m.commit_log_offset, level)
            for m in _pull_all(admin, mq)
            if m.msg_id == msg_id
        ]
    assert [level for _, _, level in sorted(scheduled)] == list(range(3, 19))
    admin.close()


def _dlq_size(admin: AdminClient, mq: MessageQueue) -> int:
    try:
        return admin.max_offset(mq)
    except NoRouteError:
        return 0


@pytest.mark.own_standalone  # it changes the broker's configuration
def test_new_groups_start_from_first_last_or_timestamp(standalone: Any) -> None:
    admin = AdminClient(standalone.namesrv)
    # An old queue (its first record no longer "in memory"): on a young one the broker starts
    # every new group at its first message (tests/client/test_new_group_start.py).
    admin.update_broker_config({"accessMessageInMemoryMaxRatio": "0"})
    admin.create_topic("starts", 1)
    q = single_queue("starts")
    _send_n(standalone.namesrv, "starts", 3, prefix="old")
    last_old = admin.pull(q, 2, 1).messages[0].store_timestamp
    wait_until(lambda: time.time() * 1000 > last_old + 1, what="the clock to pass the old messages")
    _send_n(standalone.namesrv, "starts", 3, prefix="mid")
    first_mid = admin.pull(q, 3, 1).messages[0].store_timestamp

    recorders = {name: Recorder() for name in ("first", "last", "timestamp")}
    consumers = []
    for name, where, extra in (
        ("first", ConsumeFromWhere.FIRST_OFFSET, {}),
        ("last", ConsumeFromWhere.LAST_OFFSET, {}),
        ("timestamp", ConsumeFromWhere.TIMESTAMP, {"consume_timestamp": first_mid}),
    ):
        rec = recorders[name]
        c = PushConsumer(
            f"g-{name}", standalone.namesrv, consume_from_where=where, **extra, **FAST_CONSUMER
        )
        c.subscribe("starts")
        c.register_listener(
            lambda msgs, ctx, rec=rec: rec.add(msgs) or ConsumeStatus.CONSUME_SUCCESS
        )
        consumers.append(c.start())
    try:
        _send_n(standalone.namesrv, "starts", 2, prefix="new")
        wait_until(lambda: recorders["first"].count() == 8, what="all 8 from the first offset")
        wait_until(lambda: recorders["timestamp"].count() == 5, what="5 from the timestamp")
        wait_until(lambda: recorders["last"].count() == 2, what="2 from the last offset")
    finally:
        for c in consumers:
            c.shutdown()
    assert sorted(recorders["last"].bodies()) == [b"new0", b"new1"]
    assert sorted(recorders["timestamp"].bodies()) == [b"mid0", b"mid1", b"mid2", b"new0", b"new1"]
    admin.close()


def test_graceful_shutdown_and_restart_consumes_every_message_exactly_once(standalone: Any) -> None:
    admin = AdminClient(standalone.namesrv)
    admin.create_topic("steady", 4)
    _send_n(standalone.namesrv, "steady", 300)
    first, second = Recorder(), Recorder()

    def make(rec: Recorder) -> PushConsumer:
        def listener(msgs: list[MessageExt], ctx: Any) -> ConsumeStatus:
            time.sleep(0.01)  # some work, so shutdown finds batches in flight
            rec.add(msgs)
            return ConsumeStatus.CONSUME_SUCCESS

        # Flow control keeps little in memory, so the shutdown comes mid-stream.
        c = PushConsumer(
            "g-steady",
            standalone.namesrv,
            pull_batch_size=8,
            consume_threads=4,
            pull_threshold_for_queue=10,
            consume_from_where=ConsumeFromWhere.FIRST_OFFSET,
            **FAST_CONSUMER,
        )
        c.subscribe("steady")
        c.register_listener(listener)
        return c

    a = make(first).start()
    wait_until(lambda: first.count() >= 100, what="a third of the messages")
    a.shutdown()
    assert first.count() < 300  # it stopped mid-stream
    b = make(second).start()
    wait_until(lambda: first.count() + second.count() >= 300, what="the rest after the restart")
    b.shutdown()
    seen = first.bodies() + second.bodies()
    assert len(seen) == len(set(seen)) == 300  # nothing twice, nothing lost
    admin.close()
