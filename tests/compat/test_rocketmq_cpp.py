"""PyPI `rocketmq` 0.4.4 (the official RocketMQ C++ client, librocketmq 1.2.x, wrapped with ctypes),
unchanged, against ferrymq: sync producer, clustering push consumer, RECONSUME_LATER through
%RETRY%, queue split between two consumers, restart after a clean shutdown, and interop with
ferrymq's own Python clients.

The client runs in tests/compat/cpp/.venv (`make compat-cpp`) through cpp/producer.py and
cpp/consumer.py, which print JSON event lines like the ali-ons scripts. Its push consumer has no
consume-from-where setting in this version: a new group always starts at the queues' max offset,
so every consumer here is started before the messages it must see are sent."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from compat_util import (
    Clients,
    Split,
    bodies_received,
    by_body,
    committed,
    consume_with_ferrymq,
    cpp_python_or_skip,
    max_offsets,
    run_producer,
    serve,
    wait_members,
)
from compat_util import admin as admin
from compat_util import clients as clients

from conftest import Standalone
from ferrymq import AdminClient, Message, Producer
from ferrymq.common.message import MessageQueue

pytestmark = pytest.mark.compat

BROKER = "broker-a"
PROPS = ["color"]  # user properties the consumer script reports


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Standalone]:
    with serve(tmp_path_factory, "cpp", needs=cpp_python_or_skip) as srv:
        yield srv


def test_sync_producer_sends_1000_with_tags_and_keys_and_a_push_consumer_receives_all(
        clients: Clients, admin: AdminClient) -> None:
    topic, group, n = "cpp-bulk", "cpp-bulk-g", 1000
    admin.create_topic(topic, 4)
    consumer = clients.cpp_consumer(topic=topic, group=group, propertyNames=PROPS)
    consumer.wait_event("ready", 30)
    producer = clients.cpp_producer(topic=topic, count=n, tags=["TagA", "TagB", "TagC"], keys="key-{i} k{i}",
                                    properties={"color": "c-{i}"})
    sent = run_producer(producer, n, 120)
    assert len({s["msgId"] for s in sent}) == n
    assert all(s["sendStatus"] == "OK" for s in sent)
    assert sum(max_offsets(admin, topic).values()) == n
    assert all(v > 0 for v in max_offsets(admin, topic).values()), "the producer spreads over all queues"

    want = {s["body"] for s in sent}
    consumer.wait_received(bodies_received(want), 60, f"all {n} messages")
    got = by_body(consumer.received())
    dupes = {b: len(v) for b, v in got.items() if len(v) > 1}
    assert not dupes, f"delivered more than once: {list(dupes.items())[:5]}"
    per_queue: dict[int, list[int]] = {}
    for s in sent:
        r = got[s["body"]][0]
        assert r["msgId"] == s["msgId"], "the consumer's msgId (UNIQ_KEY) must equal the producer's"
        assert r["topic"] == topic and r["tags"] == s["tags"] and r["keys"] == s["keys"]
        assert r["properties"].get("color") == f"c-{s['index']}"
        assert r["reconsumeTimes"] == 0 and r["retryTopic"] is None
        assert int(r["queueOffset"]) == int(s["queueOffset"])
        per_queue.setdefault(r["queueId"], []).append(int(r["queueOffset"]))
    for qid, offsets in per_queue.items():
        assert sorted(offsets) == list(range(len(offsets))), f"queue {qid} offsets are not 0..n-1"

    # A clean shutdown commits every queue's offset up to the end.
    assert consumer.stop() == 0 and consumer.of("closed"), consumer.diag()
    assert committed(admin, group, topic) == max_offsets(admin, topic)


def test_heartbeat_registers_a_clustering_group_and_creates_its_retry_topic(clients: Clients,
                                                                             admin: AdminClient) -> None:
    topic, group = "cpp-hb", "cpp-hb-g"
    admin.create_topic(topic, 2)
    consumer = clients.cpp_consumer(topic=topic, group=group)
    consumer.wait_event("ready", 30)
    conn = admin.consumer_connections(group)
    assert (conn.message_model, conn.consume_type, conn.consume_from_where) == (
        "CLUSTERING", "CONSUME_PASSIVELY", "CONSUME_FROM_LAST_OFFSET")
    assert set(conn.subscriptions) == {topic, f"%RETRY%{group}"}
    # Created and registered with the name server before the heartbeat is answered.
    assert f"%RETRY%{group}" in admin.topic_list()
    assert admin.consumer_ids(group) and consumer.stop() == 0


def test_consumer_connection_list_names_the_client_language(clients: Clients, admin: AdminClient) -> None:
    topic, group = "cpp-lang", "cpp-lang-g"
    admin.create_topic(topic, 1)
    consumer = clients.cpp_consumer(topic=topic, group=group)
    consumer.wait_event("ready", 30)
    conn = admin.consumer_connections(group)
    assert [c.language for c in conn.connections] == ["CPP"]
    assert consumer.stop() == 0


def test_reconsume_later_sends_back_and_the_message_returns_through_the_retry_topic(
        clients: Clients, admin: AdminClient, server: Standalone) -> None:
    topic, group = "cpp-retry", "cpp-retry-g"
    admin.create_topic(topic, 2)
    # librocketmq looks up the %RETRY% route once before its first heartbeat, and re-balances every
    # 10 s: on a group's very first start its retry queue is only consumed after ~10 s. A group
    # that has run before (here: a start and clean stop) has the route from the start.
    warm = clients.cpp_consumer(topic=topic, group=group)
    warm.wait_event("ready", 30)
    assert warm.stop() == 0
    consumer = clients.cpp_consumer(topic=topic, group=group, failPattern="^retry-", failTimes=2)
    consumer.wait_event("ready", 30)

    def deliveries_of(body: str, n: int) -> Any:
        return lambda evs: len([e for e in evs if e["body"] == body]) >= n

    # One message at a time: librocketmq 1.2 hands a whole pull result to the C listener, which
    # stops at the first RECONSUME_LATER and sends the *whole batch* back, including messages the
    # callback never saw. Sending the next message only once the previous one is settled keeps
    # every pull result to one message, so each delivery is visible.
    sent: dict[str, Any] = {}
    with Producer("cpp-retry-p", server.namesrv) as producer:
        for i in range(12):
            body = f"retry-{i}" if i % 3 == 2 else f"ok-{i}"
            sent[body] = producer.send(Message(topic, body.encode(), tags="TagR", keys=f"rk-{i}"))
            n = 3 if body.startswith("retry-") else 1
            consumer.wait_received(deliveries_of(body, n), 30, f"{n} deliveries of {body}")
    seen = by_body(consumer.received())
    for b, r in sent.items():
        deliveries = seen[b]
        first = deliveries[0]
        assert (first["msgId"], first["reconsumeTimes"], first["retryTopic"]) == (r.msg_id, 0, None)
        assert (first["queueId"], int(first["queueOffset"])) == (r.queue_id, r.queue_offset)
        if b.startswith("ok-"):
            assert [e["action"] for e in deliveries] == ["success"], f"{b} redelivered: {deliveries}"
            continue
        assert [e["reconsumeTimes"] for e in deliveries] == [0, 1, 2], deliveries
        assert [e["action"] for e in deliveries] == ["retry", "retry", "success"]
        for again in deliveries[1:]:
            # Through %RETRY%<group> (queue 0 of 1), topic restored for the listener, original
            # topic in RETRY_TOPIC, ORIGIN_MESSAGE_ID set, UNIQ_KEY (the msgId) kept.
            assert again["topic"] == topic and again["retryTopic"] == topic
            assert again["originMsgId"] and again["msgId"] == r.msg_id
            assert again["queueId"] == 0 and again["tags"] == "TagR" and again["keys"] == first["keys"]
        assert deliveries[1]["originMsgId"] == deliveries[2]["originMsgId"]
        # Delay levels 3 and 4 (TEST_DELAY_LEVELS: 300 ms, 400 ms).
        assert deliveries[1]["ts"] - deliveries[0]["ts"] >= 280
        assert deliveries[2]["ts"] - deliveries[1]["ts"] >= 380
    assert admin.max_offset(MessageQueue(f"%RETRY%{group}", BROKER, 0)) == 8
    assert consumer.stop() == 0


def test_two_consumers_in_one_group_split_the_queues(clients: Clients, admin: AdminClient,
                                                      server: Standalone) -> None:
    topic, group = "cpp-split", "cpp-split-g"
    admin.create_topic(topic, 4)
    a = clients.cpp_consumer(topic=topic, group=group, instanceName="a")
    a.wait_event("ready", 30)
    b = clients.cpp_consumer(topic=topic, group=group, instanceName="b")
    b.wait_event("ready", 30)
    wait_members(admin, group, 2)
    split = Split(a=a, b=b)

    queues = [MessageQueue(topic, BROKER, q) for q in range(4)]
    with Producer("cpp-split-p", server.namesrv) as producer:
        # librocketmq re-balances at once on NOTIFY_CONSUMER_IDS_CHANGED, which the broker sends
        # when B joins; its own timer would only do so 10 s after A started. So the split must
        # show well within that: rounds of one message per queue until one lands split cleanly.
        deadline = time.monotonic() + 6
        rnd = 0
        while True:
            bodies = [f"r{rnd}-q{mq.queue_id}" for mq in queues]
            for body, mq in zip(bodies, queues, strict=True):
                producer.send_to_queue(Message(topic, body.encode(), tags="S"), mq)
            owners = split.owners(bodies)
            if all(len(w) == 1 for w in owners.values()) and set().union(*owners.values()) == {"a", "b"}:
                break
            assert time.monotonic() < deadline, f"no clean split after {rnd + 1} rounds: {owners}"
            rnd += 1
            time.sleep(0.1)
        stable = {q: next(iter(w)) for q, w in owners.items()}
        final = [f"final-{i}-q{mq.queue_id}" for i in range(10) for mq in queues]
        for i, body in enumerate(final):
            producer.send_to_queue(Message(topic, body.encode(), tags="S"), queues[i % 4])
        final_owners = split.owners(final)
    got = {q: next(iter(w)) for q, w in final_owners.items() if len(w) == 1}
    assert got == stable, f"queue owners changed: {final_owners} vs {stable}"
    a_queues = {q for q, w in stable.items() if w == "a"}
    b_queues = {q for q, w in stable.items() if w == "b"}
    assert a_queues and b_queues and not a_queues & b_queues and a_queues | b_queues == {0, 1, 2, 3}
    assert a.stop() == 0 and b.stop() == 0


def _restart_scenario(clients: Clients, admin: AdminClient, topic: str, queues: int, first_batch: int) -> None:
    group = f"{topic}-g"
    admin.create_topic(topic, queues)
    first = clients.cpp_consumer(topic=topic, group=group)
    first.wait_event("ready", 30)
    batch1 = run_producer(clients.cpp_producer(topic=topic, count=first_batch, body="before-{i}"), first_batch)
    first.wait_received(bodies_received({s["body"] for s in batch1}), 30, "the first batch")
    assert first.stop() == 0 and first.of("closed"), first.diag()

    # While no consumer runs: two more per queue.
    batch2 = run_producer(clients.cpp_producer(topic=topic, count=2 * queues, body="during-{i}"), 2 * queues)
    again = clients.cpp_consumer(topic=topic, group=group)
    again.wait_event("ready", 30)
    batch3 = run_producer(clients.cpp_producer(topic=topic, count=queues, body="after-{i}", startIndex=100), queues)
    want = {s["body"] for s in batch2 + batch3}
    # Per-queue order: once a queue's after-* message is in, nothing older can still come on it.
    after = {s["body"] for s in batch3}
    again.wait_received(bodies_received(after), 30, "the messages sent after the restart")
    got = [e["body"] for e in again.received()]
    old = [b for b in got if b.startswith("before-")]
    assert not old, f"re-received after a clean restart: {old}"
    missing = sorted(want - set(got))
    assert not missing, f"sent while the group was down and never delivered: {missing}"
    assert sorted(got) == sorted(want), "each message exactly once"
    assert again.stop() == 0


def test_restart_after_clean_shutdown_rereceives_nothing(clients: Clients, admin: AdminClient) -> None:
    """Every queue had messages before the shutdown, so every queue has a committed offset."""
    _restart_scenario(clients, admin, "cpp-restart", queues=4, first_batch=8)


def test_restart_misses_nothing_sent_to_queues_that_were_empty_before(clients: Clients,
                                                                      admin: AdminClient) -> None:
    """Four of eight queues stay empty during the first run."""
    _restart_scenario(clients, admin, "cpp-restart-empty", queues=8, first_batch=4)


def test_cpp_producer_to_ferrymq_push_consumer(clients: Clients, admin: AdminClient, server: Standalone) -> None:
    topic = "cpp-to-py"
    admin.create_topic(topic, 4)
    sent = run_producer(clients.cpp_producer(topic=topic, count=50, tags=["TagA", "TagB"], keys="key-{i} alt-{i}",
                                             properties={"color": "c-{i}"}), 50)
    # librocketmq zlib-compresses bodies over 4 KiB.
    sent += run_producer(clients.cpp_producer(topic=topic, count=3, startIndex=50, bodyPadTo=10_000, tags="Big"), 3)
    got = {int(m.body.split(b"-", 1)[1].rstrip(b"x")): m
           for m in consume_with_ferrymq(server, topic, "cpp-to-py-g", 53)}
    for s in sent:
        m = got[s["index"]]
        body = f"msg-{s['index']}"
        if s["index"] >= 50:
            body += "x" * (10_000 - len(body))
        assert m.body == body.encode()
        assert m.tags == s["tags"] and (m.keys or "") == s["keys"]
        assert m.msg_id == s["msgId"], "UNIQ_KEY set by librocketmq is the message id"
        assert m.queue_offset == int(s["queueOffset"])
        if s["index"] < 50:
            assert m.properties.get("color") == f"c-{s['index']}"


def test_ferrymq_producer_to_cpp_push_consumer(clients: Clients, admin: AdminClient, server: Standalone) -> None:
    topic = "py-to-cpp"
    admin.create_topic(topic, 4)
    consumer = clients.cpp_consumer(topic=topic, group="py-to-cpp-g", subExpression="TagA || TagB",
                                    propertyNames=PROPS)
    consumer.wait_event("ready", 30)
    results = {}
    with Producer("py-to-cpp-p", server.namesrv) as producer:
        for i in range(60):
            tag = ["TagA", "TagB", "TagC"][i % 3]
            body = f"py-{i}" if i % 20 else f"py-{i}-" + "y" * 9000  # some compressed by ferrymq
            msg = Message(topic, body.encode(), tags=tag, keys=[f"pk-{i}", f"alt-{i}"],
                          properties={"color": f"c-{i}"})
            results[body] = (tag, producer.send(msg))
    want = {b for b, (tag, _) in results.items() if tag != "TagC"}
    consumer.wait_received(bodies_received(want), 30, "every TagA/TagB message")
    got = by_body(consumer.received())
    assert not [b for b in got if results[b][0] == "TagC"], "TagC is not subscribed"
    for b in want:
        tag, r = results[b]
        e = got[b][0]
        i = int(b.split("-")[1])
        assert e["tags"] == tag and e["keys"] == f"pk-{i} alt-{i}"
        assert e["msgId"] == r.msg_id, "the consumer's msgId is the producer's UNIQ_KEY"
        assert (e["queueId"], int(e["queueOffset"])) == (r.queue_id, r.queue_offset)
        assert e["properties"].get("color") == f"c-{i}"
    assert sum(len(v) for v in got.values()) == len(want), "each message once"
    assert consumer.stop() == 0
