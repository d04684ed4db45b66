"""ali-ons 3.12.0 (npm, pure JavaScript RocketMQ 4.x client), unchanged, against ferrymq: producer,
clustering push consumer, ACTION_RETRY through %RETRY%, queue split between two consumers,
restart after a clean shutdown, and interop with ferrymq's own Python clients.

Every wait reads the scripts' JSON event lines with a deadline. One standalone broker serves the
module; each test uses its own topics and groups."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from compat_util import (
    Clients,
    Event,
    Split,
    bodies_received,
    by_body,
    committed,
    consume_with_ferrymq,
    max_offsets,
    node_or_skip,
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


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Standalone]:
    with serve(tmp_path_factory, "ali-ons", needs=node_or_skip) as srv:
        yield srv


def test_producer_sends_1000_with_tags_and_keys_and_a_consumer_receives_all(
        clients: Clients, admin: AdminClient) -> None:
    topic, group, n = "ons-bulk", "ons-bulk-g", 1000
    admin.create_topic(topic, 4)
    consumer = clients.ons_consumer(topic=topic, group=group, consumeFromWhere="first")
    consumer.wait_event("ready", 30)
    producer = clients.ons_producer(topic=topic, count=n, tags=["TagA", "TagB", "TagC"], keys="key-{i} k{i}",
                                    properties={"color": "c-{i}"})
    sent = run_producer(producer, n, 120)

    # Send results: unique offset msg ids, every queue used, consecutive queue offsets per queue.
    assert len({s["msgId"] for s in sent}) == n
    per_queue: dict[int, list[int]] = {}
    for s in sent:
        assert s["sendStatus"] == "SEND_OK" and s["brokerName"] == BROKER
        per_queue.setdefault(s["queueId"], []).append(int(s["queueOffset"]))
    assert sorted(per_queue) == [0, 1, 2, 3]
    for qid, offsets in per_queue.items():
        assert sorted(offsets) == list(range(len(offsets))), f"queue {qid} offsets are not 0..n-1"
    assert max_offsets(admin, topic) == {q: len(o) for q, o in per_queue.items()}

    want = {s["body"] for s in sent}
    consumer.wait_received(bodies_received(want), 60, f"all {n} messages")
    got = by_body(consumer.received())
    dupes = {b: len(v) for b, v in got.items() if len(v) > 1}
    assert not dupes, f"delivered more than once: {list(dupes.items())[:5]}"
    for s in sent:
        r = got[s["body"]][0]
        assert r["msgId"] == s["msgId"], "consumer's msgId must equal the send result's msgId"
        assert (r["topic"], r["queueId"], int(r["queueOffset"])) == (topic, s["queueId"], int(s["queueOffset"]))
        assert r["tags"] == s["tags"] and r["keys"] == s["keys"]
        assert r["properties"].get("color") == f"c-{s['index']}"
        assert r["reconsumeTimes"] == 0 and r["retryTopic"] is None and r["action"] == "success"
        assert r["storeTimestamp"] >= r["bornTimestamp"] > 0

    # A clean close commits every queue's offset up to the end.
    assert consumer.stop() == 0
    assert consumer.of("closed"), consumer.diag()
    assert committed(admin, group, topic) == max_offsets(admin, topic)


def test_action_retry_sends_back_and_the_message_returns_through_the_retry_topic(
        clients: Clients, admin: AdminClient) -> None:
    topic = "ons-retry"
    admin.create_topic(topic, 2)
    # Group R returns ACTION_RETRY once for retry-* messages; group T throws twice for them (the only
    # way to fail a message that already came from %RETRY% with ali-ons, see README).
    retry = clients.ons_consumer(topic=topic, group="ons-retry-r", consumeFromWhere="first",
                                 failPattern="^retry-", failMode="retry", failTimes=1)
    throw = clients.ons_consumer(topic=topic, group="ons-retry-t", consumeFromWhere="first",
                                 failPattern="^retry-", failMode="throw", failTimes=2)
    retry.wait_event("ready", 30)
    throw.wait_event("ready", 30)
    sent = run_producer(clients.ons_producer(topic=topic, count=40, body=["ok-{i}", "ok-{i}", "ok-{i}", "retry-{i}"],
                                             tags="TagR", keys="rk-{i}"), 40)
    ok = {s["body"] for s in sent if s["body"].startswith("ok-")}
    failing = {s["body"]: s for s in sent if s["body"].startswith("retry-")}
    assert len(failing) == 10

    def done(times: int) -> Any:
        def check(evs: list[Event]) -> bool:
            seen = by_body(evs)
            return ok <= seen.keys() and all(len(seen.get(b, [])) >= times + 1 for b in failing)
        return check

    retry.wait_received(done(1), 15, "every retry-* message twice (first try + redelivery)")
    throw.wait_received(done(2), 15, "every retry-* message three times")

    for proc, times in ((retry, 1), (throw, 2)):
        seen = by_body(proc.received())
        for b in ok:
            assert [e["action"] for e in seen[b]] == ["success"], f"{proc.name}: {b} redelivered"
        for b, s in failing.items():
            deliveries = seen[b]
            assert [e["reconsumeTimes"] for e in deliveries] == list(range(times + 1)), deliveries
            first = deliveries[0]
            assert first["msgId"] == s["msgId"] and first["retryTopic"] is None
            assert deliveries[-1]["action"] == "success"
            for k, again in enumerate(deliveries[1:], start=1):
                # Through %RETRY%<group>: a new stored message, topic restored for the handler,
                # the original id and topic kept in ORIGIN_MESSAGE_ID and RETRY_TOPIC.
                assert again["topic"] == topic and again["retryTopic"] == topic
                assert again["originMsgId"] == s["msgId"]
                assert again["msgId"] != s["msgId"] and again["queueId"] == 0
                assert again["tags"] == "TagR" and again["keys"] == s["keys"]
                # Delay level 3 + reconsumeTimes (TEST_DELAY_LEVELS: 300 ms, then 400 ms).
                delay_ms = 300 + 100 * (k - 1)
                assert again["ts"] - deliveries[k - 1]["ts"] >= delay_ms - 20, (k, deliveries)

    mq = MessageQueue("%RETRY%ons-retry-r", BROKER, 0)
    assert admin.max_offset(mq) == 10
    assert admin.max_offset(MessageQueue("%RETRY%ons-retry-t", BROKER, 0)) == 20


def test_delay_level_messages_arrive_after_their_delay_on_their_own_queue(clients: Clients,
                                                                       admin: AdminClient) -> None:
    topic = "ons-delay"
    admin.create_topic(topic, 2)
    consumer = clients.ons_consumer(topic=topic, group="ons-delay-g", consumeFromWhere="first")
    consumer.wait_event("ready", 30)
    sent = run_producer(clients.ons_producer(topic=topic, count=6, body="delayed-{i}", delayLevel=[2, 5]), 6)
    consumer.wait_received(bodies_received({s["body"] for s in sent}), 15, "every delayed message")
    got = by_body(consumer.received())
    for s in sent:
        [r] = got[s["body"]]
        delay_ms = 200 if s["index"] % 2 == 0 else 500  # TEST_DELAY_LEVELS levels 2 and 5
        assert r["ts"] - s["ts"] >= delay_ms - 30, (s, r)
        # Parked in SCHEDULE_TOPIC_XXXX, then delivered to the real topic and queue.
        assert (r["topic"], r["queueId"]) == (topic, s["queueId"])
        assert r["reconsumeTimes"] == 0 and r["retryTopic"] is None and r["tags"] == "TagA"
    assert consumer.stop() == 0


def test_two_consumers_in_one_group_split_the_queues(clients: Clients, admin: AdminClient,
                                                      server: Standalone) -> None:
    topic, group = "ons-split", "ons-split-g"
    admin.create_topic(topic, 4)
    # ali-ons ignores NOTIFY_CONSUMER_IDS_CHANGED and re-balances on a timer: 1 s instead of 10 s.
    fast = dict(topic=topic, group=group, consumeFromWhere="first", rebalanceIntervalMs=1000)
    a = clients.ons_consumer(**fast)
    a.wait_event("ready", 30)
    b = clients.ons_consumer(**fast)
    b.wait_event("ready", 30)
    wait_members(admin, group, 2)
    split = Split(a=a, b=b)

    queues = [MessageQueue(topic, BROKER, q) for q in range(4)]
    with Producer("ons-split-p", server.namesrv) as producer:
        # Rounds of one message per queue until a round lands split cleanly (each queue on one
        # consumer, both consumers used): B gets its share at A's next 1 s rebalance tick.
        # Two clean rounds in a row with the same owners: a pull the old owner sent before it
        # gave a queue up can still be held at the broker and deliver one round to both.
        deadline = time.monotonic() + 40
        rnd = 0
        previous: dict[int, str] | None = None
        while True:
            bodies = [f"r{rnd}-q{mq.queue_id}" for mq in queues]
            for body, mq in zip(bodies, queues, strict=True):
                producer.send_to_queue(Message(topic, body.encode(), tags="S"), mq)
            owners = split.owners(bodies)
            clean = all(len(w) == 1 for w in owners.values()) and set().union(*owners.values()) == {"a", "b"}
            current = {q: next(iter(w)) for q, w in owners.items()} if clean else None
            if current is not None and current == previous:
                break
            previous = current
            assert time.monotonic() < deadline, f"no stable split after {rnd + 1} rounds: {owners}"
            rnd += 1
            time.sleep(0.25)
        stable = current
        # Then a bigger round must land exactly the same way.
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


def test_restart_after_clean_shutdown_rereceives_nothing_and_misses_nothing(
        clients: Clients, admin: AdminClient) -> None:
    topic, group = "ons-restart", "ons-restart-g"
    admin.create_topic(topic, 8)
    first = clients.ons_consumer(topic=topic, group=group, consumeFromWhere="last")
    first.wait_event("ready", 30)
    # Four messages: four of the eight queues stay empty while this consumer runs (ali-ons
    # commits -1 for those, which must not make the restart skip what arrives later).
    batch1 = run_producer(clients.ons_producer(topic=topic, count=4, body="before-{i}"), 4)
    first.wait_received(bodies_received({s["body"] for s in batch1}), 30, "the first batch")
    assert first.stop() == 0 and first.of("closed"), first.diag()

    # While no consumer runs: sixteen more, on every queue.
    batch2 = run_producer(clients.ons_producer(topic=topic, count=16, body="during-{i}"), 16)
    assert {s["queueId"] for s in batch2} == set(range(8))
    again = clients.ons_consumer(topic=topic, group=group, consumeFromWhere="last")
    again.wait_event("ready", 30)
    # And a few after it is up.
    batch3 = run_producer(clients.ons_producer(topic=topic, count=8, body="after-{i}", startIndex=100), 8)
    want = {s["body"] for s in batch2 + batch3}
    again.wait_received(bodies_received(want), 30, "the messages sent while down and after the restart")
    got = [e["body"] for e in again.received()]
    old = [b for b in got if b.startswith("before-")]
    assert not old, f"re-received after a clean restart: {old}"
    assert sorted(got) == sorted(want), "each message exactly once"
    assert again.stop() == 0


def test_ali_ons_producer_to_ferrymq_push_consumer(clients: Clients, admin: AdminClient,
                                                   server: Standalone) -> None:
    topic = "ons-to-py"
    admin.create_topic(topic, 4)
    sent = run_producer(clients.ons_producer(topic=topic, count=50, tags=["TagA", "TagB"], keys="key-{i} alt-{i}",
                                             properties={"color": "c-{i}"}), 50)
    # Bodies of 4096 bytes and more are zlib-compressed by ali-ons (sysFlag bit 0).
    sent += run_producer(clients.ons_producer(topic=topic, count=3, startIndex=50, bodyPadTo=10_000, tags="Big"), 3)
    got = {int(m.body.split(b"-", 1)[1].rstrip(b"x")): m
           for m in consume_with_ferrymq(server, topic, "ons-to-py-g", 53)}
    for s in sent:
        m = got[s["index"]]
        body = f"msg-{s['index']}"
        if s["index"] >= 50:
            body += "x" * (10_000 - len(body))
        assert m.body == body.encode()
        assert m.tags == s["tags"] and (m.keys or "") == s["keys"]
        assert m.offset_msg_id == s["msgId"]
        assert (m.queue_id, m.queue_offset) == (s["queueId"], int(s["queueOffset"]))
        if s["index"] < 50:
            assert m.properties.get("color") == f"c-{s['index']}"


def test_ferrymq_producer_to_ali_ons_consumer(clients: Clients, admin: AdminClient, server: Standalone) -> None:
    topic = "py-to-ons"
    admin.create_topic(topic, 4)
    consumer = clients.ons_consumer(topic=topic, group="py-to-ons-g", consumeFromWhere="first",
                                    subExpression="TagA || TagB")
    consumer.wait_event("ready", 30)
    results = {}
    with Producer("py-to-ons-p", server.namesrv) as producer:
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
        assert e["msgId"] == r.offset_msg_id
        assert (e["queueId"], int(e["queueOffset"])) == (r.queue_id, r.queue_offset)
        assert e["properties"].get("color") == f"c-{i}"
    assert consumer.stop() == 0


def test_ali_ons_subscribing_with_sql92_receives_only_matching_messages(
        clients: Clients, admin: AdminClient, server: Standalone) -> None:
    """ali-ons takes {expressionType: 'SQL92', subString} in subscribe(); the broker filters."""
    topic, group = "ons-sql92", "ons-sql92-g"
    admin.create_topic(topic, 4)
    selector = "amount >= 20 AND (region = 'EU' OR TAGS = 'vip')"
    consumer = clients.ons_consumer(topic=topic, group=group, consumeFromWhere="first",
                                    subExpression={"expressionType": "SQL92", "subString": selector})
    consumer.wait_event("ready", 30)
    want = set()
    with Producer("ons-sql92-p", server.namesrv) as producer:
        for i in range(80):
            region, tag = ("EU", "std") if i % 3 == 0 else ("US", "vip" if i % 7 == 0 else "std")
            producer.send(Message(topic, f"sql-{i}".encode(), tags=tag,
                                  properties={"amount": str(i), "region": region}))
            if i >= 20 and (region == "EU" or tag == "vip"):
                want.add(f"sql-{i}")
        # Each queue ends with a matching message: a consumer that received it has read its
        # queue to the end (filtered messages last in a queue are only passed by a further
        # pull, which the stop below may come before).
        for q in range(4):
            body = f"sql-last-{q}"
            producer.send_to_queue(Message(topic, body.encode(), tags="vip",
                                           properties={"amount": "99", "region": "EU"}),
                                   MessageQueue(topic, BROKER, q))
            want.add(body)
    consumer.wait_received(bodies_received(want), 30, "every matching message")
    assert consumer.stop() == 0
    # Closed cleanly with every queue committed to its end: nothing else is on its way.
    assert committed(admin, group, topic) == max_offsets(admin, topic)
    assert set(by_body(consumer.received())) == want


def test_timer_messages_from_ferrymq_reach_an_ali_ons_consumer_at_their_time(
        clients: Clients, admin: AdminClient, server: Standalone) -> None:
    """RocketMQ 5's TIMER_DELIVER_MS, set by ferrymq's producer; ali-ons (a 4.x client that knows
    nothing of timers) receives each message from its own topic once its time has come."""
    topic = "timer-to-ons"
    admin.create_topic(topic, 2)
    consumer = clients.ons_consumer(topic=topic, group="timer-to-ons-g", consumeFromWhere="first")
    consumer.wait_event("ready", 30)
    asked: dict[str, tuple[int, str]] = {}
    with Producer("timer-to-ons-p", server.namesrv) as producer:
        base = int(time.time() * 1000) + 2_000
        for i in range(10):
            at = base + 100 * i
            r = producer.send(Message(topic, f"t-{i}".encode(), deliver_time_ms=at,
                                      properties={"n": str(i)}))
            asked[f"t-{i}"] = (at, r.msg_id)
    consumer.wait_received(bodies_received(set(asked)), 30, "every timer message")
    got = by_body(consumer.received())
    for body, (at, _msg_id) in asked.items():
        (e,) = got[body]
        assert int(e["storeTimestamp"]) >= at  # written to the topic at its time, not before
        assert e["properties"].get("TIMER_OUT_MS") == str(at)
        assert e["properties"].get("n") == body.split("-")[1]
        assert "TIMER_DELIVER_MS" not in e["properties"]
    assert consumer.stop() == 0
