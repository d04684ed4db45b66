"""SQL92 subscriptions on a real `ferrymq standalone`, with raw requests: accepted when the
selector is valid, refused with SUBSCRIPTION_PARSE_FAILED and the parser's words when not;
pulls carry only the messages whose properties match, and move past the others."""

from __future__ import annotations

import zlib
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from wire_util import Wire

from conftest import Standalone, start_standalone
from ferrymq.common import jsonx
from ferrymq.common.codes import RequestCode, ResponseCode
from ferrymq.common.record import decode_records

# The tests here each use their own topics and groups: one server serves the module.
pytestmark = pytest.mark.shared_standalone


@pytest.fixture
async def wire(standalone: Standalone) -> AsyncIterator[Wire]:
    w = Wire(standalone.namesrv, standalone.broker)
    yield w
    await w.close()


def _heartbeat(group: str, topic: str, expression: str, expression_type: str) -> bytes:
    return jsonx.dumps_bytes({
        "clientID": "sql-client",
        "consumerDataSet": [{
            "groupName": group, "consumeType": "CONSUME_PASSIVELY", "messageModel": "CLUSTERING",
            "consumeFromWhere": "CONSUME_FROM_FIRST_OFFSET", "unitMode": False,
            "subscriptionDataSet": [{"topic": topic, "subString": expression, "expressionType": expression_type,
                                     "subVersion": 1, "tagsSet": [], "codeSet": [],
                                     "classFilterMode": False}],
        }],
        "producerDataSet": [],
    })


def _check(topic: str, expression: str, expression_type: str = "SQL92") -> bytes:
    return jsonx.dumps_bytes({"clientId": "sql-client", "group": "sql-group", "subscriptionData": {
        "topic": topic, "subString": expression, "expressionType": expression_type, "subVersion": 1}})


async def _send_orders(wire: Wire, topic: str, n: int) -> None:
    for i in range(n):
        props = {"amount": str(i), "region": "EU" if i % 3 == 0 else "US"}
        if i % 5 == 0:
            del props["region"]
        resp = await wire.send(topic, f"order-{i}".encode(), tags="TagA" if i % 2 else "TagB", props=props)
        assert resp.code == ResponseCode.SUCCESS, resp.remark


async def _pull_filtered(wire: Wire, topic: str, expression: str, *, max_nums: int = 32,
                         group: str = "sql-group") -> tuple[list[str], int, int]:
    """Bodies delivered from offset 0 to the end, the number of pulls and the final offset."""
    bodies: list[str] = []
    offset = pulls = 0
    while True:
        resp = await wire.pull(topic, 0, offset, group=group, expression=expression, expression_type="SQL92",
                               max_nums=max_nums)
        pulls += 1
        assert pulls < 1000, "the offset does not advance"
        if resp.code == ResponseCode.PULL_NOT_FOUND:
            return bodies, pulls, offset
        assert resp.code in (ResponseCode.SUCCESS, ResponseCode.PULL_RETRY_IMMEDIATELY), resp.remark
        nxt = int(resp.ext_fields["nextBeginOffset"])
        assert nxt > offset
        if resp.code == ResponseCode.SUCCESS:
            bodies += [m.body.decode() for m in decode_records(resp.body or b"")]
        else:
            assert not resp.body
        offset = nxt


@pytest.mark.parametrize(("expression", "wanted"), [
    ("amount >= 10 AND amount < 20", lambda i, r, t: 10 <= i < 20),
    ("region = 'EU'", lambda i, r, t: r == "EU"),
    ("region IS NULL", lambda i, r, t: r is None),
    ("region IN ('EU', 'US') AND NOT (amount BETWEEN 5 AND 50)", lambda i, r, t: r is not None and not 5 <= i <= 50),
    ("TAGS = 'TagA' OR amount = 0", lambda i, r, t: t == "TagA" or i == 0),
    ("region <> 'EU'", lambda i, r, t: r == "US"),  # a missing region is NULL, not 'not EU'
])
async def test_a_pull_carries_exactly_the_matching_messages(wire: Wire, expression: str, wanted: object) -> None:
    topic, n = f"sql-orders-{zlib.crc32(expression.encode())}", 60  # a topic per expression
    await wire.create_topic(topic, queues=1)
    await _send_orders(wire, topic, n)
    bodies, _, end = await _pull_filtered(wire, topic, expression)

    def region(i: int) -> str | None:
        return None if i % 5 == 0 else "EU" if i % 3 == 0 else "US"

    expected = [f"order-{i}" for i in range(n) if wanted(i, region(i), "TagA" if i % 2 else "TagB")]  # type: ignore[operator]
    assert bodies == expected
    assert end == n


async def test_a_pull_over_only_unmatched_messages_moves_past_them_without_a_body(wire: Wire) -> None:
    topic = "sql-none"
    await wire.create_topic(topic, queues=1)
    await _send_orders(wire, topic, 40)
    resp = await wire.pull(topic, 0, 0, expression="amount > 1000", expression_type="SQL92")
    assert resp.code == ResponseCode.PULL_RETRY_IMMEDIATELY
    assert int(resp.ext_fields["nextBeginOffset"]) == 40 and not resp.body
    bodies, pulls, end = await _pull_filtered(wire, topic, "amount > 1000")
    assert (bodies, end) == ([], 40) and pulls == 2  # one pull passes all 40, the next finds the end


