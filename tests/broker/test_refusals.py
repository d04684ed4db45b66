"""Requests the broker refuses with a clear answer instead of doing something harmful or
silently wrong: changing system topics, transactional half messages in a batch or straight to
the transaction system topics. Raw requests against a real `ferrymq standalone`. SQL92
subscriptions: test_sql92_filter.py."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator

import pytest
from wire_util import Wire

from conftest import Standalone
from ferrymq.client.consumer.subscription import Subscription
from ferrymq.common import jsonx
from ferrymq.common.codes import RequestCode, ResponseCode
from ferrymq.common.headers import send_header_to_v2
from ferrymq.common.message import MessageBatchItem
from ferrymq.common.props import properties_to_string
from ferrymq.common.record import encode_batch

# The tests here each use their own topics and groups: one server serves the module.
pytestmark = pytest.mark.shared_standalone


@pytest.fixture
async def wire(standalone: Standalone) -> AsyncIterator[Wire]:
    w = Wire(standalone.namesrv, standalone.broker)
    yield w
    await w.close()


async def _max_offset(wire: Wire, topic: str, queue_id: int = 0) -> int:
    resp = await wire.call(RequestCode.GET_MAX_OFFSET, topic=topic, queueId=queue_id)
    assert resp.code == ResponseCode.SUCCESS, resp.remark
    return int(resp.ext_fields["offset"])


@pytest.mark.parametrize("topic", ["TBW102", "SCHEDULE_TOPIC_XXXX", "RMQ_SYS_TRACE_TOPIC",
                                   "rmq_sys_anything", "DefaultCluster", "broker-a", "OFFSET_MOVED_EVENT"])
async def test_system_topics_cannot_be_created_updated_or_deleted(wire: Wire, topic: str) -> None:
    resp = await wire.call(RequestCode.UPDATE_AND_CREATE_TOPIC, topic=topic, defaultTopic="TBW102",
                           readQueueNums=8, writeQueueNums=8, perm=6, topicFilterType="SINGLE_TAG",
                           topicSysFlag=0, order=False)
    assert resp.code == ResponseCode.SYSTEM_ERROR
    assert resp.remark is not None and "system topic" in resp.remark and topic in resp.remark
    resp = await wire.call(RequestCode.DELETE_TOPIC_IN_BROKER, topic=topic)
    assert resp.code == ResponseCode.SYSTEM_ERROR
    assert resp.remark is not None and "system topic" in resp.remark


async def test_auto_creation_still_works_after_an_attempt_to_rewrite_tbw102(wire: Wire) -> None:
    await wire.call(RequestCode.UPDATE_AND_CREATE_TOPIC, topic="TBW102", readQueueNums=4, writeQueueNums=4,
                    perm=6, topicSysFlag=0, order=False)
    resp = await wire.send("auto-created-after", b"hello")
    assert resp.code == ResponseCode.SUCCESS, resp.remark
    config = jsonx.loads((await wire.call(RequestCode.GET_ALL_TOPIC_CONFIG)).body or b"{}")
    template = config["topicConfigTable"]["TBW102"]
    assert template["perm"] & 1, "TBW102 lost its inherit permission"


def _send_ext(topic: str, props: dict[str, str], sys_flag: int, *, batch: bool = False) -> dict[str, object]:
    return dict(producerGroup="tx-producer", topic=topic, defaultTopic="TBW102", defaultTopicQueueNums=4,
                queueId=0, sysFlag=sys_flag, bornTimestamp=int(time.time() * 1000), flag=0,
                properties=properties_to_string(props), reconsumeTimes=0, unitMode=False, batch=batch)


HALF_FORMS = [
    ({"TRAN_MSG": "true", "PGROUP": "tx-producer"}, 0x4),   # as a Java TransactionMQProducer sends it
    ({"TRAN_MSG": "true"}, 0),                              # the property alone
    ({}, 0x4),                                              # the sysFlag alone
]


@pytest.mark.own_standalone  # it counts the half topic's messages from zero
@pytest.mark.parametrize("code", [RequestCode.SEND_MESSAGE, RequestCode.SEND_MESSAGE_V2])
@pytest.mark.parametrize(("props", "sys_flag"), HALF_FORMS)
async def test_half_messages_are_kept_out_of_their_topic(
        wire: Wire, code: int, props: dict[str, str], sys_flag: int) -> None:
    await wire.create_topic("tx-topic", queues=1)
    ext = _send_ext("tx-topic", props, sys_flag)
    if code == RequestCode.SEND_MESSAGE_V2:
        ext = dict(send_header_to_v2({k: str(v) for k, v in ext.items()}))
    resp = await wire.call(code, b"half", **ext)
    assert resp.code == ResponseCode.SUCCESS, resp.remark
    assert resp.ext_fields["queueId"] == "0" and resp.ext_fields["queueOffset"] == "0"
    assert await _max_offset(wire, "tx-topic") == 0
    assert await _max_offset(wire, "RMQ_SYS_TRANS_HALF_TOPIC") == 1


@pytest.mark.own_standalone  # it counts its topic's messages from zero
@pytest.mark.parametrize(("props", "sys_flag"), HALF_FORMS)
async def test_half_messages_in_a_batch_are_refused_and_not_stored(
        wire: Wire, props: dict[str, str], sys_flag: int) -> None:
    await wire.create_topic("tx-topic", queues=1)
    body = encode_batch([MessageBatchItem(0, b"ok", {}), MessageBatchItem(0, b"half", dict(props))])
    resp = await wire.call(RequestCode.SEND_BATCH_MESSAGE, body, **_send_ext("tx-topic", props, sys_flag, batch=True))
    assert resp.code == ResponseCode.MESSAGE_ILLEGAL
    assert resp.remark is not None and "transactional" in resp.remark
    assert await _max_offset(wire, "tx-topic") == 0
    ok = await wire.send("tx-topic", b"plain")
    assert ok.code == ResponseCode.SUCCESS and await _max_offset(wire, "tx-topic") == 1


@pytest.mark.parametrize("topic", ["RMQ_SYS_TRANS_HALF_TOPIC", "RMQ_SYS_TRANS_OP_HALF_TOPIC",
                                   "TRANS_CHECK_MAX_TIME_TOPIC"])
async def test_nobody_sends_to_the_transaction_system_topics(wire: Wire, topic: str) -> None:
    resp = await wire.send(topic, b"forged", props={"REAL_TOPIC": "victim", "REAL_QID": "0"})
    assert resp.code == ResponseCode.NO_PERMISSION
    assert resp.remark == f"Sending message to topic[{topic}] is forbidden."


@pytest.mark.parametrize("expression", ["amount > 5", "a IS NOT NULL", "region = 'SH'", "(TagA)", "TagA || x<3"])
def test_the_python_client_refuses_an_expression_that_is_not_a_tag_expression(expression: str) -> None:
    with pytest.raises(ValueError, match="not a tag expression"):
        Subscription.parse("t", expression)


def test_the_python_client_still_takes_tag_expressions() -> None:
    assert Subscription.parse("t", "TagA || TagB").tags == frozenset({"TagA", "TagB"})
    assert Subscription.parse("t", "*").matches_all
