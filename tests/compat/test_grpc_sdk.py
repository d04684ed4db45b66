"""The official RocketMQ 5 Python SDK (PyPI rocketmq-python-client 5.1.x, gRPC) unchanged against
ferrymq's gRPC endpoint, on the same store as the 4.x remoting port: what it sends is an
ordinary message to ferrymq's and ali-ons's 4.x consumers.

The SDK runs in tests/compat/py5/.venv (`make compat-py5`) through py5/sdk.py, which prints JSON
event lines like the other compat scripts."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest
from compat_util import Clients, by_body, consume_with_ferrymq, py5_python_or_skip, run_producer, serve
from compat_util import admin as admin
from compat_util import clients as clients

from conftest import Standalone
from ferrymq import AdminClient, ConsumeFromWhere, ConsumeStatus, MessageExt, PushConsumer

pytestmark = pytest.mark.compat


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Standalone]:
    with serve(tmp_path_factory, "grpc-sdk", needs=py5_python_or_skip) as srv:
        assert srv.grpc, "the standalone server prints grpc=HOST:PORT on its ready line"
        yield srv


class Collector:
    def __init__(self, consumer: PushConsumer) -> None:
        self.consumer = consumer
        self.got: list[MessageExt] = []
        self.cond = threading.Condition()

    def listener(self, msgs: list[MessageExt], _ctx: object) -> ConsumeStatus:
        with self.cond:
            self.got.extend(msgs)
            self.cond.notify_all()
        return ConsumeStatus.CONSUME_SUCCESS

    def wait(self, count: int, timeout: float) -> list[MessageExt]:
        with self.cond:
            assert self.cond.wait_for(lambda: len(self.got) >= count, timeout), f"got {len(self.got)} of {count}"
            return list(self.got)


def consume_in_background(server: Standalone, topic: str, group: str) -> Collector:
    consumer = PushConsumer(group, server.namesrv, consume_from_where=ConsumeFromWhere.FIRST_OFFSET)
    collector = Collector(consumer)
    consumer.subscribe(topic)
    consumer.register_listener(collector.listener)
    consumer.start()
    _started.append(consumer)
    return collector


_started: list[PushConsumer] = []


@pytest.fixture(autouse=True)
def _stop_consumers() -> Iterator[None]:
    yield
    while _started:
        _started.pop().shutdown()


def test_sdk_producer_messages_reach_ferrymq_and_ali_ons_consumers(clients: Clients, admin: AdminClient,
                                                                      server: Standalone) -> None:
    topic, n = "sdk5-normal", 120
    admin.create_topic(topic, 4)
    ons = clients.ons_consumer(topic=topic, group="sdk5-normal-ons", consumeFromWhere="first")
    ons.wait_event("ready", 30)
    producer = clients.sdk5("produce", topic=topic, count=n, tags=["TagA", "TagB"], keys="key-{i} k{i}",
                            properties={"color": "c-{i}"})
    sent = run_producer(producer, n, 60)
    ids = {s["messageId"] for s in sent}
    assert len(ids) == n
    assert sum(admin.max_offset(mq) for mq in admin.message_queues(topic)) == n

    got = consume_with_ferrymq(server, topic, "sdk5-normal-py", n)
    by_id = {m.msg_id: m for m in got}
    assert set(by_id) == ids, "the SDK's message id is the stored UNIQ_KEY, the 4.x msg_id"
    for s in sent:
        m = by_id[s["messageId"]]
        i = s["index"]
        assert m.body == f"msg-{i}".encode()
        assert m.tags == ("TagA" if i % 2 == 0 else "TagB")
        assert sorted(m.key_list) == sorted([f"key-{i}", f"k{i}"])
        assert m.properties.get("color") == f"c-{i}"
        assert m.queue_offset == s["offset"], "the send receipt's offset is the queue offset"

    ons.wait_received(lambda evs: {e["body"] for e in evs} >= {f"msg-{i}" for i in range(n)},
                      60, f"ali-ons receives all {n}")
    first = {e["body"]: e for e in ons.received()}
    assert first["msg-3"]["tags"] == "TagB" and first["msg-3"]["properties"].get("color") == "c-3"


def test_fifo_message_groups_each_go_to_one_queue_in_send_order(clients: Clients, admin: AdminClient,
                                                                 server: Standalone) -> None:
    topic, groups, per_group = "sdk5-fifo", ["order-a", "order-b", "order-c", "order-d", "order-e"], 12
    admin.create_topic(topic, 4, order=True)
    n = len(groups) * per_group
    producer = clients.sdk5("produce", topic=topic, count=n, messageGroup=groups, body="{i}")
    sent = run_producer(producer, n, 60)
    got = consume_with_ferrymq(server, topic, "sdk5-fifo-py", n)
    assert len({m.msg_id for m in got}) == n
    for g_index, group in enumerate(groups):
        mine = sorted((m for m in got if m.properties.get("__SHARDINGKEY") == group), key=lambda m: m.queue_offset)
        assert len({m.queue_id for m in mine}) == 1, f"group {group} spans queues"
        bodies = [int(m.body) for m in mine]
        assert bodies == [i for i in range(n) if i % len(groups) == g_index], "send order kept per group"
    # A message group sent again later lands on the same queue.
    again = clients.sdk5("produce", topic=topic, count=1, startIndex=n, messageGroup="order-a", body="{i}")
    run_producer(again, 1, 30)
    assert sent


def test_delivery_timestamp_delivers_at_that_time_and_recall_cancels(clients: Clients, admin: AdminClient,
                                                                      server: Standalone) -> None:
    topic = "sdk5-delay"
    admin.create_topic(topic, 1, message_type="DELAY")  # a NORMAL topic's route refuses them (SDK side)
    got = consume_in_background(server, topic, "sdk5-delay-py")
    # The second is recalled (RecallMessage, 5.3) with the handle its send answered; the third,
    # due no earlier, shows when the second's time has come and gone.
    producer = clients.sdk5("produce", topic=topic, count=3, deliverAfterMs=3_000, recall=[False, True, False])
    sent = run_producer(producer, 3, 60)
    assert [e["messageId"] for e in producer.of("recalled")] == [sent[1]["messageId"]]
    asked = sent[0]["ts"] + 3_000
    msgs = got.wait(2, 30)
    # The SDK sends whole seconds: the time asked is within the second before.
    assert msgs[0].store_timestamp >= asked - 1_000 - 200, "not delivered before its time"
    assert [m.msg_id for m in msgs] == [sent[0]["messageId"], sent[2]["messageId"]]
    assert admin.max_offset(admin.message_queues(topic)[0]) == 2  # the recalled one was never stored


def test_unknown_topic_fails_the_send(clients: Clients) -> None:
    producer = clients.sdk5("produce", topic="sdk5-no-such-topic", count=1)
    done = producer.wait_event("done", 60)
    assert done["failed"] == 1


def test_messages_of_4x_clients_keep_their_ids_for_grpc(clients: Clients, admin: AdminClient,
                                                         server: Standalone) -> None:
    """Only the send side exists over gRPC until pop lands; this checks ali-ons's and the SDK's
    messages share one queue space (offsets continue across the two protocols)."""
    topic = "sdk5-mixed"
    admin.create_topic(topic, 1)
    run_producer(clients.ons_producer(topic=topic, count=3), 3, 60)
    sent = run_producer(clients.sdk5("produce", topic=topic, count=3, startIndex=3), 3, 60)
    assert [s["offset"] for s in sent] == [3, 4, 5]
    got = consume_with_ferrymq(server, topic, "sdk5-mixed-py", 6)
    assert by_body([{"body": m.body.decode()} for m in got]).keys() == {f"msg-{i}" for i in range(6)}
