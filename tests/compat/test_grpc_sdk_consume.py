"""The official RocketMQ 5 Python SDK's consumers (SimpleConsumer, PushConsumer) and transactional
producer against ferrymq's gRPC endpoint, on the broker's pop service and transaction service:
receive / ack / change invisible duration, redelivery after the invisible time, the dead-letter
queue after the max delivery attempts, 4.x producers' messages received over gRPC, transactions
committed, rolled back and recovered by the broker's check."""

from __future__ import annotations

import itertools
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from compat_util import Clients, py5_python_or_skip, run_producer, serve, wait_group_started
from compat_util import admin as admin
from compat_util import clients as clients

from conftest import Standalone
from ferrymq import AdminClient, Message, Producer
from ferrymq.common.message import MessageQueue
from waits import wait_until

pytestmark = pytest.mark.compat

MAX_RECONSUME = 2  # deliveries: the first and two more, then the dead-letter queue


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Standalone]:
    config = tmp_path_factory.mktemp("grpc-consume-config") / "broker.toml"
    config.write_text("transaction_check_interval_ms = 500\ntransaction_timeout_ms = 1000\n")
    with serve(tmp_path_factory, "grpc-consume", "--config", str(config), "--max-reconsume-times",
               str(MAX_RECONSUME), needs=py5_python_or_skip) as srv:
        yield srv


def test_simple_consumer_receives_and_acks_each_message_once(clients: Clients, admin: AdminClient) -> None:
    topic, group, n = "pop-simple", "pop-simple-g", 40
    admin.create_topic(topic, 4)
    consumer = clients.sdk5("simple", topic=topic, group=group, expect=n, invisibleSec=20, awaitSec=2)
    consumer.wait_event("ready", 30)
    wait_group_started(admin, group, topic)
    sent = run_producer(clients.sdk5("produce", topic=topic, count=n, tags="TagA", properties={"k": "v{i}"}), n, 60)
    assert consumer.wait_exit(60) == 0, consumer.diag()
    received = consumer.of("received")
    assert sorted(e["body"] for e in received) == sorted(s["body"] for s in sent), "each once"
    assert {e["messageId"] for e in received} == {s["messageId"] for s in sent}
    assert all(e["deliveryAttempt"] == 1 and e["tag"] == "TagA" for e in received)
    assert all(e["properties"] == {"k": "v" + e["body"].split("-")[1]} for e in received)
    assert len(consumer.of("acked")) == n
    # Every acknowledgement is the group's progress on the broker.
    progress = admin.group_progress(group)
    assert sum(p.lag for p in progress) == 0


def test_an_unacked_message_comes_back_after_its_invisible_time_then_goes_to_the_dlq(
        clients: Clients, admin: AdminClient) -> None:
    topic, group = "pop-redeliver", "pop-redeliver-g"
    admin.create_topic(topic, 2)
    consumer = clients.sdk5("simple", topic=topic, group=group, invisibleSec=2, awaitSec=1, skipPattern="msg-1$",
                            idleExitMs=60_000)
    consumer.wait_event("ready", 30)
    wait_group_started(admin, group, topic)
    sent = run_producer(clients.sdk5("produce", topic=topic, count=3), 3, 60)
    skipped = sent[1]["messageId"]
    dlq = f"%DLQ%{group}"
    wait_until(lambda: dlq in admin.topic_list() and admin.max_offset(MessageQueue(dlq, "broker-a", 0)) == 1, 60,
               what="the skipped message in the DLQ")
    deliveries = [e for e in consumer.of("received") if e["messageId"] == skipped]
    assert [e["deliveryAttempt"] for e in deliveries] == list(range(1, MAX_RECONSUME + 2)), deliveries
    gaps = [b["ts"] - a["ts"] for a, b in itertools.pairwise(deliveries)]
    assert all(gap >= 2_000 - 250 for gap in gaps), f"came back before its invisible time: {gaps}"
    dead = admin.query_by_uniq_key(dlq, skipped)
    assert dead.body == b"msg-1"
    others = {e["body"] for e in consumer.of("acked")}
    assert others == {"msg-0", "msg-2"}
    consumer.stop()


def test_change_invisible_duration_brings_a_message_back_early(clients: Clients, admin: AdminClient) -> None:
    topic, group = "pop-change", "pop-change-g"
    admin.create_topic(topic, 1)
    consumer = clients.sdk5("simple", topic=topic, group=group, invisibleSec=30, awaitSec=1,
                            changeInvisiblePattern="msg-0$", changeInvisibleSec=1, idleExitMs=60_000)
    consumer.wait_event("ready", 30)
    wait_group_started(admin, group, topic)
    run_producer(clients.sdk5("produce", topic=topic, count=1), 1, 60)
    again = consumer.wait_received(lambda evs: [e for e in evs if e["deliveryAttempt"] == 2], 20,
                                   "the second delivery, well before the 30 s invisible time")
    first = consumer.of("received")[0]
    assert consumer.of("changed_invisible"), consumer.diag()
    assert 1_000 - 250 <= again[0]["ts"] - first["ts"] < 10_000
    consumer.stop()


