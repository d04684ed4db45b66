"""Broadcasting and orderly push consumers on a real standalone broker."""

from __future__ import annotations

import threading
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest
from scenario_util import FAST_CONSUMER, FAST_PRODUCER, Recorder

from ferrymq import (
    AdminClient,
    ConsumeFromWhere,
    ConsumeOrderlyStatus,
    ConsumeStatus,
    Message,
    MessageExt,
    MessageModel,
    Producer,
    PushConsumer,
)
from ferrymq.client.errors import NoRouteError
from ferrymq.client.producer_async import hash_queue_index
from ferrymq.common import props as P
from ferrymq.common.message import MessageQueue
from ferrymq.common.names import dlq_topic, retry_topic
from waits import wait_until

# The tests here each use their own topics and groups: one server serves the module.
pytestmark = pytest.mark.shared_standalone


def test_broadcasting_gives_every_member_everything_and_resumes_from_its_file(
    standalone: Any, tmp_path: Path
) -> None:
    admin = AdminClient(standalone.namesrv)
    admin.create_topic("news", 2)
    recs = [Recorder(), Recorder()]

    def make(i: int) -> PushConsumer:
        rec = recs[i]

        def listener(msgs: list[MessageExt], ctx: Any) -> ConsumeStatus:
            rec.add(msgs)
            # A failure in broadcasting mode is dropped, never retried.
            return (
                ConsumeStatus.RECONSUME_LATER
                if msgs[0].body == b"n3"
                else ConsumeStatus.CONSUME_SUCCESS
            )

        c = PushConsumer(
            "g-news",
            standalone.namesrv,
            message_model=MessageModel.BROADCASTING,
            consume_from_where=ConsumeFromWhere.FIRST_OFFSET,
            # One as text: a path is taken either way (it raised TypeError as a str).
            offset_store_dir=tmp_path / "member0" if i == 0 else str(tmp_path / "member1"),
            **FAST_CONSUMER,
        )
        c.subscribe("news")
        c.register_listener(listener)
        return c

    a, b = make(0).start(), make(1).start()
    with Producer("p", standalone.namesrv, **FAST_PRODUCER) as producer:
        for i in range(10):
            producer.send(Message("news", f"n{i}".encode()))
        wait_until(lambda: recs[0].count() == 10 and recs[1].count() == 10, what="10 each")
        b.shutdown()
        for i in range(10, 15):
            producer.send(Message("news", f"n{i}".encode()))
        wait_until(lambda: recs[0].count() == 15, what="member 0 to see the new five")
        b = make(1).start()
        wait_until(lambda: recs[1].count() == 15, what="member 1 to resume after its file")
    a.shutdown()
    b.shutdown()
    for rec in recs:
        assert sorted(rec.bodies()) == sorted(f"n{i}".encode() for i in range(15))  # n3 once
    assert (tmp_path / "member1" / "g-news.json").exists()
    try:
        retried = admin.max_offset(MessageQueue(retry_topic("g-news"), "broker-a", 0))
    except NoRouteError:
        retried = 0
    assert retried == 0
    admin.close()


def _keys_on_distinct_queues(n_queues: int, count: int) -> list[str]:
    keys: dict[int, str] = {}
    i = 0
    while len(keys) < count:
        keys.setdefault(hash_queue_index(f"key-{i}", n_queues), f"key-{i}")
        i += 1
    return [keys[q] for q in sorted(keys)]


def test_orderly_consumes_each_sharding_key_in_send_order(standalone: Any) -> None:
    admin = AdminClient(standalone.namesrv)
    admin.create_topic("ledger", 4)
    seen: dict[str, list[int]] = defaultdict(list)
    lock = threading.Lock()

    def listener(msgs: list[MessageExt], ctx: Any) -> ConsumeOrderlyStatus:
        with lock:
            for m in msgs:
                key, seq = m.body.decode().split(":")
                seen[key].append(int(seq))
        return ConsumeOrderlyStatus.SUCCESS

    consumer = PushConsumer(
        "g-ledger",
        standalone.namesrv,
        consume_threads=4,
        consume_from_where=ConsumeFromWhere.FIRST_OFFSET,
        **FAST_CONSUMER,
    )
    consumer.subscribe("ledger")
    consumer.register_listener(listener, orderly=True)
    keys = [f"acct-{i}" for i in range(8)]
    with Producer("p", standalone.namesrv, **FAST_PRODUCER) as producer, consumer:
        for seq in range(25):
            for key in keys:
                producer.send_orderly(Message("ledger", f"{key}:{seq}".encode()), key)
        wait_until(lambda: sum(len(v) for v in seen.values()) >= 200, what="200 messages")
    assert {k: v for k, v in seen.items()} == {k: list(range(25)) for k in keys}
    admin.close()


