"""Three controllers agreeing through a real 3-member etcd cluster (quorum mode,
docs/replication.md "Three controllers"): a controller cut off from etcd cannot elect a master,
while the two that still reach it do; the replicas are played over TCP by the test, so the
election is seen exactly (the broker-group faults are in test_chaos.py's sync-quorum mode)."""

from __future__ import annotations

import asyncio
import os
import random
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from proxy import TcpProxy

from etcd_cluster import EtcdCluster
from ferrymq.common import jsonx
from ferrymq.common.codes import CONTROLLER_LEADER_FIELD, RequestCode, ResponseCode
from ferrymq.embedded.cluster import NamesrvProcess
from ferrymq.remoting import RemotingClient, RemotingCommand
from waits import eventually

LEASE_MS = 1000
# `make chaos` runs it; `make test` keeps to one quorum scenario (test_chaos.py's sync-quorum).
pytestmark = [pytest.mark.chaos, pytest.mark.slow, pytest.mark.timeout(180),
              pytest.mark.skipif(os.environ.get("FERRYMQ_CHAOS_LONG") != "1", reason="make chaos runs it")]


@pytest.fixture
def etcd(tmp_path: Path) -> Iterator[EtcdCluster]:
    cluster = EtcdCluster(tmp_path / "etcd")
    try:
        yield cluster.start_all()
    finally:
        cluster.close()


def controller(base: Path, index: int, endpoints: list[str]) -> NamesrvProcess:
    ns = NamesrvProcess(base, controller=True, lease_ms=LEASE_MS, timeout=30.0, index=index,
                        extra=["--controller-etcd", ",".join(endpoints), "--controller-scan-interval-ms", "100"])
    ns.start()
    return ns


def beat(broker_id: int, max_offset: int, epoch: int) -> dict[str, Any]:
    return {"clusterName": "C", "brokerName": "b", "brokerId": broker_id,
            "brokerAddr": f"127.0.0.1:{10910 + broker_id}", "haAddr": f"127.0.0.1:{20910 + broker_id}",
            "maxOffset": max_offset, "epoch": epoch}


async def call(client: RemotingClient, addr: str, code: int, body: dict[str, Any]) -> RemotingCommand:
    return await client.invoke(addr, RemotingCommand.request(code, body=jsonx.dumps_bytes(body)), 3.0)


def answer(resp: RemotingCommand) -> dict[str, Any]:
    assert resp.code == ResponseCode.SUCCESS, (resp.code, resp.remark)
    doc: dict[str, Any] = jsonx.loads(resp.body or b"{}")
    return doc


async def test_a_controller_cut_off_from_etcd_cannot_elect(tmp_path: Path, etcd: EtcdCluster) -> None:
    proxies = [TcpProxy(ep.removeprefix("http://"), port=_port_below_ephemeral()).start() for ep in etcd.endpoints]
    client = RemotingClient()
    # The first controller reaches etcd only through the proxies, and is started alone so it leads.
    first = controller(tmp_path, 0, [f"http://{p.addr}" for p in proxies])
    others: list[NamesrvProcess] = []
    try:
        # A leader answers an unknown group's info with INVALID_REQUEST, a follower NOT_LEADER.
        await eventually(lambda: _leads(client, first.addr), 30, "the first controller to lead", interval=0.1)
        others = [controller(tmp_path, i, etcd.endpoints) for i in (1, 2)]
        for ns in others:
            await eventually(lambda ns=ns: _refused_naming(client, ns.addr, first.addr, beat(2, 0, 0)), 30,
                             "a follower to name the leader", interval=0.05)
        one = answer(await call(client, first.addr, RequestCode.BROKER_HEARTBEAT, beat(1, 0, 0)))
        assert (one["masterId"], one["epoch"]) == (1, 1)
        answer(await call(client, first.addr, RequestCode.BROKER_HEARTBEAT, beat(2, 0, 0)))
        altered = answer(await call(client, first.addr, RequestCode.CONTROLLER_ALTER_SYNC_STATE_SET, {
            "brokerName": "b", "masterId": 1, "epoch": 1, "syncStateSetEpoch": 1, "syncStateSet": [1, 2]}))
        assert altered["syncStateSet"] == [1, 2]

        # Cut the leader off from etcd; the master (1) goes silent; replica 2 heartbeats to all.
        for p in proxies:
            p.cut()
        seen_from_first: list[tuple[int, int]] = []
        elected: dict[str, Any] = {}
        deadline = time.monotonic() + 30
        while not elected:
            assert time.monotonic() < deadline, f"no election by the majority side; first said {seen_from_first}"
            resp = await call(client, first.addr, RequestCode.BROKER_HEARTBEAT, beat(2, 100, 1))
            if resp.code == ResponseCode.SUCCESS:
                doc = answer(resp)
                seen_from_first.append((doc["masterId"], doc["epoch"]))
            else:
                assert resp.code == ResponseCode.CONTROLLER_NOT_LEADER, (resp.code, resp.remark)
            for ns in others:
                resp = await call(client, ns.addr, RequestCode.BROKER_HEARTBEAT, beat(2, 100, 1))
                if resp.code == ResponseCode.SUCCESS and answer(resp)["masterId"] == 2:
                    elected = answer(resp)
            await asyncio.sleep(0.1)
        # The cut-off controller never elected: whatever it answered named master 1 at epoch 1.
        assert set(seen_from_first) <= {(1, 1)}, seen_from_first
        assert (elected["epoch"], elected["syncStateSet"]) == (2, [2]), elected
        refused = await call(client, first.addr, RequestCode.BROKER_HEARTBEAT, beat(2, 100, 1))
        assert refused.code == ResponseCode.CONTROLLER_NOT_LEADER, refused.remark

        # Healed, it follows the state the others wrote (epoch 2) instead of its own.
        for p in proxies:
            p.heal()
        leader = [ns.addr for ns in others if await _leads(client, ns.addr)]
        assert len(leader) == 1, leader
        await eventually(lambda: _refused_naming(client, first.addr, leader[0], beat(2, 100, 2)), 30,
                         "the healed controller to name the leader")
    finally:
        await client.close()
        for ns in [first, *others]:
            ns.kill()
        for p in proxies:
            p.close()


def _port_below_ephemeral() -> int:
    """A free port outside the ephemeral range: healing a proxy listens on its port again, and
    the many short HTTP connections to etcd could have taken an ephemeral one meanwhile."""
    low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    for port in random.sample(range(max(1024, low - 12000), low), 200):
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError("no free port below the ephemeral range")


async def _leads(client: RemotingClient, addr: str) -> bool:
    resp = await call(client, addr, RequestCode.CONTROLLER_GET_REPLICA_INFO, {"brokerName": "none"})
    return resp.code == ResponseCode.CONTROLLER_INVALID_REQUEST


async def _refused_naming(client: RemotingClient, addr: str, leader: str,
                          body: dict[str, Any]) -> RemotingCommand | None:
    resp = await call(client, addr, RequestCode.BROKER_HEARTBEAT, body)
    ok = resp.code == ResponseCode.CONTROLLER_NOT_LEADER and resp.ext_fields.get(CONTROLLER_LEADER_FIELD) == leader
    return resp if ok else None
