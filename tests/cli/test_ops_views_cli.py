"""The operator's views through the `ferrymq` command against one real standalone server:
producer connections, a group's members' running info (group status), copying a group's
offsets (group clone-offset), a broker's consume stats and the per-topic traffic (stats all).
Waits poll the admin client in this process; each command is run once its answer is due."""

from __future__ import annotations

from typing import Any

import pytest
from cli_util import ferrymq, json_out

from ferrymq import ConsumeStatus, Message, Producer, PushConsumer
from ferrymq.client.admin import AdminClient
from waits import wait_until

pytestmark = pytest.mark.shared_standalone

TOPIC, PRODUCERS, GROUP, COPY = "ovw", "ovw-pg", "ovw-cg", "ovw-copy"


def _listener(msgs: list[Any], ctx: Any) -> ConsumeStatus:
    # "bad" fails every time: the member's failure figures must count it.
    if any(m.body == b"bad" for m in msgs):
        return ConsumeStatus.RECONSUME_LATER
    return ConsumeStatus.CONSUME_SUCCESS


def _consumed_and_failed(admin: AdminClient) -> Any:
    (member,) = admin.consumer_status(GROUP) or [None]
    if member is None:
        return None
    fig = next((f for f in member.figures if f.topic == TOPIC), None)
    return fig is not None and fig.consume_failed_msgs >= 1 and fig.consume_ok_tps > 0


def test_producer_connections_group_status_consume_stats_clone_and_stats_all(
    standalone: Any,
) -> None:
    ns = standalone.namesrv
    admin = AdminClient(ns)
    producer = Producer(PRODUCERS, ns, heartbeat_interval=0.5)
    consumer = PushConsumer(GROUP, ns, rebalance_interval=0.3)
    consumer.subscribe(TOPIC, "*")
    consumer.register_listener(_listener)
    try:
        admin.create_topic(TOPIC, 2)
        assert admin.producer_connections(PRODUCERS, TOPIC) == []
        producer.start()
        for i in range(10):
            producer.send(Message(TOPIC, f"m{i}".encode()))
        producer.send(Message(TOPIC, b"bad"))
        wait_until(lambda: admin.producer_connections(PRODUCERS, TOPIC), what="the producer's heartbeat")
        doc = json_out(standalone, "producer", "connections", PRODUCERS, "--topic", TOPIC)
        (conn,) = doc["connections"]
        assert conn["client_id"] and conn["language"] == "PYTHON" and conn["version"] > 0
        assert conn["brokers"] == ["broker-a"] and conn["client_addr"].startswith("127.0.0.1:")
        table = ferrymq(standalone, "producer", "connections", PRODUCERS, "--topic", TOPIC).stdout
        assert conn["client_id"] in table

        with consumer:
            wait_until(lambda: _consumed_and_failed(admin), what="the member's figures")
            (member,) = json_out(standalone, "group", "status", GROUP)["clients"]
            assert member["client_id"] == consumer.client_id and member["error"] is None
            assert member["subscriptions"][TOPIC] == "*"
            assert member["properties"]["messageModel"] == "CLUSTERING"
            assert member["properties"]["PROP_CONSUME_TYPE"] == "CONSUME_PASSIVELY"
            assert {q["queue_id"] for q in member["queues"] if q["topic"] == TOPIC} == {0, 1}
            # When each queue last pulled and consumed (ProcessQueueInfo's timestamps), which
            # tells a stalled member from an idle one; the table shows them too.
            held = [q for q in member["queues"] if q["topic"] == TOPIC]
            assert all(q["last_pull_timestamp"] > 0 and q["last_consume_timestamp"] > 0 for q in held), held
            figures = {f["topic"]: f for f in member["status"]}
            assert figures[TOPIC]["pull_tps"] > 0 and figures[TOPIC]["consume_failed_msgs"] >= 1
            table = ferrymq(standalone, "group", "status", GROUP).stdout
            assert consumer.client_id in table and "failed (1 h)" in table and "last consume" in table
            wait_until(lambda: sum(r.lag for r in admin.consume_stats(GROUP, TOPIC)) == 0,
                       what="the group to catch up")
        # The member is gone, its offsets stay; another group gets them by clone.
        cloned = json_out(standalone, "group", "clone-offset", GROUP, COPY, "--topic", TOPIC,
                          "--offline")
        assert cloned["brokers"] == ["broker-a"]
        assert sum(r["offset"] for r in cloned["offsets"]) == 11
        copy = {r.queue_id: r.consumer_offset for r in admin.consume_stats(COPY, TOPIC)}
        assert sum(copy.values()) == 11 and set(copy) == {0, 1}

        producer.send(Message(TOPIC, b"unread"))  # a lag of 1 for both groups
        stats = json_out(standalone, "broker", "consume-stats", "broker-a")
        assert stats["broker"] == "broker-a" and stats["addr"] == standalone.broker
        lags = {(s["group"], s["topic"]): s["lag"] for s in stats["stats"]}
        assert lags[(GROUP, TOPIC)] == 1 and lags[(COPY, TOPIC)] == 1
        assert stats["total_diff"] >= 2
        table = ferrymq(standalone, "broker", "consume-stats", "broker-a").stdout
        assert f"total lag {stats['total_diff']}" in table and COPY in table

        rows = {(r["topic"], r["group"]): r for r in json_out(standalone, "stats", "all")}
        mine = rows[(TOPIC, GROUP)]
        assert mine["in_msgs_24h"] == 12 and mine["out_msgs_24h"] >= 11 and mine["lag"] == 1
        assert mine["in_tps"] > 0 and mine["out_tps"] > 0
        assert rows[(TOPIC, COPY)]["out_msgs_24h"] == 0
        table = ferrymq(standalone, "stats", "all", "--active").stdout
        assert GROUP in table and COPY in table
    finally:
        producer.shutdown()
        admin.close()


def test_group_status_names_a_member_that_does_not_answer(standalone: Any) -> None:
    """A member that never answers GET_CONSUMER_RUNNING_INFO (ali-ons has no handler for
    server requests): listed with the broker's reason, not a timeout of the whole command."""
    import socket

    from ferrymq.common import jsonx
    from ferrymq.common.codes import RequestCode
    from ferrymq.remoting import RemotingCommand
    from ferrymq.remoting.codec import encode_frame

    beat = {"clientID": "mute-client", "producerDataSet": [], "consumerDataSet": [{
        "groupName": "ovw-mute", "consumeType": "CONSUME_PASSIVELY", "messageModel": "CLUSTERING",
        "consumeFromWhere": "CONSUME_FROM_LAST_OFFSET", "unitMode": False,
        "subscriptionDataSet": [{"topic": TOPIC, "subString": "*", "expressionType": "TAG",
                                 "subVersion": 1, "tagsSet": [], "codeSet": [],
                                 "classFilterMode": False}]}]}
    host, port = standalone.broker.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=10) as mute:
        mute.sendall(encode_frame(RemotingCommand.request(RequestCode.HEART_BEAT,
                                                          body=jsonx.dumps_bytes(beat))))
        assert mute.recv(4)  # the heartbeat's answer begins: the member is registered
        (member,) = json_out(standalone, "group", "status", "ovw-mute")["clients"]
    assert member["client_id"] == "mute-client" and member["queues"] == []
    assert "invoke consumer <mute-client> <ovw-mute> failed" in member["error"]
