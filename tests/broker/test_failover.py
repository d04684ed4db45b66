"""Controller mode with in-process brokers and a name server running the controller: the first
replica becomes master, the other its slave; when the master stops heartbeating the slave is
elected, takes writes and the route; the old master returns as a slave of the new one."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from wire_util import Wire

from ferrymq.broker.config import BrokerConfig
from ferrymq.broker.controller import Broker
from ferrymq.broker.roles import MASTER, SLAVE, UNDECIDED
from ferrymq.common.codes import ResponseCode
from ferrymq.namesrv.server import NameServer, NamesrvConfig
from waits import eventually


class Setup:
    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.namesrv = NameServer(NamesrvConfig(port=0, enable_controller=True,
                                                controller_dir=tmp / "ctl", controller_lease_ms=800,
                                                controller_scan_interval_ms=100))
        self.brokers: dict[int, Broker] = {}
        self.wires: list[Wire] = []

    async def broker(self, bid: int, **config: Any) -> Broker:
        cfg = BrokerConfig(store_dir=self.tmp / f"b{bid}", listen_port=0, namesrv_addr=self.namesrv.address,
                           controller_addr=self.namesrv.address, broker_id=bid,
                           broker_role="SYNC_MASTER", controller_heartbeat_interval_ms=100,
                           controller_lease_ms=800, ha_heartbeat_interval_ms=100,
                           ha_slave_sync_interval_ms=200, sync_flush_timeout_ms=2000,
                           ha_max_time_slave_not_catchup_ms=1000, **config)
        b = Broker(cfg)
        await b.start()
        self.brokers[bid] = b
        return b

    def wire(self, broker: Broker) -> Wire:
        w = Wire(self.namesrv.address, broker.addr)
        self.wires.append(w)
        return w


@pytest.fixture
async def setup(tmp_path: Path) -> AsyncIterator[Setup]:
    s = Setup(tmp_path)
    await s.namesrv.start()
    yield s
    for w in s.wires:
        await w.close()
    for b in s.brokers.values():
        await b.stop()
    await s.namesrv.stop()


async def _true(v: bool) -> bool:
    return v


@pytest.mark.parametrize("min_isr", [1, 2])
async def test_failover_elects_the_in_sync_slave_and_the_old_master_rejoins(setup: Setup, min_isr: int) -> None:
    b1 = await setup.broker(1, min_in_sync_replicas=min_isr)
    await eventually(lambda: _true(b1.replication.role == MASTER), what="b1 to be master")
    b2 = await setup.broker(2, min_in_sync_replicas=min_isr)
    await eventually(lambda: _true(b2.replication.role == SLAVE), what="b2 to be slave")
    await eventually(lambda: _true(b1.replication.agent is not None
                                   and b1.replication.agent.sync_state_set == {1, 2}),
                     what="b2 in the controller's in-sync set")
    w1 = setup.wire(b1)
    await w1.create_topic("F", 1)
    for i in range(30):
        resp = await w1.send("F", f"f{i}".encode())
        assert resp.code == ResponseCode.SUCCESS, resp.remark
    route = await w1.route("F")
    assert route is not None
    assert route["brokerDatas"][0]["brokerAddrs"] == {"0": b1.addr, "2": b2.addr}  # type: ignore[index]

    # The master goes away without a word (its heartbeats stop with it).
    await b1.stop()
    del setup.brokers[1]
    await eventually(lambda: _true(b2.replication.role == MASTER), timeout=10, what="b2 elected")
    assert b2.replication.epoch == 2
    w2 = setup.wire(b2)

    async def routed() -> bool:
        r = await w2.route("F")
        return r is not None and r["brokerDatas"][0]["brokerAddrs"] == {"0": b2.addr}  # type: ignore[index]

    await eventually(routed, what="the route to name b2 as master")
    alone = await w2.send("F", b"while alone")
    if min_isr == 1:  # the new master is the whole in-sync set: writes go on
        assert alone.code == ResponseCode.SUCCESS, alone.remark
    else:  # stored, but fewer replicas than asked for have it
        assert alone.code == ResponseCode.SLAVE_NOT_AVAILABLE
    assert [m.body for m in await w2.pull_all("F", 0)] == [f"f{i}".encode() for i in range(30)] + [b"while alone"]

    # The old master returns on its store: a slave of b2 now, in sync again, so b2's
    # SYNC_MASTER sends succeed.
    b1 = await setup.broker(1, min_in_sync_replicas=min_isr)
    await eventually(lambda: _true(b1.replication.role == SLAVE and b1.replication.slave is not None
                                   and b1.replication.slave.connected), what="b1 to rejoin as slave")
    await eventually(lambda: _true(b2.replication.agent is not None
                                   and b2.replication.agent.sync_state_set == {1, 2}), what="b1 in sync")
    ok = await w2.send("F", b"replicated again")
    assert ok.code == ResponseCode.SUCCESS, ok.remark
    assert b1.store is not None and b2.store is not None
    assert b1.store.max_phy_offset == b2.store.max_phy_offset
    assert b1.store.replica.epochs.entries() == b2.store.replica.epochs.entries()
    refused = await setup.wire(b1).send("F", b"to the old master")
    assert refused.code == ResponseCode.SERVICE_NOT_AVAILABLE


async def test_a_promoted_slave_delivers_the_pending_timers_once_and_not_the_delivered_ones(setup: Setup) -> None:
    import time

    from ferrymq.common.record import decode_records

    b1 = await setup.broker(1)
    await eventually(lambda: _true(b1.replication.role == MASTER), what="b1 to be master")
    b2 = await setup.broker(2)
    await eventually(lambda: _true(b1.replication.agent is not None
                                   and b1.replication.agent.sync_state_set == {1, 2}), what="b2 in sync")
    w1 = setup.wire(b1)
    await w1.create_topic("TM", 1)
    now = int(time.time() * 1000)
    early, late = now + 300, now + 2_500
    for i in range(5):
        for name, at in (("early", early), ("late", late)):
            resp = await w1.send("TM", f"{name}{i}".encode(),
                                 props={"TIMER_DELIVER_MS": str(at), "UNIQ_KEY": f"{name}-{i}"})
            assert resp.code == ResponseCode.SUCCESS, resp.remark
    assert b1.store is not None and b2.store is not None
    await eventually(lambda: _true(b1.store.reads.get_max_offset("TM", 0) == 5), what="the early timers delivered")
    # The slave has copied the master's wheel position past the early ones.
    await eventually(lambda: _true(b2.replication.master_timer is not None
                                   and b2.replication.master_timer[0] > early), what="the timer position copied")
    await b1.stop()
    del setup.brokers[1]
    await eventually(lambda: _true(b2.replication.role == MASTER), timeout=10, what="b2 elected")
    w2 = setup.wire(b2)

    async def all_late() -> bool:
        return b2.store is not None and b2.store.reads.get_max_offset("TM", 0) >= 10

    await eventually(all_late, timeout=15, what="the late timers delivered by the new master")
    bodies = sorted(m.body.decode() for m in decode_records((await w2.pull("TM", 0, 0, max_nums=32)).body or b""))
    assert bodies == sorted([f"early{i}" for i in range(5)] + [f"late{i}" for i in range(5)])


async def test_an_in_sync_set_change_finishing_after_a_demotion_keeps_the_read_gate_closed(setup: Setup) -> None:
    """A change of the in-sync set asked for while master (here: a slave leaving) may finish
    after the broker was demoted; it must not touch the cleared sets, which would open the
    read gate on a log whose unconfirmed tail is about to be cut."""
    b1 = await setup.broker(1)
    await eventually(lambda: _true(b1.replication.role == MASTER), what="b1 to be master")
    await setup.broker(2)
    await eventually(lambda: _true(b1.replication.agent is not None
                                   and b1.replication.agent.sync_state_set == {1, 2}), what="b2 in sync")
    store, agent = b1.store, b1.replication.agent
    assert store is not None and agent is not None
    await eventually(lambda: _true(store.confirmed_offset is not None), what="the gate closed")
    # Demoted as a heartbeat answer naming no master does it: the sets are cleared, the gate
    # stays as it was. Nothing below yields to the loop until the assertions, so no heartbeat
    # can promote b1 again in between.
    rep = b1.replication
    rep.role = UNDECIDED
    b1.stop_master_services()
    rep.drop_slaves()
    held = store.confirmed_offset
    assert held is not None
    await agent._alter(remove=2)
    assert store.confirmed_offset == held
    assert rep.master is not None and not rep.master.in_sync and not rep.master.wait_set
