"""A clustering group's first pull of a queue commits where it starts. That start is on disk
before the pull is answered, unless losing it cannot skip anything: a FIRST_OFFSET group
starting at the queue's first offset would compute the same start again after a crash. The
offset journal's disk is made slow here (its append waits for the test), so the two cases
differ in whether the pull is answered while the journal write hangs."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from wire_util import Wire

from ferrymq.broker.config import BrokerConfig
from ferrymq.broker.controller import Broker
from ferrymq.common import jsonx
from ferrymq.common.codes import RequestCode, ResponseCode
from ferrymq.namesrv.server import NameServer, NamesrvConfig

TOPIC = "first-pull"


def _heartbeat(group: str, where: str) -> bytes:
    return jsonx.dumps_bytes({
        "clientID": f"client-{group}",
        "consumerDataSet": [{
            "groupName": group, "consumeType": "CONSUME_PASSIVELY", "messageModel": "CLUSTERING",
            "consumeFromWhere": where, "unitMode": False,
            "subscriptionDataSet": [{"topic": TOPIC, "subString": "*", "tagsSet": [], "codeSet": [],
                                     "subVersion": 1, "expressionType": "TAG"}]}],
        "producerDataSet": [],
    })


@pytest.fixture
async def started(tmp_path: Path) -> AsyncIterator[tuple[Broker, Wire, threading.Event]]:
    namesrv = NameServer(NamesrvConfig(port=0))
    await namesrv.start()
    broker = Broker(BrokerConfig(store_dir=tmp_path / "store", listen_port=0,
                                 namesrv_addr=namesrv.address, grpc_listen_port=-1))
    await broker.start()
    wire = Wire(namesrv.address, broker.addr)
    disk = threading.Event()
    disk.set()
    journal = broker.offsets._journal
    append = journal.append

    def slow_append(*args: Any) -> Any:
        disk.wait(30)
        return append(*args)

    journal.append = slow_append  # type: ignore[method-assign]
    try:
        yield broker, wire, disk
    finally:
        disk.set()
        await wire.close()
        await broker.stop()
        await namesrv.stop()


async def _first_pull(wire: Wire, group: str, where: str) -> asyncio.Task[Any]:
    resp = await wire.call(RequestCode.HEART_BEAT, _heartbeat(group, where))
    assert resp.code == ResponseCode.SUCCESS, resp.remark
    return asyncio.ensure_future(wire.pull(TOPIC, 0, 0, group=group, timeout=20))


async def test_a_first_offset_groups_first_pull_does_not_wait_for_the_journal(
        started: tuple[Broker, Wire, threading.Event]) -> None:
    broker, wire, disk = started
    await wire.create_topic(TOPIC, 1)
    for i in range(3):
        assert (await wire.send(TOPIC, b"m%d" % i)).code == ResponseCode.SUCCESS
    disk.clear()
    first = await _first_pull(wire, "g-first", "CONSUME_FROM_FIRST_OFFSET")
    resp = await asyncio.wait_for(first, 10)
    assert resp.code == ResponseCode.SUCCESS
    assert broker.offsets.query("g-first", TOPIC, 0) == 0

    last = await _first_pull(wire, "g-last", "CONSUME_FROM_LAST_OFFSET")
    done, _ = await asyncio.wait({last}, timeout=0.5)
    assert not done, "a LAST_OFFSET group's start was served before it was on disk"
    disk.set()
    resp = await asyncio.wait_for(last, 10)
    assert resp.code == ResponseCode.SUCCESS
