"""AdminClient.message_trace over a cluster where one broker has no trace (an Apache RocketMQ
broker answers QUERY_MESSAGE_TRACE with REQUEST_CODE_NOT_SUPPORTED): the other brokers'
timelines still come back, and the one that could not answer says why."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from wire_util import Wire

from ferrymq.aio import AdminClient
from ferrymq.broker.config import BrokerConfig
from ferrymq.broker.controller import Broker
from ferrymq.common import jsonx
from ferrymq.common.codes import RequestCode, ResponseCode
from ferrymq.namesrv.server import NameServer, NamesrvConfig
from ferrymq.remoting import RemotingClient, RemotingCommand, RemotingServer, ServerConfig


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[tuple[NameServer, Broker, str]]:
    namesrv = NameServer(NamesrvConfig(port=0))
    await namesrv.start()
    broker = Broker(BrokerConfig(store_dir=tmp_path / "store", listen_port=0,
                                 namesrv_addr=namesrv.address, grpc_listen_port=-1))
    await broker.start()
    await broker.register_once()
    old = RemotingServer(ServerConfig(host="127.0.0.1", port=0))  # serves no request code
    host, port = await old.start()
    try:
        yield namesrv, broker, f"{host}:{port}"
    finally:
        await old.stop()
        await broker.stop()
        await namesrv.stop()


async def test_a_broker_without_trace_leaves_the_others_timelines(
        cluster: tuple[NameServer, Broker, str]) -> None:
    namesrv, broker, old_addr = cluster
    body = jsonx.dumps_bytes({"topicConfigSerializeWrapper": {
        "topicConfigTable": {}, "dataVersion": {"timestamp": 1, "counter": 1}},
        "filterServerList": []})
    # The name server forgets a broker whose registering connection closes: kept open here.
    client = RemotingClient()
    try:
        resp = await client.invoke(namesrv.address, RemotingCommand.request(
            RequestCode.REGISTER_BROKER, ext_fields={
                "brokerAddr": old_addr, "brokerName": "broker-old", "brokerId": "0",
                "clusterName": "DefaultCluster", "haServerAddr": old_addr, "compressed": "false"},
            body=body), 3.0)
        assert resp.code == ResponseCode.SUCCESS
        wire = Wire(namesrv.address, broker.addr)
        try:
            await wire.create_topic("ta", 1)
            sent = await wire.send("ta", b"x", props={"UNIQ_KEY": "7F00000100002A9F0000000000000001"})
            assert sent.code == ResponseCode.SUCCESS
        finally:
            await wire.close()
        async with AdminClient(namesrv.address) as admin:
            trace = await admin.message_trace("7F00000100002A9F0000000000000001")
    finally:
        await client.close()
    assert [e.kind for e in trace.events] == ["stored"]
    assert trace.trace_enable == {"broker-a": True, "broker-old": False}
    assert set(trace.errors) == {"broker-old"} and "REQUEST_CODE_NOT_SUPPORTED" in trace.errors[
        "broker-old"]
