"""Where a group new to a queue starts when the broker answers (QUERY_CONSUMER_OFFSET with
nothing stored): at 0 on a young queue, one whose first record is still "in memory" (within
access_message_in_memory_max_ratio percent of RAM of the commit log's end), as RocketMQ's
broker answers; otherwise QUERY_NOT_FOUND, and the group's consume-from-where decides."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from wire_util import Wire

from ferrymq.broker.config import BrokerConfig
from ferrymq.broker.controller import Broker
from ferrymq.broker.init_offset import young_queue_start
from ferrymq.common.codes import RequestCode, ResponseCode
from ferrymq.namesrv.server import NameServer, NamesrvConfig
from ferrymq.remoting import RemotingCommand

TOPIC = "young"


@pytest.fixture
async def started(tmp_path: Path) -> AsyncIterator[tuple[Broker, Wire]]:
    namesrv = NameServer(NamesrvConfig(port=0))
    await namesrv.start()
    broker = Broker(BrokerConfig(store_dir=tmp_path / "store", listen_port=0,
                                 namesrv_addr=namesrv.address, grpc_listen_port=-1))
    await broker.start()
    wire = Wire(namesrv.address, broker.addr)
    try:
        await wire.create_topic(TOPIC, 2)
        yield broker, wire
    finally:
        await wire.close()
        await broker.stop()
        await namesrv.stop()


async def _query(wire: Wire, group: str, queue_id: int = 0, **extra: str) -> RemotingCommand:
    return await wire.call(RequestCode.QUERY_CONSUMER_OFFSET, consumerGroup=group, topic=TOPIC,
                           queueId=queue_id, **extra)


async def _send(wire: Wire, n: int) -> None:
    for i in range(n):
        assert (await wire.send(TOPIC, b"m%d" % i)).code == ResponseCode.SUCCESS


async def test_a_new_group_starts_a_young_queue_at_its_first_message(started: tuple[Broker, Wire]) -> None:
    broker, wire = started
    assert (await _query(wire, "g-new")).code == ResponseCode.QUERY_NOT_FOUND  # empty: no record yet
    await _send(wire, 3)
    young = await _query(wire, "g-new")
    assert young.code == ResponseCode.SUCCESS and young.ext_fields["offset"] == "0"
    assert broker.offsets.query("g-new", TOPIC, 0) == -1  # an answer, not a commit
    # A tool asking what is stored (RocketMQ 5's setZeroIfNotFound=false) is told: nothing.
    look = await _query(wire, "g-new", setZeroIfNotFound="false")
    assert look.code == ResponseCode.QUERY_NOT_FOUND
    assert (await _query(wire, "g-new", queue_id=1)).code == ResponseCode.QUERY_NOT_FOUND
    # What a group stored always wins.
    ok = await wire.call(RequestCode.UPDATE_CONSUMER_OFFSET, consumerGroup="g-old", topic=TOPIC,
                         queueId=0, commitOffset=2)
    assert ok.code == ResponseCode.SUCCESS
    stored = await _query(wire, "g-old")
    assert stored.code == ResponseCode.SUCCESS and stored.ext_fields["offset"] == "2"


async def test_a_queue_whose_first_record_left_memory_is_not_young(started: tuple[Broker, Wire]) -> None:
    broker, wire = started
    await _send(wire, 3)
    assert (await _query(wire, "g-new")).code == ResponseCode.SUCCESS
    # 0 % of memory: every record lies beyond the window, as an old queue's first one does.
    resp = await wire.call(RequestCode.UPDATE_BROKER_CONFIG, b"accessMessageInMemoryMaxRatio=0\n")
    assert resp.code == ResponseCode.SUCCESS, resp.remark
    assert (await _query(wire, "g-new")).code == ResponseCode.QUERY_NOT_FOUND
    store = broker.store
    assert store is not None
    assert young_queue_start(store, TOPIC, 0, 0) is None
    assert young_queue_start(store, TOPIC, 0, 1) == 0
    assert young_queue_start(store, TOPIC, 1, 100) is None
    assert young_queue_start(store, "no-such-topic", 0, 100) is None
