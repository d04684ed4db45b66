"""The subscription group table (RocketMQ's SubscriptionGroupManager) against in-process brokers
and a name server over real sockets and files: created by a heartbeat or by
UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, listed and deleted with RocketMQ's JSON, honoured by pull,
pop and send-back, kept across a restart and copied to a slave."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from inproc_cluster import Group
from wire_util import Wire

from ferrymq.broker.groups import SNAPSHOT_NAME, GroupManager
from ferrymq.common import jsonx
from ferrymq.common.codes import RequestCode, ResponseCode
from ferrymq.common.record import decode_records
from waits import eventually

TOPIC = "sg-topic"


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[Group]:
    c = Group(tmp_path)
    await c.namesrv.start()
    yield c
    await c.close()


async def heartbeat(wire: Wire, group: str, model: str = "CLUSTERING") -> None:
    body = jsonx.dumps_bytes({"clientID": f"client-{group}", "producerDataSet": [], "consumerDataSet": [{
        "groupName": group, "consumeType": "CONSUME_PASSIVELY", "messageModel": model,
        "consumeFromWhere": "CONSUME_FROM_FIRST_OFFSET", "unitMode": False,
        "subscriptionDataSet": [{"topic": TOPIC, "subString": "*", "subVersion": 0,
                                 "expressionType": "TAG", "tagsSet": [], "codeSet": []}]}]})
    resp = await wire.call(RequestCode.HEART_BEAT, body)
    assert resp.code == ResponseCode.SUCCESS, resp.remark


async def update(wire: Wire, group: str, **settings: Any) -> Any:
    return await wire.call(RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP,
                           jsonx.dumps_bytes({"groupName": group, **settings}))


async def table(wire: Wire) -> dict[str, Any]:
    resp = await wire.call(RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG)
    assert resp.code == ResponseCode.SUCCESS, resp.remark
    body: dict[str, Any] = jsonx.loads(resp.body or b"{}")
    return body


async def pop(wire: Wire, group: str) -> Any:
    return await wire.call(RequestCode.POP_MESSAGE, consumerGroup=group, topic=TOPIC, queueId=-1,
                           maxMsgNums=1, invisibleTime=60_000, pollTime=0, bornTime=0, initMode=0,
                           expType="TAG", exp="*")


async def send_back(wire: Wire, group: str, offset: int) -> Any:
    """As a client older than RocketMQ 3.4.9: no maxReconsumeTimes, the group's count decides."""
    return await wire.call(RequestCode.CONSUMER_SEND_MSG_BACK, offset=offset, group=group, delayLevel=0,
                           originMsgId="", originTopic="", unitMode=False)