def test_push_consumer_retries_a_failed_message_and_acks_the_rest(clients: Clients, admin: AdminClient) -> None:
    topic, group, n = "pop-push", "pop-push-g", 10
    admin.create_topic(topic, 2)
    consumer = clients.sdk5("push", topic=topic, group=group, failPattern="msg-2$", failTimes=1, expect=n)
    consumer.wait_event("ready", 30)
    wait_group_started(admin, group, topic)
    run_producer(clients.sdk5("produce", topic=topic, count=n), n, 60)
    assert consumer.wait_exit(60) == 0, consumer.diag()
    received = consumer.of("received")
    failed = [e for e in received if e["action"] == "failure"]
    assert [e["body"] for e in failed] == ["msg-2"]
    ok = [e for e in received if e["action"] == "success"]
    assert sorted(e["body"] for e in ok) == sorted(f"msg-{i}" for i in range(n))
    assert next(e for e in ok if e["body"] == "msg-2")["deliveryAttempt"] == 2


def test_4x_producers_messages_are_received_over_grpc(clients: Clients, admin: AdminClient,
                                                       server: Standalone) -> None:
    topic, group = "pop-from-4x", "pop-from-4x-g"
    admin.create_topic(topic, 2)
    consumer = clients.sdk5("simple", topic=topic, group=group, expect=6, invisibleSec=20, awaitSec=2)
    consumer.wait_event("ready", 30)
    wait_group_started(admin, group, topic)
    with Producer("pop-from-4x-p", server.namesrv) as producer:
        ids = {}
        for i in range(3):
            msg = Message(topic, f"py-{i}".encode(), tags="TagP", keys=f"key-{i}")
            msg.properties["color"] = f"c{i}"
            ids[f"py-{i}"] = producer.send(msg).msg_id
    ons = run_producer(clients.ons_producer(topic=topic, count=3, body="ons-{i}"), 3, 60)
    assert consumer.wait_exit(60) == 0, consumer.diag()
    got = {e["body"]: e for e in consumer.of("received")}
    assert set(got) == {"py-0", "py-1", "py-2", "ons-0", "ons-1", "ons-2"}
    for body, msg_id in ids.items():
        e = got[body]
        assert e["messageId"] == msg_id and e["tag"] == "TagP" and e["keys"] == [f"key-{body[-1]}"]
        assert e["properties"] == {"color": f"c{body[-1]}"}
    for s in ons:
        assert got[s["body"]]["messageId"] == s["msgId"], "ali-ons sets no UNIQ_KEY: the offset id"


def test_transactions_commit_rollback_and_the_broker_check(clients: Clients, admin: AdminClient) -> None:
    topic, group = "pop-txn", "pop-txn-g"
    admin.create_topic(topic, 2, message_type="TRANSACTION")
    consumer = clients.sdk5("simple", topic=topic, group=group, invisibleSec=20, awaitSec=1, idleExitMs=60_000)
    consumer.wait_event("ready", 30)
    wait_group_started(admin, group, topic)
    producer = clients.sdk5("produce", topic=topic, count=3, transaction=["commit", "rollback", "unknown"],
                            checkResult="commit", lingerMs=15_000)
    producer.wait_event("done", 60)
    assert not producer.of("send_error"), producer.diag()
    # The unresolved one is asked about by the broker's check; the producer's checker commits it.
    check = producer.wait_event("check", 30)
    assert check["body"] == "msg-2"
    consumer.wait_received(lambda evs: {"msg-0", "msg-2"} <= {e["body"] for e in evs}, 30, "the committed two")
    assert "msg-1" not in {e["body"] for e in consumer.of("received")}, "rolled back"
    assert [e["messageId"] for e in consumer.of("received") if e["body"] == "msg-2"] == \
        [s["messageId"] for s in producer.of("sent") if s["body"] == "msg-2"]
    consumer.stop()
    producer.stop()


def _readme_grpc_example() -> str:
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    section = readme.split("### RocketMQ 5 SDKs (gRPC)", 1)[1]
    found = re.search(r"```python\n(.*?)```", section, re.S)
    assert found, "the README's RocketMQ 5 example"
    return found.group(1)


def test_the_readme_example_receives_what_was_sent_before_the_group_started(
        admin: AdminClient, server: Standalone) -> None:
    """The README's RocketMQ 5 example as written: a producer sends, then a SimpleConsumer of a
    group new to the topic receives it (a young queue starts at 0, as RocketMQ 5's broker does)."""
    admin.create_topic("orders", 4)
    code = _readme_grpc_example()
    assert "127.0.0.1:8081" in code
    code = code.replace("127.0.0.1:8081", server.grpc)
    code += "print('RECEIVED', m.body.decode())\nproducer.shutdown()\nconsumer.shutdown()\n"
    run = subprocess.run([py5_python_or_skip(), "-c", code], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr[-2000:]
    assert 'RECEIVED {"id": 1}' in run.stdout.splitlines()
    progress = admin.group_progress("audit")
    assert sum(p.lag for p in progress) == 0 and progress


def test_a_new_push_consumer_group_receives_what_was_sent_before_it_started(
        clients: Clients, admin: AdminClient) -> None:
    topic, group, n = "pop-push-late", "pop-push-late-g", 6
    admin.create_topic(topic, 2)
    sent = run_producer(clients.sdk5("produce", topic=topic, count=n), n, 60)
    consumer = clients.sdk5("push", topic=topic, group=group, expect=n)
    assert consumer.wait_exit(60) == 0, consumer.diag()
    assert sorted(e["body"] for e in consumer.of("received")) == sorted(s["body"] for s in sent)
