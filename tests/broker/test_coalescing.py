"""Work that used to be done once per change, on the event loop, is now coalesced: topics.json
is written in a worker thread, one snapshot for a burst of new topics, and a group's members
hear of membership changes once per short delay instead of once per join. An in-process
broker and name server over real sockets and files."""

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
from ferrymq.broker.topic_journal import TopicRecord
from ferrymq.broker.topics import TopicManager
from ferrymq.common import jsonx
from ferrymq.common.codes import RequestCode, ResponseCode
from ferrymq.namesrv.server import NameServer, NamesrvConfig
from ferrymq.remoting import Connection, RemotingCommand


class Cluster:
    def __init__(self, namesrv: NameServer, broker: Broker) -> None:
        self.namesrv = namesrv
        self.broker = broker
        self._wire: Wire | None = None

    @property
    def wire(self) -> Wire:  # the broker's address is known once it has started
        if self._wire is None:
            self._wire = Wire(self.namesrv.address, self.broker.addr)
        return self._wire


async def _start(tmp_path: Path, **config: Any) -> Cluster:
    namesrv = NameServer(NamesrvConfig(port=0))
    await namesrv.start()
    broker = Broker(BrokerConfig(store_dir=tmp_path / "store", listen_port=0, namesrv_addr=namesrv.address,
                                 **config))
    return Cluster(namesrv, broker)


@pytest.fixture
async def stoppers() -> AsyncIterator[list[Cluster]]:
    clusters: list[Cluster] = []
    yield clusters
    for c in clusters:
        if c._wire is not None:
            await c._wire.close()
        await c.broker.stop()
        await c.namesrv.stop()


def _heartbeat(client_id: str, group: str, topic: str = "members") -> bytes:
    return jsonx.dumps_bytes({
        "clientID": client_id,
        "consumerDataSet": [{
            "groupName": group, "consumeType": "CONSUME_PASSIVELY", "messageModel": "CLUSTERING",
            "consumeFromWhere": "CONSUME_FROM_LAST_OFFSET", "unitMode": False,
            "subscriptionDataSet": [{"topic": topic, "subString": "*", "tagsSet": [], "codeSet": [],
                                     "subVersion": 1, "expressionType": "TAG"}]}],
        "producerDataSet": [],
    })


async def test_topic_config_is_written_off_the_loop_and_coalesced(tmp_path: Path, stoppers: list[Cluster]) -> None:
    c = await _start(tmp_path)
    stoppers.append(c)
    broker = c.broker
    # A disk that stalls: the real journal append runs, but only once the gate opens.
    gate = threading.Event()
    gate.set()
    writes: list[int] = []
    real_append = broker.topics.append_journal

    def stalling_append(records: list[TopicRecord]) -> None:
        writes.append(len(records))
        gate.wait(30)
        real_append(records)

    broker.topics.append_journal = stalling_append  # type: ignore[method-assign]
    await broker.start()
    await c.wire.create_topic("plain", queues=1)
    assert (await c.wire.send("plain", b"before")).code == ResponseCode.SUCCESS
    before = len(writes)

    gate.clear()
    # 200 consumer groups appear: each heartbeat creates the group's %RETRY% topic.
    for i in range(200):
        resp = await c.wire.call(RequestCode.HEART_BEAT, _heartbeat(f"client-{i}", f"group-{i}"))
        assert resp.code == ResponseCode.SUCCESS, resp.remark
    assert len(writes) == before + 1, "one write is stalled, the rest wait for it"
    # The loop is not held by the stalled write: a producer on an existing topic is served.
    for i in range(20):
        assert (await c.wire.send("plain", f"during-{i}".encode())).code == ResponseCode.SUCCESS
    # A topic created by an admin request is answered only once it is on disk.
    created = asyncio.ensure_future(c.wire.create_topic("admin-made", queues=1))
    await asyncio.sleep(0)
    assert not created.done()
    gate.set()
    await asyncio.wait_for(created, 30)
    await broker.persist_topics()
    # The stalled write, then one write of everything that changed meanwhile.
    assert len(writes) <= before + 3
    assert sum(writes[before:]) >= 201
    # On disk: topics.json and the journal of the changes since, as a restart reads them.
    on_disk = TopicManager(tmp_path / "store" / "config")
    on_disk.load()
    assert {f"%RETRY%group-{i}" for i in range(200)} <= set(on_disk.topics)
    assert {"plain", "admin-made"} <= set(on_disk.topics)


async def test_a_growing_group_is_notified_once_per_delay_not_once_per_join(
        tmp_path: Path, stoppers: list[Cluster]) -> None:
    c = await _start(tmp_path, notify_consumer_ids_changed_delay_ms=2000)
    stoppers.append(c)
    await c.broker.start()
    await c.wire.create_topic("members", queues=4)
    members = 100
    counts = [0] * members
    wires = [Wire(c.namesrv.address, c.broker.addr) for _ in range(members)]

    def counter(i: int) -> Any:
        async def on_notify(conn: Connection, req: RemotingCommand) -> None:
            counts[i] += 1
        return on_notify

    try:
        for i, w in enumerate(wires):
            w.client.register(RequestCode.NOTIFY_CONSUMER_IDS_CHANGED, counter(i))
        answers = await asyncio.gather(*(w.call(RequestCode.HEART_BEAT, _heartbeat(f"m-{i}", "big-group"))
                                         for i, w in enumerate(wires)))
        assert all(a.code == ResponseCode.SUCCESS for a in answers)
        # Every member hears of the change...
        async with asyncio.timeout(30):
            while min(counts) == 0:
                await asyncio.sleep(0.02)
        # ...about once (the first join is told at once, the rest together after the delay),
        # where one notice per join per member made ~members²/2 of them.
        assert sum(counts) <= 2 * members + 1, counts
        runtime = await c.wire.call(RequestCode.GET_BROKER_RUNTIME_INFO)
        table = jsonx.loads(runtime.body or b"{}")["table"]
        assert members <= int(table["consumerIdsChangedNotices"]) <= 2 * members + 1
        assert int(table["connectionCount"]) >= members
    finally:
        for w in wires:
            await w.close()


async def test_a_paced_coalescer_waits_in_proportion_to_the_last_run() -> None:
    """With `pace`, the gap after a run is pace times its duration, capped by min_interval:
    a quick run does not hold the next ask back a whole min_interval (which here would outlast
    the test's deadline), a slow one still keeps the next at a distance."""
    from ferrymq.broker.coalesce import Coalescer

    loop = asyncio.get_running_loop()
    spans: list[tuple[float, float]] = []
    duration = [0.0]

    async def work() -> None:
        began = loop.time()
        if duration[0]:
            await asyncio.sleep(duration[0])
        spans.append((began, loop.time()))

    paced = Coalescer(work, "paced", min_interval=600.0, pace=4.0)
    for _ in range(3):
        await asyncio.wait_for(paced.ask(), 30)
    assert len(spans) == 3
    duration[0] = 0.05
    await asyncio.wait_for(paced.ask(), 30)
    await asyncio.wait_for(paced.ask(), 30)
    (_, slow_end), (next_start, _) = spans[-2], spans[-1]
    assert next_start - slow_end >= 4 * 0.05 * 0.9

    fixed = Coalescer(work, "fixed", min_interval=600.0)
    duration[0] = 0.0
    await asyncio.wait_for(fixed.ask(), 30)
    second = fixed.ask()
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(asyncio.shield(second), 0.2)
    second.cancel()