async def test_groups_created_updated_honoured_deleted_and_kept_across_a_restart(
        cluster: Group, tmp_path: Path) -> None:
    broker = await cluster.broker("b")
    wire = cluster.wire(broker)
    await wire.create_topic(TOPIC, 1)
    sent = await wire.send(TOPIC, b"hello")
    assert sent.code == ResponseCode.SUCCESS, sent.remark

    # A heartbeat creates the group from the defaults (the broker's max_reconsume_times).
    await heartbeat(wire, "hb-group")
    listed = (await table(wire))["subscriptionGroupTable"]
    assert listed["hb-group"] == {
        "groupName": "hb-group", "consumeEnable": True, "consumeFromMinEnable": True,
        "consumeBroadcastEnable": True, "consumeMessageOrderly": False, "retryQueueNums": 1,
        "retryMaxTimes": 16, "brokerId": 0, "whichBrokerWhenConsumeSlowly": 1,
        "notifyConsumerIdsChangedEnable": True, "groupSysFlag": 0, "consumeTimeoutMinute": 15}
    assert "TOOLS_CONSUMER" in listed  # built in, as RocketMQ's

    # An explicit group: its retry topic gets retryQueueNums queues; fields RocketMQ's tools
    # send that ferrymq does not act on come back as sent.
    resp = await update(wire, "set-group", retryQueueNums=3, retryMaxTimes=0,
                        groupRetryPolicy={"type": "CUSTOMIZED"})
    assert resp.code == ResponseCode.SUCCESS, resp.remark
    await heartbeat(wire, "set-group")
    retry = broker.topics.get("%RETRY%set-group")
    assert retry is not None and retry.write_queue_nums == 3
    got = (await table(wire))["subscriptionGroupTable"]["set-group"]
    assert got["retryMaxTimes"] == 0 and got["groupRetryPolicy"] == {"type": "CUSTOMIZED"}

    # retryMaxTimes decides a send-back without the client's count: 0 is straight to the DLQ,
    # the default group's 16 is a retry.
    first = decode_records((await wire.pull(TOPIC, 0, 0, group="hb-group")).body or b"")[0]
    assert (await send_back(wire, "set-group", first.commit_log_offset)).code == ResponseCode.SUCCESS
    assert (await send_back(wire, "hb-group", first.commit_log_offset)).code == ResponseCode.SUCCESS
    assert broker.topics.get("%DLQ%set-group") is not None
    assert broker.topics.get("%DLQ%hb-group") is None and broker.topics.get("%RETRY%hb-group") is not None

    # consumeEnable false: pull and pop refused with RocketMQ's code and remark.
    assert (await update(wire, "hb-group", consumeEnable=False)).code == ResponseCode.SUCCESS
    pulled = await wire.pull(TOPIC, 0, 0, group="hb-group")
    assert (pulled.code, pulled.remark) == (ResponseCode.NO_PERMISSION, "subscription group no permission, hb-group")
    popped = await pop(wire, "hb-group")
    assert (popped.code, popped.remark) == (ResponseCode.NO_PERMISSION, "subscription group no permission, hb-group")
    bad = await update(wire, "hb-group", retryMaxTimes=-1)
    assert bad.code == ResponseCode.INVALID_PARAMETER and "retryMaxTimes" in (bad.remark or "")

    # Deleted: gone from the table (RocketMQ answers SUCCESS for an unknown group too).
    deleted = await wire.call(RequestCode.DELETE_SUBSCRIPTIONGROUP, groupName="set-group")
    assert deleted.code == ResponseCode.SUCCESS
    assert "set-group" not in (await table(wire))["subscriptionGroupTable"]
    unknown = await wire.call(RequestCode.DELETE_SUBSCRIPTIONGROUP, groupName="never-was")
    assert unknown.code == ResponseCode.SUCCESS

    # Every answered change is journaled: a broker killed now (no clean stop) keeps them.
    journal = tmp_path / "b" / "config" / "subscriptionGroup.journal"
    assert journal.exists()
    killed = GroupManager(tmp_path / "b" / "config", settings=lambda: (True, 16), writable=lambda: True)
    killed.load()
    kept = killed.get("hb-group")
    assert kept is not None and not kept.consume_enable and killed.get("set-group") is None

    # A clean stop writes RocketMQ's file whole; a restart serves the same settings.
    cluster.brokers.remove(broker)
    await broker.stop()
    assert not journal.exists()
    snapshot = jsonx.loads((tmp_path / "b" / "config" / SNAPSHOT_NAME).read_bytes())
    assert snapshot["subscriptionGroupTable"]["hb-group"]["consumeEnable"] is False
    again = await cluster.broker("b")
    wire2 = cluster.wire(again)
    pulled = await wire2.pull(TOPIC, 0, 0, group="hb-group")
    assert pulled.code == ResponseCode.NO_PERMISSION
    assert "set-group" not in (await table(wire2))["subscriptionGroupTable"]


