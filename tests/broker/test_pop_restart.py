"""Pop invisibility across a broker restart: an in-process broker and name server over real
sockets and files, stopped and started again on the same store, with the broker's clock
injected so invisible times pass without waiting. A message received and not acknowledged
before the restart comes back only once its invisible time has passed (its checkpoint in the
revive log), an acknowledged one never, and a changed invisible time holds too."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from wire_util import Wire

from ferrymq.broker.config import BrokerConfig
from ferrymq.broker.controller import Broker
from ferrymq.broker.pop.revive import REVIVE_GROUP, revive_topic
from ferrymq.common.codes import RequestCode, ResponseCode
from ferrymq.common.record import decode_records
from ferrymq.namesrv.server import NameServer, NamesrvConfig
from ferrymq.store import StoreMessage

TOPIC = "pop-restart"
GROUP = "g-pop-restart"
T0 = 1_800_000_000_000


class Clock:
    def __init__(self) -> None:
        self.ms = T0

    def __call__(self) -> int:
        return self.ms


class Node:
    """A name server and a broker on `store`, restartable, with the test clock."""

    def __init__(self, store: Path, clock: Clock) -> None:
        self.store = store
        self.clock = clock
        self.namesrv = NameServer(NamesrvConfig(port=0))
        self.broker: Broker | None = None
        self.wire: Wire | None = None

    async def start(self) -> Wire:
        cfg = BrokerConfig(store_dir=self.store, listen_port=0, namesrv_addr=self.namesrv.address)
        self.broker = Broker(cfg, clock=self.clock)
        await self.broker.start()
        self.wire = Wire(self.namesrv.address, self.broker.addr)
        return self.wire

    async def stop_broker(self) -> None:
        if self.wire is not None:
            await self.wire.close()
            self.wire = None
        if self.broker is not None:
            await self.broker.stop()
            self.broker = None

    async def restart(self) -> Wire:
        await self.stop_broker()
        return await self.start()


@pytest.fixture
async def node(tmp_path: Path) -> AsyncIterator[Node]:
    n = Node(tmp_path / "store", Clock())
    await n.namesrv.start()
    wire = await n.start()
    await wire.create_topic(TOPIC, queues=1)
    for i in range(6):
        resp = await wire.send(TOPIC, f"m{i}".encode())
        assert resp.code == ResponseCode.SUCCESS, resp.remark
    try:
        yield n
    finally:
        await n.stop_broker()
        await n.namesrv.stop()


async def _pop(wire: Wire, invisible_ms: int, n: int = 32) -> tuple[int, list[int]]:
    """(popTime, offsets received)."""
    resp = await wire.call(RequestCode.POP_MESSAGE, consumerGroup=GROUP, topic=TOPIC, queueId=0,
                           maxMsgNums=n, invisibleTime=invisible_ms, pollTime=0, bornTime=0,
                           initMode=0)
    if resp.code == ResponseCode.POLLING_TIMEOUT:
        return int(resp.ext_fields["popTime"]), []
    assert resp.code == ResponseCode.SUCCESS, resp.remark
    return int(resp.ext_fields["popTime"]), [m.queue_offset for m in decode_records(resp.body or b"")]


def _extra(pop_time: int, invisible_ms: int) -> str:
    return f"0 {pop_time} {invisible_ms} 0 0 broker-a 0 0"


async def _ack(wire: Wire, pop_time: int, offset: int) -> None:
    resp = await wire.call(RequestCode.ACK_MESSAGE, consumerGroup=GROUP, topic=TOPIC, queueId=0,
                           extraInfo=_extra(pop_time, 0), offset=offset)
    assert resp.code == ResponseCode.SUCCESS, resp.remark


async def _change(wire: Wire, pop_time: int, offset: int, invisible_ms: int) -> int:
    resp = await wire.call(RequestCode.CHANGE_MESSAGE_INVISIBLETIME, consumerGroup=GROUP,
                           topic=TOPIC, queueId=0, extraInfo=_extra(pop_time, 0), offset=offset,
                           invisibleTime=invisible_ms)
    assert resp.code == ResponseCode.SUCCESS, resp.remark
    return int(resp.ext_fields["popTime"])


async def test_unacked_come_back_after_their_invisible_time_not_at_the_restart(node: Node) -> None:
    assert node.wire is not None
    pop_time, got = await _pop(node.wire, 60_000)
    assert got == [0, 1, 2, 3, 4, 5]
    for offset in (0, 2, 3):
        await _ack(node.wire, pop_time, offset)
    assert node.broker is not None
    assert node.broker.stats.put.total == 6  # the sends; a checkpoint is not traffic
    wire = await node.restart()
    assert (await _pop(wire, 60_000))[1] == []  # still invisible
    node.clock.ms = T0 + 59_000
    assert (await _pop(wire, 60_000))[1] == []
    node.clock.ms = T0 + 60_001
    assert (await _pop(wire, 60_000))[1] == [1, 4, 5]  # the acknowledged ones never
    # Delivered again after the restart: their new leases survive the next restart too.
    wire = await node.restart()
    node.clock.ms = T0 + 100_000
    assert (await _pop(wire, 60_000))[1] == []
    node.clock.ms = T0 + 200_000
    assert (await _pop(wire, 60_000))[1] == [1, 4, 5]


async def test_a_changed_invisible_time_survives_a_restart(node: Node) -> None:
    assert node.wire is not None
    pop_time, got = await _pop(node.wire, 10_000, n=2)
    assert got == [0, 1]
    longer = await _change(node.wire, pop_time, 0, 300_000)
    await _change(node.wire, pop_time, 1, 1)  # made visible (almost) at once
    wire = await node.restart()
    node.clock.ms = T0 + 20_000  # past the 10 s of the pop, short of the 300 s
    assert (await _pop(wire, 60_000, n=2))[1] == [1, 2]
    # The handle the change returned before the restart still names the lease.
    await _ack(wire, longer, 0)
    node.clock.ms = T0 + 400_000
    assert (await _pop(wire, 60_000))[1] == [1, 2, 3, 4, 5]


def _revive_offset(node: Node) -> int:
    assert node.broker is not None
    return node.broker.offsets.query(REVIVE_GROUP, revive_topic("DefaultCluster"), 0)


async def test_the_replay_starts_at_the_oldest_live_checkpoint(node: Node) -> None:
    """The revive offset committed passes over checkpoints whose leases were acknowledged or
    expired; what a restart replays from there still holds the live ones."""
    assert node.wire is not None
    pop_time, got = await _pop(node.wire, 10_000)  # checkpoint 0
    for offset in got:
        await _ack(node.wire, pop_time, offset)
    assert _revive_offset(node) == 0
    resp = await node.wire.send(TOPIC, b"late")
    assert resp.code == ResponseCode.SUCCESS, resp.remark
    node.clock.ms = T0 + 5_000
    assert (await _pop(node.wire, 10_000))[1] == [6]  # checkpoint 1; 0's leases acknowledged
    assert _revive_offset(node) == 1
    node.clock.ms = T0 + 16_000
    assert (await _pop(node.wire, 1_000))[1] == [6]  # expired, again: checkpoint 2
    node.clock.ms = T0 + 18_000
    resp = await node.wire.send(TOPIC, b"later")
    assert resp.code == ResponseCode.SUCCESS, resp.remark
    pop_time, got = await _pop(node.wire, 100_000)  # 6 expired again and 7: checkpoint 3
    assert got == [6, 7]
    await _ack(node.wire, pop_time, 6)
    assert _revive_offset(node) == 3
    wire = await node.restart()
    node.clock.ms = T0 + 100_000
    assert (await _pop(wire, 10_000))[1] == []
    node.clock.ms = T0 + 118_001
    assert (await _pop(wire, 10_000))[1] == [7]


async def test_a_record_that_is_no_checkpoint_is_passed_over(node: Node) -> None:
    assert node.wire is not None and node.broker is not None
    await _pop(node.wire, 60_000, n=1)
    junk = StoreMessage(topic=revive_topic("DefaultCluster"), queue_id=0, body=b"{not json")
    assert (await node.broker.put([junk], allow_delay=False)).status.stored
    await _pop(node.wire, 60_000, n=1)
    wire = await node.restart()
    assert (await _pop(wire, 60_000))[1] == [2, 3, 4, 5]  # 0 and 1 still invisible
