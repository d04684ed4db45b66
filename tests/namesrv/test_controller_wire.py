"""The controller on the name server's port, driven with raw remoting requests: JSON answers,
refusal codes, REGISTER_BROKER as id 0 allowed only from the elected master, the old master
dropped from the route at the election."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from ferrymq.common import jsonx
from ferrymq.common.codes import RequestCode, ResponseCode
from ferrymq.namesrv.controller import ReplicaController
from ferrymq.namesrv.routes import RouteRegistry
from ferrymq.namesrv.server import NameServer, NamesrvConfig
from ferrymq.remoting import RemotingClient, RemotingCommand

LEASE = 3000


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000

    def __call__(self) -> int:
        return self.now


class Ns:
    def __init__(self, server: NameServer, clock: Clock, client: RemotingClient) -> None:
        self.server, self.clock, self.client = server, clock, client

    async def call(self, code: int, body: dict[str, Any] | None) -> RemotingCommand:
        req = RemotingCommand.request(code, body=None if body is None else jsonx.dumps_bytes(body))
        return await self.client.invoke(self.server.address, req, 3.0)

    async def heartbeat(self, broker_id: int, max_offset: int = 0, epoch: int = 0) -> dict[str, Any]:
        resp = await self.call(RequestCode.BROKER_HEARTBEAT, beat(broker_id, max_offset, epoch))
        assert resp.code == ResponseCode.SUCCESS, resp.remark
        doc: dict[str, Any] = json.loads(resp.body or b"")
        return doc

    async def register(self, broker_id: int, addr: str) -> RemotingCommand:
        body = jsonx.dumps_bytes({"topicConfigSerializeWrapper": {
            "topicConfigTable": {"t": {"topicName": "t", "readQueueNums": 2, "writeQueueNums": 2, "perm": 6}},
            "dataVersion": {"timestamp": 1, "counter": 1}}, "filterServerList": []})
        req = RemotingCommand.request(RequestCode.REGISTER_BROKER, ext_fields={
            "brokerAddr": addr, "brokerName": "b", "brokerId": str(broker_id), "clusterName": "C",
            "haServerAddr": addr, "compressed": "false"}, body=body)
        return await self.client.invoke(self.server.address, req, 3.0)

    async def route_addrs(self) -> dict[str, str]:
        req = RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, ext_fields={"topic": "t"})
        resp = await self.client.invoke(self.server.address, req, 3.0)
        if resp.code != ResponseCode.SUCCESS:
            return {}
        addrs: dict[str, str] = json.loads(resp.body or b"")["brokerDatas"][0]["brokerAddrs"]
        return addrs


def addr(broker_id: int) -> str:
    return f"127.0.0.1:{10910 + broker_id}"


def beat(broker_id: int, max_offset: int = 0, epoch: int = 0) -> dict[str, Any]:
    return {"clusterName": "C", "brokerName": "b", "brokerId": broker_id, "brokerAddr": addr(broker_id),
            "haAddr": f"127.0.0.1:{20910 + broker_id}", "maxOffset": max_offset, "epoch": epoch}


@pytest.fixture
async def ns(tmp_path: Path) -> AsyncIterator[Ns]:
    clock = Clock()
    controller = ReplicaController(tmp_path, lease_ms=LEASE, clock=clock)
    # A long scan interval: the tests decide when a scan runs.
    config = NamesrvConfig(port=0, enable_controller=True, controller_dir=tmp_path, controller_scan_interval_ms=600_000)
    server = NameServer(config, RouteRegistry(clock=clock), controller)
    await server.start()
    client = RemotingClient()
    yield Ns(server, clock, client)
    await client.close()
    await server.stop()


async def test_heartbeat_answers_and_replica_info(ns: Ns) -> None:
    assert await ns.heartbeat(1) == {"epoch": 1, "masterId": 1, "masterAddr": addr(1),
                                     "masterHaAddr": "127.0.0.1:20911", "syncStateSet": [1],
                                     "syncStateSetEpoch": 1, "leaseMs": 3000}
    assert (await ns.heartbeat(2, max_offset=7))["masterId"] == 1
    resp = await ns.call(RequestCode.CONTROLLER_ALTER_SYNC_STATE_SET, {
        "brokerName": "b", "masterId": 1, "epoch": 1, "syncStateSetEpoch": 1, "syncStateSet": [1, 2]})
    assert resp.code == ResponseCode.SUCCESS, resp.remark
    assert json.loads(resp.body or b"")["syncStateSetEpoch"] == 2
    resp = await ns.call(RequestCode.CONTROLLER_GET_REPLICA_INFO, {"brokerName": "b"})
    info = json.loads(resp.body or b"")
    assert info["masterId"] == 1 and info["syncStateSet"] == [1, 2] and info["clusterName"] == "C"
    assert [(r["brokerId"], r["maxOffset"], r["alive"], r["inSync"]) for r in info["replicas"]] == [
        (1, 0, True, True), (2, 7, True, True)]


async def test_refusals_carry_codes_and_remarks(ns: Ns) -> None:
    await ns.heartbeat(1)
    await ns.heartbeat(2)
    stale = await ns.call(RequestCode.CONTROLLER_ALTER_SYNC_STATE_SET, {
        "brokerName": "b", "masterId": 2, "epoch": 1, "syncStateSetEpoch": 1, "syncStateSet": [1, 2]})
    assert stale.code == ResponseCode.CONTROLLER_FENCED_MASTER_EPOCH and "not the master" in (stale.remark or "")
    stale = await ns.call(RequestCode.CONTROLLER_ALTER_SYNC_STATE_SET, {
        "brokerName": "b", "masterId": 1, "epoch": 1, "syncStateSetEpoch": 0, "syncStateSet": [1, 2]})
    assert stale.code == ResponseCode.CONTROLLER_FENCED_SYNC_STATE_SET_EPOCH
    cases: list[tuple[int, dict[str, Any] | None, str]] = [
        (RequestCode.BROKER_HEARTBEAT, None, "no JSON body"),
        (RequestCode.BROKER_HEARTBEAT, {**beat(1), "brokerId": 0}, "replica id >= 1"),
        (RequestCode.BROKER_HEARTBEAT, {**beat(1), "brokerName": ""}, "brokerName must be a non-empty string"),
        (RequestCode.BROKER_HEARTBEAT, {**beat(1), "maxOffset": "12"}, "maxOffset must be an integer"),
        (RequestCode.CONTROLLER_ALTER_SYNC_STATE_SET, {"brokerName": "b", "masterId": 1, "epoch": 1,
                                                       "syncStateSetEpoch": 1, "syncStateSet": "1,2"},
         "syncStateSet must be a list"),
        (RequestCode.CONTROLLER_GET_REPLICA_INFO, {"brokerName": "zz"}, "unknown broker group 'zz'"),
    ]
    for code, body, remark in cases:
        resp = await ns.call(code, body)
        assert resp.code == ResponseCode.CONTROLLER_INVALID_REQUEST, (body, resp.code)
        assert remark in (resp.remark or ""), (remark, resp.remark)


async def test_election_moves_route_and_fences_old_master_registration(ns: Ns) -> None:
    await ns.heartbeat(1)
    await ns.heartbeat(2)
    assert (await ns.register(0, addr(1))).code == ResponseCode.SUCCESS
    refused = await ns.register(0, addr(2))  # not the master
    assert refused.code == ResponseCode.CONTROLLER_FENCED_MASTER_EPOCH and addr(1) in (refused.remark or "")
    assert (await ns.register(2, addr(2))).code == ResponseCode.SUCCESS
    assert await ns.route_addrs() == {"0": addr(1), "2": addr(2)}
    resp = await ns.call(RequestCode.CONTROLLER_ALTER_SYNC_STATE_SET, {
        "brokerName": "b", "masterId": 1, "epoch": 1, "syncStateSetEpoch": 1, "syncStateSet": [1, 2]})
    assert resp.code == ResponseCode.SUCCESS

    ns.clock.now += LEASE - 100
    await ns.heartbeat(2, max_offset=40)
    ns.clock.now += 200
    assert ns.server.controller is not None
    ns.server.controller.scan()
    # The old master left the route at the election, before anyone registered again.
    assert await ns.route_addrs() == {"2": addr(2)}
    answer = await ns.heartbeat(2, max_offset=40)
    assert (answer["masterId"], answer["epoch"], answer["masterAddr"]) == (2, 2, addr(2))
    # The new master registers as id 0: its slave entry goes. The old master may not come back as 0.
    assert (await ns.register(0, addr(2))).code == ResponseCode.SUCCESS
    assert await ns.route_addrs() == {"0": addr(2)}
    back = await ns.register(0, addr(1))
    assert back.code == ResponseCode.CONTROLLER_FENCED_MASTER_EPOCH
    assert await ns.route_addrs() == {"0": addr(2)}
    # As a slave it is welcome, and told who its master is.
    assert (await ns.heartbeat(1, epoch=1))["masterId"] == 2
    as_slave = await ns.register(1, addr(1))
    assert as_slave.code == ResponseCode.SUCCESS and as_slave.ext_fields["masterAddr"] == addr(2)
    assert await ns.route_addrs() == {"0": addr(2), "1": addr(1)}


async def test_masterless_group_refuses_id_0_and_other_groups_register_as_before(ns: Ns) -> None:
    await ns.heartbeat(1)
    ns.clock.now += LEASE + 1
    assert ns.server.controller is not None
    ns.server.controller.scan()
    refused = await ns.register(0, addr(1))
    assert refused.code == ResponseCode.CONTROLLER_FENCED_MASTER_EPOCH and "no master" in (refused.remark or "")
    assert (await ns.register(1, addr(1))).code == ResponseCode.SUCCESS
    # A group the controller never heard of (static roles) is not the controller's business.
    req = RemotingCommand.request(RequestCode.REGISTER_BROKER, ext_fields={
        "brokerAddr": "127.0.0.1:1", "brokerName": "static", "brokerId": "0", "clusterName": "C"})
    assert (await ns.client.invoke(ns.server.address, req, 3.0)).code == ResponseCode.SUCCESS


async def test_controller_codes_unsupported_when_off(tmp_path: Path) -> None:
    server = NameServer(NamesrvConfig(port=0, controller_dir=tmp_path))
    await server.start()
    client = RemotingClient()
    try:
        for code in (RequestCode.BROKER_HEARTBEAT, RequestCode.CONTROLLER_ALTER_SYNC_STATE_SET,
                     RequestCode.CONTROLLER_GET_REPLICA_INFO):
            req = RemotingCommand.request(code, body=jsonx.dumps_bytes(beat(1)))
            resp = await client.invoke(server.address, req, 3.0)
            assert resp.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED
        assert list(tmp_path.iterdir()) == []
    finally:
        await client.close()
        await server.stop()