async def test_a_non_numeric_property_compared_as_a_number_is_not_delivered(wire: Wire) -> None:
    topic = "sql-mixed"
    await wire.create_topic(topic, queues=1)
    for i, amount in enumerate(["7", "seven", "3", "", "12"]):
        assert (await wire.send(topic, f"m{i}".encode(), props={"amount": amount})).code == ResponseCode.SUCCESS
    bodies, _, _ = await _pull_filtered(wire, topic, "amount > 5")
    assert bodies == ["m0", "m4"]


async def test_max_nums_bounds_a_filtered_pull(wire: Wire) -> None:
    topic = "sql-batch"
    await wire.create_topic(topic, queues=1)
    await _send_orders(wire, topic, 30)
    resp = await wire.pull(topic, 0, 0, expression="amount >= 10", expression_type="SQL92", max_nums=4)
    assert resp.code == ResponseCode.SUCCESS
    assert [m.body for m in decode_records(resp.body or b"")] == [b"order-10", b"order-11", b"order-12", b"order-13"]
    assert int(resp.ext_fields["nextBeginOffset"]) == 14


async def test_a_registered_sql92_subscription_filters_pulls_without_the_subscription_flag(wire: Wire) -> None:
    topic, group = "sql-registered", "sql-registered-g"
    await wire.create_topic(topic, queues=1)
    resp = await wire.call(RequestCode.HEART_BEAT, _heartbeat(group, topic, "amount < 3", "SQL92"))
    assert resp.code == ResponseCode.SUCCESS, resp.remark
    await _send_orders(wire, topic, 10)
    resp = await wire.call(RequestCode.PULL_MESSAGE, consumerGroup=group, topic=topic, queueId=0, queueOffset=0,
                           maxMsgNums=32, sysFlag=0, commitOffset=0, suspendTimeoutMillis=0)
    assert resp.code == ResponseCode.SUCCESS, resp.remark
    assert [m.body for m in decode_records(resp.body or b"")] == [b"order-0", b"order-1", b"order-2"]
    conns = await wire.call(RequestCode.GET_CONSUMER_CONNECTION_LIST, consumerGroup=group)
    table = jsonx.loads(conns.body or b"{}")["subscriptionTable"][topic]
    assert (table["expressionType"], table["subString"]) == ("SQL92", "amount < 3")


INVALID = "amount > 'five'"


async def test_invalid_selectors_are_refused_at_heartbeat_check_and_pull(wire: Wire) -> None:
    await wire.create_topic("sql-topic", queues=1)
    for resp in [
        await wire.call(RequestCode.HEART_BEAT, _heartbeat("sql-group", "sql-topic", INVALID, "SQL92")),
        await wire.call(RequestCode.CHECK_CLIENT_CONFIG, _check("sql-topic", INVALID)),
        await wire.pull("sql-topic", 0, 0, expression=INVALID, expression_type="SQL92"),
    ]:
        assert resp.code == ResponseCode.SUBSCRIPTION_PARSE_FAILED
        assert resp.remark is not None
        assert "'five' cannot be compared with '>'" in resp.remark and "at offset 7" in resp.remark
    resp = await wire.call(RequestCode.CHECK_CLIENT_CONFIG, _check("sql-topic", "amount > 5"))
    assert resp.code == ResponseCode.SUCCESS, resp.remark
    resp = await wire.call(RequestCode.CHECK_CLIENT_CONFIG, _check("sql-topic", "amount > 5", "XPATH"))
    assert resp.code == ResponseCode.SUBSCRIPTION_PARSE_FAILED
    assert resp.remark is not None and "unknown expression type" in resp.remark
    resp = await wire.call(RequestCode.HEART_BEAT, _heartbeat("tag-group", "sql-topic", "TagA || TagB", "TAG"))
    assert resp.code == ResponseCode.SUCCESS, resp.remark


@pytest.fixture
def no_property_filter(tmp_path: Path) -> Iterator[Standalone]:
    config = tmp_path / "broker.toml"
    config.write_text("enablePropertyFilter = false\n")
    server = start_standalone(tmp_path / "store", "--config", str(config))
    try:
        yield server
    finally:
        server.stop()


REFUSED = "The broker does not support consumer to filter message by SQL92"


async def test_with_enable_property_filter_off_sql92_is_refused_as_rocketmq_does(
        no_property_filter: Standalone) -> None:
    wire = Wire(no_property_filter.namesrv, no_property_filter.broker)
    try:
        await wire.create_topic("sql-topic", queues=1)
        for resp in [
            await wire.call(RequestCode.HEART_BEAT, _heartbeat("sql-group", "sql-topic", "amount > 5", "SQL92")),
            await wire.call(RequestCode.CHECK_CLIENT_CONFIG, _check("sql-topic", "amount > 5")),
            await wire.pull("sql-topic", 0, 0, expression="amount > 5", expression_type="SQL92"),
        ]:
            assert resp.code == ResponseCode.SYSTEM_ERROR
            assert resp.remark is not None and resp.remark.startswith(REFUSED)
        resp = await wire.call(RequestCode.HEART_BEAT, _heartbeat("tag-group", "sql-topic", "TagA", "TAG"))
        assert resp.code == ResponseCode.SUCCESS, resp.remark
    finally:
        await wire.close()
