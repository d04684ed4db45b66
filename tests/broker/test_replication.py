"""Master/slave replication with in-process brokers over real sockets and files: the slave's
log is the master's, it serves pulls and refuses writes, SYNC_MASTER answers only once a
slave has the message, and a slave's metadata follows its master's."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from inproc_cluster import Group
from wire_util import Wire

from ferrymq.common import jsonx
from ferrymq.common.codes import RequestCode, ResponseCode
from ferrymq.common.record import decode_records
from waits import eventually


@pytest.fixture
async def group(tmp_path: Path) -> AsyncIterator[Group]:
    g = Group(tmp_path)
    await g.namesrv.start()
    yield g
    await g.close()


async def runtime(w: Wire, addr: str) -> dict[str, str]:
    resp = await w.call(RequestCode.GET_BROKER_RUNTIME_INFO, addr=addr)
    table: dict[str, str] = jsonx.loads(resp.body or b"{}")["table"]
    return table


async def test_slave_copies_the_log_serves_pulls_and_refuses_writes(group: Group) -> None:
    master = await group.broker("m")
    slave = await group.broker("s", broker_role="SLAVE", broker_id=1)
    wm, ws = group.wire(master), group.wire(slave)
    await wm.create_topic("R", 2)
    for i in range(50):
        resp = await wm.send("R", f"m{i}".encode(), queue_id=i % 2, keys=f"k{i}")
        assert resp.code == ResponseCode.SUCCESS, resp.remark
    assert master.store is not None and slave.store is not None
    await eventually(lambda: _true(slave.store.max_phy_offset == master.store.max_phy_offset),
                     what="the slave to catch up")
    got = await ws.pull_all("R", 0) + await ws.pull_all("R", 1)
    assert sorted(m.body for m in got) == sorted(f"m{i}".encode() for i in range(50))
    refused = await ws.send("R", b"no")
    assert refused.code == ResponseCode.SERVICE_NOT_AVAILABLE and "slave" in (refused.remark or "")
    # The route lists both; the slave learnt its master from the name server.
    route = await wm.route("R")
    assert route is not None
    addrs = route["brokerDatas"][0]["brokerAddrs"]  # type: ignore[index]
    assert addrs == {"0": master.addr, "1": slave.addr}
    table = await runtime(ws, slave.addr)
    assert table["brokerRole"] == "SLAVE" and table["masterAddr"] == master.addr
    assert table["haConnected"] == "true" and table["slaveLagBytes"] == "0"
    mt = await runtime(wm, master.addr)
    slaves = jsonx.loads(mt["haSlaves"])
    assert [s["brokerId"] for s in slaves] == [1] and slaves[0]["lagBytes"] == 0
    # Topic config and consumer offsets follow the master.
    await wm.pull("R", 0, 0, group="g1", commit_offset=7)
    await eventually(lambda: _true(slave.offsets.query("g1", "R", 0) == 7 and slave.topics.get("R") is not None),
                     what="the slave's metadata copy")


async def test_sync_master_answers_after_the_slave_has_the_message(group: Group) -> None:
    # Trace off: its records are written in the background and would move the master's log
    # end between an answer and the comparison below.
    master = await group.broker("m", broker_role="SYNC_MASTER", trace_enable=False)
    wm = group.wire(master)
    await wm.create_topic("S", 1)
    lonely = await wm.send("S", b"before any slave")
    assert lonely.code == ResponseCode.SLAVE_NOT_AVAILABLE
    assert lonely.ext_fields.get("queueOffset") == "0"  # stored, only not replicated
    slave = await group.broker("s", broker_role="SLAVE", broker_id=1)
    assert master.store is not None and slave.store is not None
    await eventually(lambda: _true(1 in master.replication.master.in_sync),  # type: ignore[union-attr]
                     what="the slave to be in sync")
    for i in range(20):
        resp = await wm.send("S", f"s{i}".encode())
        assert resp.code == ResponseCode.SUCCESS, resp.remark
        # Answered, so the slave has it already.
        assert slave.store.max_phy_offset >= master.store.max_phy_offset
    await slave.replication.slave.stop()  # type: ignore[union-attr]
    gone = await wm.send("S", b"after the slave left")
    assert gone.code in (ResponseCode.SLAVE_NOT_AVAILABLE, ResponseCode.FLUSH_SLAVE_TIMEOUT)


async def test_returning_master_data_beyond_the_agreed_epoch_is_cut(group: Group, tmp_path: Path) -> None:
    """A slave holding bytes of a later epoch its new master never had cuts them."""
    master = await group.broker("m")
    wm = group.wire(master)
    await wm.create_topic("E", 1)
    for i in range(5):
        await wm.send("E", f"a{i}".encode())
    slave = await group.broker("s", broker_role="SLAVE", broker_id=1)
    assert master.store is not None and slave.store is not None
    await eventually(lambda: _true(slave.store.max_phy_offset == master.store.max_phy_offset),
                     what="catch-up")
    agreed = slave.store.max_phy_offset
    await slave.stop()
    group.brokers.remove(slave)
    # The slave's store gains records of an epoch the master never wrote (as an old master's
    # would after a failover).
    from ferrymq.store import MessageStore, StoreConfig, StoreMessage
    st = MessageStore(StoreConfig(tmp_path / "s", store_host="127.0.0.1:1"))
    st.start()
    st.replica.epochs.begin(7, st.max_phy_offset)
    st.put_messages([StoreMessage("E", 0, b"never replicated", {})])
    assert st.max_phy_offset > agreed
    st.shutdown()
    again = await group.broker("s", broker_role="SLAVE", broker_id=1)
    assert again.store is not None
    await eventually(lambda: _true(again.replication.slave is not None and again.replication.slave.connected),
                     what="reconnect")
    await wm.send("E", b"a5")
    await eventually(lambda: _true(again.store.max_phy_offset == master.store.max_phy_offset),
                     what="catch-up after the cut")
    ws = group.wire(again)
    bodies = [m.body for m in await ws.pull_all("E", 0)]
    assert bodies == [f"a{i}".encode() for i in range(6)]
    assert again.replication.slave.truncated_bytes > 0  # type: ignore[union-attr]


async def test_bad_input_on_the_ha_port_closes_only_that_connection(group: Group) -> None:
    master = await group.broker("m")
    slave = await group.broker("s", broker_role="SLAVE", broker_id=1)
    wm = group.wire(master)
    await wm.create_topic("B", 1)
    host, port = master.replication.ha_addr.rsplit(":", 1)
    for garbage in (b"GET / HTTP/1.1\r\n\r\n", b"\xff\xff\xff\xff\x01", b"\x00\x00\x00\x05\x01{]]]"):
        reader, writer = await asyncio.open_connection(host, int(port))
        writer.write(garbage)
        await writer.drain()
        assert await asyncio.wait_for(reader.read(), 5) == b""  # closed by the master
        writer.close()
    assert master.replication.master is not None and master.replication.master.rejected == 3
    await wm.send("B", b"still replicating")
    assert master.store is not None and slave.store is not None
    await eventually(lambda: _true(slave.store.max_phy_offset == master.store.max_phy_offset),
                     what="the real slave to keep replicating")
    msgs = decode_records((await group.wire(slave).pull("B", 0, 0)).body or b"")
    assert [m.body for m in msgs] == [b"still replicating"]


async def _true(value: bool) -> bool:
    return value


async def test_master_suggests_the_slave_to_a_consumer_far_behind(group: Group) -> None:
    master = await group.broker("m", slave_read_enable=True, access_message_in_memory_max_ratio=0)
    await group.broker("s", broker_role="SLAVE", broker_id=1)
    wm = group.wire(master)
    await wm.create_topic("L", 1)
    for i in range(5):
        await wm.send("L", f"l{i}".encode())
    await eventually(lambda: _true(1 in master.replication.master.in_sync),  # type: ignore[union-attr]
                     what="the slave in sync")
    behind = await wm.pull("L", 0, 0, max_nums=2)
    assert behind.ext_fields["suggestWhichBrokerId"] == "1"
    caught_up = await wm.pull("L", 0, 0, max_nums=5)  # nothing left after these
    assert caught_up.ext_fields["suggestWhichBrokerId"] == "0"


async def test_slave_started_first_finds_its_master_when_it_registers(group: Group) -> None:
    slave = await group.broker("s", broker_role="SLAVE", broker_id=1)
    assert slave.replication.master_ha_addr == ""
    master = await group.broker("m")
    await eventually(lambda: _true(slave.replication.slave is not None and slave.replication.slave.connected),
                     timeout=10, what="the slave to find and reach its master")
    assert slave.replication.master_ha_addr == master.replication.ha_addr


async def test_a_new_topic_reaches_the_slave_at_once_not_at_the_next_copy(group: Group) -> None:
    master = await group.broker("m")
    slave = await group.broker("s", broker_role="SLAVE", broker_id=1, ha_slave_sync_interval_ms=600_000)
    await eventually(lambda: _true(slave.replication.synced_ms > 0), what="the first copy")
    await eventually(lambda: _true(slave.replication.slave is not None and slave.replication.slave.connected),
                     what="the replication link")
    await group.wire(master).create_topic("NEW", 3)
    await eventually(lambda: _true(slave.topics.get("NEW") is not None), timeout=5,
                     what="the topic on the slave long before the next periodic copy")
    cfg = slave.topics.get("NEW")
    assert cfg is not None and cfg.write_queue_nums == 3


async def test_pop_acks_reach_the_slave_and_a_slave_refuses_pop(group: Group) -> None:
    from ferrymq.broker.pop import pop_service
    from ferrymq.broker.pop.service import INIT_MIN

    master = await group.broker("m")
    slave = await group.broker("s", broker_role="SLAVE", broker_id=1)
    wm, ws = group.wire(master), group.wire(slave)
    await wm.create_topic("P", 1)
    for i in range(6):
        await wm.send("P", f"p{i}".encode())
    from ferrymq.broker.clients import parse_subscription
    popped = await pop_service(master).pop("pg", "P", 0, 6, 60_000, parse_subscription("P", "*", 0, "TAG"),
                                           init_mode=INIT_MIN)
    assert len(popped.messages) == 6
    await pop_service(master).ack("pg", "P", 0, [1, 2, 4])  # 0 is still in flight: acked ranges
    await eventually(lambda: _true(slave.offsets.progress("pg", "P", 0) is not None
                                   and slave.offsets.progress("pg", "P", 0).acked == [(1, 3), (4, 5)]),  # type: ignore[union-attr]
                     what="the acked ranges on the slave")
    refused = await ws.call(RequestCode.POP_MESSAGE, consumerGroup="pg", topic="P", queueId=0, maxMsgNums=1,
                            invisibleTime=1000, pollTime=0, bornTime=0, initMode=0, expType="TAG", exp="*")
    assert refused.code == ResponseCode.SERVICE_NOT_AVAILABLE and "slave" in (refused.remark or "")


async def test_an_append_leaves_for_a_keeping_up_slave_in_its_own_loop_turn(group: Group) -> None:
    """The records of an append are written to a slave that keeps up by the append itself:
    waking the link's shipper first cost a loop turn on the way of every SYNC_MASTER send.
    A slave that has fallen behind is still caught up by its shipper, span by span."""
    from ferrymq.store import StoreMessage

    master = await group.broker("m", broker_role="SYNC_MASTER", trace_enable=False)
    slave = await group.broker("s", broker_role="SLAVE", broker_id=1)
    wm = group.wire(master)
    await wm.create_topic("W", 1)
    ha = master.replication.master
    assert ha is not None and master.store is not None and slave.store is not None
    await eventually(lambda: _true(1 in ha.in_sync), what="the slave in sync")
    link = ha.links[1]
    await eventually(lambda: _true(link.shipped == master.store.max_phy_offset and not link.draining),
                     what="the shipper to be idle")
    for i in range(3):
        master.store.put_messages([StoreMessage("W", 0, f"w{i}".encode(), {})])  # no await between
        assert link.shipped == master.store.max_phy_offset
        assert not link.grew.is_set()  # nothing left for the shipper to do
    await eventually(lambda: _true(slave.store.max_phy_offset == master.store.max_phy_offset),
                     what="the slave to have the appends")
    for i in range(50):
        resp = await wm.send("W", bytes(40_000) + f"{i}".encode())
        assert resp.code == ResponseCode.SUCCESS, resp.remark
    await eventually(lambda: _true(slave.store.max_phy_offset == master.store.max_phy_offset),
                     what="the slave to have every send")
    bodies = [m.body[40_000:] for m in await group.wire(slave).pull_all("W", 0)]
    assert bodies[3:] == [f"{i}".encode() for i in range(50)]


async def test_a_demoted_master_never_confirms_the_sends_still_waiting(group: Group) -> None:
    master = await group.broker("m", broker_role="SYNC_MASTER", sync_flush_timeout_ms=30_000)
    await group.broker("s", broker_role="SLAVE", broker_id=1)
    wm = group.wire(master)
    await wm.create_topic("D", 1)
    ha = master.replication.master
    assert ha is not None
    await eventually(lambda: _true(1 in ha.in_sync), what="the slave in sync")
    ha.wait_set.add(99)  # a replica that never answers: the send waits
    pending = asyncio.ensure_future(wm.send("D", b"waiting"))
    await eventually(lambda: _true(ha.waiters is not None and len(ha.waiters) == 1), what="the send to wait")
    master.replication.drop_slaves()  # what losing the master role does
    resp = await pending
    assert resp.code == ResponseCode.FLUSH_SLAVE_TIMEOUT
    assert "stopped being" in (resp.remark or "")


async def test_a_stopped_replication_loop_never_connects_again_when_its_cancel_is_lost(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Python 3.11's asyncio.wait_for can lose a cancel that arrives as the awaited connection
    attempt ends. A promoted master's replication loop then ran on, connected to its old
    master back up as a slave, and cut the new master's acknowledged records to that log's
    end (seen in the controller chaos run: an acknowledged message lost)."""
    import types

    from ferrymq.ha import slave as slave_module
    from ferrymq.store import MessageStore, StoreConfig

    store = MessageStore(StoreConfig(tmp_path / "s"))
    store.start()
    asked: list[int] = []

    def master_ha() -> str:
        asked.append(1)
        return "127.0.0.1:1"

    async def never_connects(*_a: object, **_k: object) -> object:
        await asyncio.Event().wait()
        raise AssertionError("unreachable")

    async def losing_the_cancel(aw: Any, timeout: float) -> Any:
        try:
            return await asyncio.wait_for(aw, timeout)
        except asyncio.CancelledError:
            raise ConnectionRefusedError("refused") from None  # the cancel, lost

    shim = types.ModuleType("asyncio")
    shim.__dict__.update(asyncio.__dict__)
    shim.__dict__.update(wait_for=losing_the_cancel)
    monkeypatch.setattr(slave_module, "asyncio", shim)
    monkeypatch.setattr(slave_module, "_open", never_connects)
    ha = slave_module.HaSlave(store, slave_module.HaSlaveConfig("b", 2, "127.0.0.1:0",
                                                                retry_interval_ms=10), master_ha)
    async def attempted() -> bool:
        return bool(asked)

    try:
        ha.start()
        await eventually(attempted, what="a connection attempt")
        stopping = asyncio.ensure_future(ha.stop())
        done, _ = await asyncio.wait({stopping}, timeout=10)
        assert done, "the replication loop ran on after stop"
        attempts = len(asked)
        await asyncio.sleep(0.1)  # the window in which a loop left running would try again
        assert len(asked) == attempts
    finally:
        monkeypatch.setattr(slave_module, "asyncio", asyncio)  # cancels are kept again
        for _ in range(500):  # a loop the test could not stop is cancelled until it ends
            left = [t for t in asyncio.all_tasks() if t.get_name() == "ferrymq-ha-slave"]
            if not left:
                break
            for task in left:
                task.cancel()
            await asyncio.sleep(0.01)
        store.shutdown()