def test_orderly_failure_suspends_only_its_queue_then_dead_letters(standalone: Any) -> None:
    admin = AdminClient(standalone.namesrv)
    admin.create_topic("ordered-fail", 4)
    bad_key, good_key = _keys_on_distinct_queues(4, 2)
    events: list[tuple[str, int, int]] = []  # (key, seq, reconsume_times) in consume order
    lock = threading.Lock()

    def listener(msgs: list[MessageExt], ctx: Any) -> ConsumeOrderlyStatus:
        m = msgs[0]
        key, seq = m.body.decode().split(":")
        with lock:
            events.append((key, int(seq), m.reconsume_times))
        if key == bad_key and seq == "0":
            return ConsumeOrderlyStatus.SUSPEND_CURRENT_QUEUE_A_MOMENT
        return ConsumeOrderlyStatus.SUCCESS

    consumer = PushConsumer(
        "g-ofail",
        standalone.namesrv,
        max_reconsume_times=3,
        consume_from_where=ConsumeFromWhere.FIRST_OFFSET,
        **{**FAST_CONSUMER, "suspend_current_queue_time": 0.3},
    )
    consumer.subscribe("ordered-fail")
    consumer.register_listener(listener, orderly=True)
    with Producer("p", standalone.namesrv, **FAST_PRODUCER) as producer:
        for seq in range(5):
            producer.send_orderly(Message("ordered-fail", f"{bad_key}:{seq}".encode()), bad_key)
            producer.send_orderly(Message("ordered-fail", f"{good_key}:{seq}".encode()), good_key)
    with consumer:
        wait_until(
            lambda: len([e for e in events if e[0] == bad_key]) >= 8, what="the bad key to finish"
        )
    bad = [(seq, rt) for key, seq, rt in events if key == bad_key]
    good = [seq for key, seq, _ in events if key == good_key]
    # Its own queue: four attempts of seq 0 (reconsume 0..3), then the rest in order.
    assert bad == [(0, 0), (0, 1), (0, 2), (0, 3), (1, 0), (2, 0), (3, 0), (4, 0)]
    assert good == [0, 1, 2, 3, 4]
    # The other queue was not held up: it finished before the bad queue moved past seq 0.
    first_bad_1 = events.index((bad_key, 1, 0))
    assert max(i for i, e in enumerate(events) if e[0] == good_key) < first_bad_1
    dlq = MessageQueue(dlq_topic("g-ofail"), "broker-a", 0)
    (dead,) = admin.pull(dlq, 0, 8).messages
    assert dead.body == f"{bad_key}:0".encode()
    admin.close()


def test_orderly_dead_letter_copy_counts_the_attempts_the_listener_saw(standalone: Any) -> None:
    admin = AdminClient(standalone.namesrv)
    admin.create_topic("ordered-dead", 1)
    seen: list[int] = []

    def listener(msgs: list[MessageExt], ctx: Any) -> ConsumeOrderlyStatus:
        seen.extend(m.reconsume_times for m in msgs)
        return ConsumeOrderlyStatus.SUSPEND_CURRENT_QUEUE_A_MOMENT

    consumer = PushConsumer(
        "g-odead",
        standalone.namesrv,
        max_reconsume_times=2,
        consume_from_where=ConsumeFromWhere.FIRST_OFFSET,
        **{**FAST_CONSUMER, "suspend_current_queue_time": 0.1},
    )
    consumer.subscribe("ordered-dead")
    consumer.register_listener(listener, orderly=True)
    with Producer("p", standalone.namesrv, **FAST_PRODUCER) as producer:
        sent = producer.send(Message("ordered-dead", b"poison", keys="poison-key"))
    dlq = MessageQueue(dlq_topic("g-odead"), "broker-a", 0)

    def dead_lettered() -> list[MessageExt]:
        try:
            return admin.pull(dlq, 0, 8).messages
        except NoRouteError:  # the DLQ topic exists once the first message goes there
            return []

    with consumer:
        (dead,) = wait_until(dead_lettered, what="the message in the dead-letter queue")
    # Three attempts (0, 1, 2), then the DLQ: its copy names the last attempt, as the
    # listener saw it and as RocketMQ's orderly consumer stores it.
    assert seen == [0, 1, 2]
    assert dead.reconsume_times == 2
    assert dead.body == b"poison"
    assert dead.properties[P.PROPERTY_RETRY_TOPIC] == "ordered-dead"
    assert dead.properties[P.PROPERTY_ORIGIN_MESSAGE_ID] == sent.msg_id
    assert dead.keys == "poison-key"
    admin.close()
