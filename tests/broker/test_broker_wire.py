"""The broker and name server of a real `ferrymq standalone`, driven with raw remoting requests."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator

import pytest
from wire_util import Wire

from conftest import Standalone, start_standalone
from ferrymq.common import jsonx
from ferrymq.common.codes import RequestCode, ResponseCode
from ferrymq.common.ids import decode_offset_msg_id
from ferrymq.common.record import decode_records
from waits import eventually

# The tests here each use their own topics and groups: one server serves the module.
pytestmark = pytest.mark.shared_standalone


@pytest.fixture
async def wire(standalone: Standalone) -> AsyncIterator[Wire]:
    w = Wire(standalone.namesrv, standalone.broker)
    yield w
    await w.close()


async def test_created_topic_is_routed_by_the_name_server(wire: Wire) -> None:
    await wire.create_topic("routed", 3)
    route = await wire.route("routed")  # registered before the creation was answered
    assert route is not None
    queue_datas = route["queueDatas"]
    broker_datas = route["brokerDatas"]
    assert isinstance(queue_datas, list) and isinstance(broker_datas, list)
    assert queue_datas[0]["readQueueNums"] == 3 and queue_datas[0]["perm"] & 6 == 6
    assert broker_datas[0]["brokerAddrs"] == {"0": wire.broker}
    resp = await wire.call(RequestCode.GET_ROUTEINFO_BY_TOPIC, addr=wire.namesrv, topic="never-made")
    assert resp.code == ResponseCode.TOPIC_NOT_EXIST
    topics = await wire.call(RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER, addr=wire.namesrv)
    assert "routed" in jsonx.loads(topics.body or b"{}")["topicList"]
    cluster = await wire.call(RequestCode.GET_BROKER_CLUSTER_INFO, addr=wire.namesrv)
    assert wire.broker in json.dumps(jsonx.loads(cluster.body or b"{}"))


async def test_send_then_pull_returns_the_stored_record_with_its_offset_msg_id(wire: Wire) -> None:
    await wire.create_topic("t1", 1)
    sent = await wire.send("t1", b"hello", tags="TagA", keys="k1 k2", props={"custom": "v"})
    assert sent.code == ResponseCode.SUCCESS, sent.remark
    assert sent.ext_fields["queueOffset"] == "0" and sent.ext_fields["queueId"] == "0"
    resp = await wire.pull("t1", 0, 0)
    assert resp.code == ResponseCode.SUCCESS
    for name in ("nextBeginOffset", "minOffset", "maxOffset", "suggestWhichBrokerId"):
        assert name in resp.ext_fields
    [msg] = decode_records(resp.body or b"")
    assert msg.body == b"hello" and msg.tags == "TagA" and msg.properties["custom"] == "v"
    assert msg.msg_id == sent.ext_fields["msgId"]
    decoded = decode_offset_msg_id(sent.ext_fields["msgId"])
    assert decoded.offset == msg.commit_log_offset and f"{decoded.host}:{decoded.port}" == wire.broker
    empty = await wire.pull("t1", 0, 1)
    assert empty.code == ResponseCode.PULL_NOT_FOUND and empty.ext_fields["nextBeginOffset"] == "1"


async def test_offsets_past_the_end_are_moved_as_rocketmq_answers(wire: Wire) -> None:
    await wire.create_topic("t2", 1)
    for i in range(3):
        assert (await wire.send("t2", b"m%d" % i)).code == ResponseCode.SUCCESS
    at_end = await wire.pull("t2", 0, 3)
    assert at_end.code == ResponseCode.PULL_NOT_FOUND  # overflow by one: nothing new yet
    beyond = await wire.pull("t2", 0, 50)
    assert beyond.code == ResponseCode.PULL_OFFSET_MOVED
    assert beyond.ext_fields["maxOffset"] == "3"


async def test_long_poll_is_woken_by_an_arriving_message(wire: Wire) -> None:
    await wire.create_topic("lp", 1)
    suspend_ms = 10_000
    started = time.monotonic()
    held = asyncio.ensure_future(wire.pull("lp", 0, 0, suspend_ms=suspend_ms))
    await asyncio.sleep(0.3)  # give the pull time to be parked; correctness doesn't depend on it
    assert not held.done()
    await wire.send("lp", b"wake")
    resp = await held
    assert resp.code == ResponseCode.SUCCESS
    assert [m.body for m in decode_records(resp.body or b"")] == [b"wake"]
    # Answered by the arrival, not by the 10 s suspend timeout running out.
    assert time.monotonic() - started < suspend_ms / 1000


async def test_tag_subscription_filters_by_tag_hash(wire: Wire) -> None:
    await wire.create_topic("tags", 1)
    for i in range(10):
        await wire.send("tags", b"%d" % i, tags="A" if i % 2 == 0 else "B")
    got = await wire.pull_all("tags", 0, expression="A")
    assert [m.body for m in got] == [b"0", b"2", b"4", b"6", b"8"]
    either = await wire.pull_all("tags", 0, expression="A || B")
    assert len(either) == 10


async def test_consumer_offsets_commit_query_and_negative_commits(wire: Wire) -> None:
    await wire.create_topic("off", 2)
    q = await wire.call(RequestCode.QUERY_CONSUMER_OFFSET, consumerGroup="g-off", topic="off", queueId=0)
    assert q.code == ResponseCode.QUERY_NOT_FOUND
    ok = await wire.call(RequestCode.UPDATE_CONSUMER_OFFSET, consumerGroup="g-off", topic="off",
                         queueId=0, commitOffset=7)
    assert ok.code == ResponseCode.SUCCESS
    # -1 (ali-ons' "nothing here") never overwrites a real offset.
    await wire.call(RequestCode.UPDATE_CONSUMER_OFFSET, consumerGroup="g-off", topic="off", queueId=0,
                    commitOffset=-1)
    q = await wire.call(RequestCode.QUERY_CONSUMER_OFFSET, consumerGroup="g-off", topic="off", queueId=0)
    assert q.code == ResponseCode.SUCCESS and q.ext_fields["offset"] == "7"
    # With nothing stored, -1 records where the group started pulling on that queue.
    await wire.send("off", b"x", queue_id=1)
    await wire.pull("off", 1, 1, group="g-off")
    await wire.call(RequestCode.UPDATE_CONSUMER_OFFSET, consumerGroup="g-off", topic="off", queueId=1,
                    commitOffset=-1)
    q = await wire.call(RequestCode.QUERY_CONSUMER_OFFSET, consumerGroup="g-off", topic="off", queueId=1)
    assert q.code == ResponseCode.SUCCESS and q.ext_fields["offset"] == "1"
    # The pull piggy-back commits too.
    await wire.pull("off", 1, 0, group="g-piggy", commit_offset=1)
    q = await wire.call(RequestCode.QUERY_CONSUMER_OFFSET, consumerGroup="g-piggy", topic="off", queueId=1)
    assert q.ext_fields.get("offset") == "1"


async def test_offset_lookups_by_time_and_bounds(wire: Wire) -> None:
    await wire.create_topic("times", 1)
    await wire.send("times", b"a")
    mid = int(time.time() * 1000) + 1
    while int(time.time() * 1000) <= mid:
        await asyncio.sleep(0.002)
    await wire.send("times", b"b")
    await wire.send("times", b"c")
    mx = await wire.call(RequestCode.GET_MAX_OFFSET, topic="times", queueId=0)
    mn = await wire.call(RequestCode.GET_MIN_OFFSET, topic="times", queueId=0)
    assert (mx.ext_fields["offset"], mn.ext_fields["offset"]) == ("3", "0")
    found = await wire.call(RequestCode.SEARCH_OFFSET_BY_TIMESTAMP, topic="times", queueId=0, timestamp=mid)
    assert found.ext_fields["offset"] == "1"
    earliest = await wire.call(RequestCode.GET_EARLIEST_MSG_STORETIME, topic="times", queueId=0)
    assert 0 < int(earliest.ext_fields["timestamp"]) < mid


async def test_lookup_by_offset_id_and_by_key(wire: Wire) -> None:
    await wire.create_topic("look", 2)
    sent = await wire.send("look", b"find me", keys="order-42", queue_id=1)
    offset = decode_offset_msg_id(sent.ext_fields["msgId"]).offset
    viewed = await wire.call(RequestCode.VIEW_MESSAGE_BY_ID, offset=offset)
    assert viewed.code == ResponseCode.SUCCESS and decode_records(viewed.body or b"")[0].body == b"find me"
    by_key = await wire.call(RequestCode.QUERY_MESSAGE, topic="look", key="order-42", maxNum=32,
                             beginTimestamp=0, endTimestamp=2**62)
    assert by_key.code == ResponseCode.SUCCESS
    assert [m.body for m in decode_records(by_key.body or b"")] == [b"find me"]
    missing = await wire.call(RequestCode.QUERY_MESSAGE, topic="look", key="nope", maxNum=32,
                              beginTimestamp=0, endTimestamp=2**62)
    assert missing.code == ResponseCode.QUERY_NOT_FOUND


async def _send_back(wire: Wire, group: str, offset: int, delay: int, max_times: int = 3) -> None:
    resp = await wire.call(RequestCode.CONSUMER_SEND_MSG_BACK, offset=offset, group=group, delayLevel=delay,
                           originMsgId="", originTopic="", unitMode=False, maxReconsumeTimes=max_times)
    assert resp.code == ResponseCode.SUCCESS, resp.remark


async def test_send_back_goes_to_retry_after_its_delay_then_to_the_dlq(wire: Wire) -> None:
    await wire.create_topic("sb", 1)
    sent = await wire.send("sb", b"fragile")
    first = decode_records((await wire.pull("sb", 0, 0)).body or b"")[0]
    origin = sent.ext_fields["msgId"]
    offset = first.commit_log_offset
    for attempt in range(1, 4):  # max 3 reconsumes: three hops through %RETRY%g-sb
        await _send_back(wire, "g-sb", offset, 0)
        start = attempt - 1
        retried = await eventually(lambda: wire.pull_all("%RETRY%g-sb", 0, start), what="retry")  # noqa: B023
        msg = retried[0]
        assert msg.topic == "%RETRY%g-sb" and msg.reconsume_times == attempt
        assert msg.properties["RETRY_TOPIC"] == "sb" and msg.properties["ORIGIN_MESSAGE_ID"] == origin
        assert "DELAY" not in msg.properties or msg.properties.get("DELAY") == str(2 + attempt)
        offset = msg.commit_log_offset
    await _send_back(wire, "g-sb", offset, 0)
    dead = await eventually(lambda: wire.pull_all("%DLQ%g-sb", 0), what="DLQ")
    assert [m.body for m in dead] == [b"fragile"] and dead[0].properties["ORIGIN_MESSAGE_ID"] == origin
    assert "DELAY" not in dead[0].properties  # no delay level on the last hop
    # Negative delay level: straight to the DLQ.
    await wire.send("sb", b"poison")
    poison = decode_records((await wire.pull("sb", 0, 1)).body or b"")[0]
    await _send_back(wire, "g-sb", poison.commit_log_offset, -1)
    dead = await eventually(lambda: _has(wire, "%DLQ%g-sb", 2), what="second DLQ message")
    assert dead[1].body == b"poison"


async def _has(wire: Wire, topic: str, n: int) -> list:  # type: ignore[type-arg]
    got = await wire.pull_all(topic, 0)
    return got if len(got) >= n else []


async def test_heartbeat_membership_notify_and_queue_locks(wire: Wire, standalone: Standalone) -> None:
    await wire.create_topic("grp", 2)
    notified = asyncio.Event()

    async def on_notify(conn, req):  # type: ignore[no-untyped-def]
        notified.set()
        return None

    def beat(client_id: str) -> bytes:
        return jsonx.dumps_bytes({"clientID": client_id, "producerDataSet": [], "consumerDataSet": [{
            "groupName": "g-grp", "consumeType": "CONSUME_PASSIVELY", "messageModel": "CLUSTERING",
            "consumeFromWhere": "CONSUME_FROM_LAST_OFFSET", "unitMode": False,
            "subscriptionDataSet": [{"topic": "grp", "subString": "*", "tagsSet": [], "codeSet": [],
                                     "subVersion": 1, "expressionType": "TAG"}]}]})

    wire.client.register(RequestCode.NOTIFY_CONSUMER_IDS_CHANGED, on_notify)
    assert (await wire.call(RequestCode.HEART_BEAT, beat("c1"))).code == ResponseCode.SUCCESS
    other = Wire(standalone.namesrv, standalone.broker)
    try:
        assert (await other.call(RequestCode.HEART_BEAT, beat("c2"))).code == ResponseCode.SUCCESS
        await asyncio.wait_for(notified.wait(), 5.0)
        ids = await wire.call(RequestCode.GET_CONSUMER_LIST_BY_GROUP, consumerGroup="g-grp")
        assert sorted(jsonx.loads(ids.body or b"{}")["consumerIdList"]) == ["c1", "c2"]
        assert await wire.route("%RETRY%g-grp") is not None  # registered before the heartbeat answer

        def lock_body(client: str) -> bytes:
            return jsonx.dumps_bytes({"consumerGroup": "g-grp", "clientId": client, "mqSet": [
                {"topic": "grp", "brokerName": "broker-a", "queueId": 0}]})

        mine = await wire.call(RequestCode.LOCK_BATCH_MQ, lock_body("c1"))
        theirs = await other.call(RequestCode.LOCK_BATCH_MQ, lock_body("c2"))
        assert len(jsonx.loads(mine.body or b"{}")["lockOKMQSet"]) == 1
        assert jsonx.loads(theirs.body or b"{}")["lockOKMQSet"] == []
        await wire.call(RequestCode.UNLOCK_BATCH_MQ, lock_body("c1"))
        theirs = await other.call(RequestCode.LOCK_BATCH_MQ, lock_body("c2"))
        assert len(jsonx.loads(theirs.body or b"{}")["lockOKMQSet"]) == 1
        conns = await wire.call(RequestCode.GET_CONSUMER_CONNECTION_LIST, consumerGroup="g-grp")
        assert conns.code == ResponseCode.SUCCESS and "c2" in (conns.body or b"").decode()
    finally:
        await other.close()
    # A closed connection leaves the group.
    ids = await eventually(lambda: _ids_if(wire, ["c1"]), what="c2 to leave")
    assert ids == ["c1"]


async def _ids_if(wire: Wire, expected: list[str]) -> list[str] | None:
    ids = await wire.call(RequestCode.GET_CONSUMER_LIST_BY_GROUP, consumerGroup="g-grp")
    got = sorted(jsonx.loads(ids.body or b"{}").get("consumerIdList", []))
    return got if got == expected else None


async def test_admin_requests(wire: Wire) -> None:
    await wire.create_topic("adm", 2)
    for i in range(4):
        await wire.send("adm", b"%d" % i, queue_id=i % 2)
    await wire.call(RequestCode.UPDATE_CONSUMER_OFFSET, consumerGroup="g-adm", topic="adm", queueId=0, commitOffset=1)
    configs = jsonx.loads((await wire.call(RequestCode.GET_ALL_TOPIC_CONFIG)).body or b"{}")
    assert configs["topicConfigTable"]["adm"]["readQueueNums"] == 2
    runtime = await wire.call(RequestCode.GET_BROKER_RUNTIME_INFO)
    assert runtime.code == ResponseCode.SUCCESS and "table" in jsonx.loads(runtime.body or b"{}")
    stats = await wire.call(RequestCode.GET_CONSUME_STATS, consumerGroup="g-adm", topic="adm")
    assert stats.code == ResponseCode.SUCCESS
    assert "offsetTable" in jsonx.loads(stats.body or b"{}")
    reset = await wire.call(RequestCode.INVOKE_BROKER_TO_RESET_OFFSET, topic="adm", group="g-adm",
                            timestamp=0, isForce=True)
    assert reset.code == ResponseCode.SUCCESS, reset.remark
    q = await wire.call(RequestCode.QUERY_CONSUMER_OFFSET, consumerGroup="g-adm", topic="adm", queueId=0)
    assert q.ext_fields["offset"] == "0"


async def test_unknown_request_code_is_not_supported(wire: Wire) -> None:
    resp = await wire.call(4242)
    assert resp.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED and "4242" in (resp.remark or "")


def test_offsets_and_delayed_messages_survive_a_clean_restart(tmp_path) -> None:  # type: ignore[no-untyped-def]
    # Long levels, so the delayed message is still pending when the broker stops.
    levels = "1s 2s 3s 4s 5s 6s 7s 8s 9s 10s 11s 12s 13s 14s 15s 16s 17s 18s"
    server = start_standalone(tmp_path / "s", "--message-delay-level", levels)

    async def before(w: Wire) -> None:
        await w.create_topic("durable", 1)
        await w.send("durable", b"later", props={"DELAY": "6"})
        await w.call(RequestCode.UPDATE_CONSUMER_OFFSET, consumerGroup="g-d", topic="durable", queueId=0,
                     commitOffset=0)
        await w.send("durable", b"now")
        await w.call(RequestCode.UPDATE_CONSUMER_OFFSET, consumerGroup="g-d", topic="durable", queueId=0,
                     commitOffset=1)

    async def after(w: Wire) -> None:
        q = await w.call(RequestCode.QUERY_CONSUMER_OFFSET, consumerGroup="g-d", topic="durable", queueId=0)
        assert q.ext_fields["offset"] == "1"
        got = await eventually(lambda: _has(w, "durable", 2), timeout=20, what="the delayed message")
        assert [m.body for m in got] == [b"now", b"later"]

    try:
        asyncio.run(_with_wire(server, before))
        assert server.stop() == 0
        # RocketMQ's own shape, fastjson's bare integer queue ids included.
        saved = jsonx.loads((tmp_path / "s" / "config" / "consumerOffset.json").read_bytes())
        assert saved["offsetTable"]["durable@g-d"] == {0: 1}
        assert not (tmp_path / "s" / "abort").exists()
        server = start_standalone(tmp_path / "s", "--message-delay-level", levels)
        asyncio.run(_with_wire(server, after))
        assert (tmp_path / "s" / "config" / "delayOffset.json").exists()
    finally:
        server.stop()


async def _with_wire(server: Standalone, fn) -> None:  # type: ignore[no-untyped-def]
    w = Wire(server.namesrv, server.broker)
    try:
        await fn(w)
    finally:
        await w.close()