async def test_auto_create_off_refuses_unknown_groups_as_rocketmq(cluster: Group) -> None:
    broker = await cluster.broker("b", auto_create_subscription_group=False)
    wire = cluster.wire(broker)
    await wire.create_topic(TOPIC, 1)
    await wire.send(TOPIC, b"x")
    # The heartbeat registers the consumer but creates neither the group nor its retry topic.
    await heartbeat(wire, "nobody")
    assert broker.groups.get("nobody") is None and broker.topics.get("%RETRY%nobody") is None
    for resp in (await wire.pull(TOPIC, 0, 0, group="nobody"), await pop(wire, "nobody")):
        assert resp.code == ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST
        assert "subscription group [nobody] does not exist" in (resp.remark or "")
    # System groups exist whatever auto-creation says; a created group is served.
    assert (await wire.pull(TOPIC, 0, 0, group="CID_RMQ_SYS_X")).code == ResponseCode.SUCCESS
    assert (await update(wire, "nobody")).code == ResponseCode.SUCCESS
    assert (await wire.pull(TOPIC, 0, 0, group="nobody")).code == ResponseCode.SUCCESS


async def test_broadcast_and_consume_from_min_settings(cluster: Group) -> None:
    broker = await cluster.broker("b")
    wire = cluster.wire(broker)
    await wire.create_topic(TOPIC, 1)
    await wire.send(TOPIC, b"x")
    await update(wire, "bc", consumeBroadcastEnable=False)
    await heartbeat(wire, "bc", model="BROADCASTING")
    # A pull without the subscription flag is served by the heartbeat's subscription.
    resp = await wire.call(RequestCode.PULL_MESSAGE, consumerGroup="bc", topic=TOPIC, queueId=0,
                           queueOffset=0, maxMsgNums=1, sysFlag=0, commitOffset=-1,
                           suspendTimeoutMillis=0, subVersion=0)
    assert (resp.code, resp.remark) == (ResponseCode.NO_PERMISSION,
                                        "the consumer group[bc] can not consume by broadcast way")
    # A young queue's first offset is offered to a new group unless consumeFromMinEnable is off
    # (then the client's consume-from-where decides).
    await update(wire, "no-min", consumeFromMinEnable=False)
    for group, code in (("with-min", ResponseCode.SUCCESS), ("no-min", ResponseCode.QUERY_NOT_FOUND)):
        resp = await wire.call(RequestCode.QUERY_CONSUMER_OFFSET, consumerGroup=group, topic=TOPIC, queueId=0)
        assert resp.code == code, (group, resp.remark)


async def test_a_slave_copies_its_masters_groups_and_refuses_changes(cluster: Group) -> None:
    master = await cluster.broker("m")
    slave = await cluster.broker("s", broker_role="SLAVE", broker_id=1)
    wm, ws = cluster.wire(master), cluster.wire(slave)
    await wm.create_topic(TOPIC, 1)
    assert (await update(wm, "copied", retryMaxTimes=5, consumeEnable=False)).code == ResponseCode.SUCCESS
    await eventually(lambda: slave.groups.get("copied"), timeout=10, what="the group on the slave")
    cfg = slave.groups.get("copied")
    assert cfg is not None and (cfg.retry_max_times, cfg.consume_enable) == (5, False)
    refused = await update(ws, "local")
    assert refused.code == ResponseCode.NO_PERMISSION and "slave" in (refused.remark or "")
    # The slave refuses the disabled group's pulls as its master does.
    await eventually(lambda: slave.topics.get(TOPIC), timeout=10, what="the topic on the slave")
    assert (await ws.pull(TOPIC, 0, 0, group="copied")).code == ResponseCode.NO_PERMISSION
    # An unknown group pulling from the slave is served from the defaults, not stored there
    # (the next copy would remove it again).
    assert (await ws.pull(TOPIC, 0, 0, group="new-on-slave")).code != ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST
    assert slave.groups.get("new-on-slave") is None
    # A deletion reaches the slave too.
    await wm.call(RequestCode.DELETE_SUBSCRIPTIONGROUP, groupName="copied")
    await eventually(lambda: slave.groups.get("copied") is None, timeout=10, what="the deletion on the slave")
