"""The name server over a real socket: registration, routes, cluster info, expiry of silent
brokers (injected clock), and routes dropped when a broker's connection closes."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator

import pytest

from ferrymq.common import jsonx
from ferrymq.common.codes import RequestCode, ResponseCode
from ferrymq.namesrv.routes import RouteRegistry
from ferrymq.namesrv.server import NameServer, NamesrvConfig
from ferrymq.remoting import RemotingClient, RemotingCommand


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000

    def __call__(self) -> int:
        return self.now


@pytest.fixture
async def ns() -> AsyncIterator[tuple[NameServer, Clock]]:
    clock = Clock()
    server = NameServer(NamesrvConfig(port=0), RouteRegistry(broker_expire_ms=120_000, clock=clock))
    await server.start()
    yield server, clock
    await server.stop()


def _register(addr: str, name: str, topics: dict[str, int]) -> RemotingCommand:
    table = {t: {"topicName": t, "readQueueNums": n, "writeQueueNums": n, "perm": 6, "topicSysFlag": 0,
                 "order": False, "topicFilterType": "SINGLE_TAG"} for t, n in topics.items()}
    body = jsonx.dumps_bytes({"topicConfigSerializeWrapper": {
        "topicConfigTable": table, "dataVersion": {"timestamp": 1, "counter": 1}}, "filterServerList": []})
    return RemotingCommand.request(RequestCode.REGISTER_BROKER, ext_fields={
        "brokerAddr": addr, "brokerName": name, "brokerId": "0", "clusterName": "DefaultCluster",
        "haServerAddr": addr, "compressed": "false"}, body=body)


async def _route(client: RemotingClient, ns: str, topic: str) -> RemotingCommand:
    return await client.invoke(ns, RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC,
                                                           ext_fields={"topic": topic}), 3.0)


async def test_registered_topics_route_to_their_brokers(ns: tuple[NameServer, Clock]) -> None:
    server, _ = ns
    client = RemotingClient()
    try:
        for addr, name in (("127.0.0.1:10911", "broker-a"), ("127.0.0.1:10921", "broker-b")):
            resp = await client.invoke(server.address, _register(addr, name, {"orders": 4}), 3.0)
            assert resp.code == ResponseCode.SUCCESS
        # Standard JSON ("0" keys, as RocketMQ sends to clients of version >= V4_9_4).
        route = json.loads((await _route(client, server.address, "orders")).body or b"{}")
        assert sorted(q["brokerName"] for q in route["queueDatas"]) == ["broker-a", "broker-b"]
        addrs = {b["brokerName"]: b["brokerAddrs"] for b in route["brokerDatas"]}
        assert addrs == {"broker-a": {"0": "127.0.0.1:10911"}, "broker-b": {"0": "127.0.0.1:10921"}}
        missing = await _route(client, server.address, "nope")
        assert missing.code == ResponseCode.TOPIC_NOT_EXIST and "nope" in (missing.remark or "")
        info = jsonx.loads((await client.invoke(server.address, RemotingCommand.request(
            RequestCode.GET_BROKER_CLUSTER_INFO), 3.0)).body or b"{}")
        assert sorted(info["clusterAddrTable"]["DefaultCluster"]) == ["broker-a", "broker-b"]
        unreg = RemotingCommand.request(RequestCode.UNREGISTER_BROKER, ext_fields={
            "brokerAddr": "127.0.0.1:10921", "brokerName": "broker-b", "brokerId": "0",
            "clusterName": "DefaultCluster"})
        assert (await client.invoke(server.address, unreg, 3.0)).code == ResponseCode.SUCCESS
        route = jsonx.loads((await _route(client, server.address, "orders")).body or b"{}")
        assert [q["brokerName"] for q in route["queueDatas"]] == ["broker-a"]
    finally:
        await client.close()


async def test_silent_broker_is_dropped_after_120s(ns: tuple[NameServer, Clock]) -> None:
    server, clock = ns
    client = RemotingClient()
    try:
        await client.invoke(server.address, _register("127.0.0.1:10911", "broker-a", {"t": 1}), 3.0)
        clock.now += 119_000
        assert server.registry.scan_not_active() == []
        clock.now += 2_000
        assert server.registry.scan_not_active() == ["127.0.0.1:10911"]
        assert (await _route(client, server.address, "t")).code == ResponseCode.TOPIC_NOT_EXIST
    finally:
        await client.close()


async def test_closed_broker_connection_removes_its_routes(ns: tuple[NameServer, Clock]) -> None:
    server, _ = ns
    broker_side = RemotingClient()
    await broker_side.invoke(server.address, _register("127.0.0.1:10911", "broker-a", {"t": 1}), 3.0)
    await broker_side.close()
    asker = RemotingClient()
    try:
        for _ in range(200):
            if (await _route(asker, server.address, "t")).code == ResponseCode.TOPIC_NOT_EXIST:
                break
            await asyncio.sleep(0.01)
        assert (await _route(asker, server.address, "t")).code == ResponseCode.TOPIC_NOT_EXIST
    finally:
        await asker.close()


def _query_version(counter: int) -> RemotingCommand:
    return RemotingCommand.request(RequestCode.QUERY_DATA_VERSION, ext_fields={
        "brokerAddr": "127.0.0.1:10911", "brokerName": "broker-a", "brokerId": "0",
        "clusterName": "DefaultCluster"}, body=jsonx.dumps_bytes({"timestamp": counter, "counter": counter}))


async def test_query_data_version_says_whether_a_full_registration_is_needed(ns: tuple[NameServer, Clock]) -> None:
    """What an Apache RocketMQ broker asks before registering (unless it always registers)."""
    server, clock = ns
    client = RemotingClient()
    try:
        unknown = await client.invoke(server.address, _query_version(1), 3.0)
        assert unknown.code == ResponseCode.SUCCESS and unknown.ext_fields["changed"] == "true"
        await client.invoke(server.address, _register("127.0.0.1:10911", "broker-a", {"t": 1}), 3.0)
        clock.now += 100_000
        same = await client.invoke(server.address, _query_version(1), 3.0)
        assert same.ext_fields["changed"] == "false"
        assert jsonx.loads(same.body or b"") == {"timestamp": 1, "counter": 1}
        clock.now += 100_000  # 200 s since the registration, 100 s since the unchanged query
        assert server.registry.scan_not_active() == []
        newer = await client.invoke(server.address, _query_version(2), 3.0)
        assert newer.ext_fields["changed"] == "true"
    finally:
        await client.close()
