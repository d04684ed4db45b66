"""A broker's controller agent in quorum mode (docs/replication.md, "Three controllers"): a
controller that does not lead answers CONTROLLER_NOT_LEADER naming the leader, and the agent asks
that one next, then first from then on. Three real remoting servers on loopback play the
controllers."""

from __future__ import annotations

import logging
from types import SimpleNamespace
from typing import Any

import pytest

from ferrymq.broker.failover import ControllerAgent
from ferrymq.common.codes import CONTROLLER_LEADER_FIELD, RequestCode, ResponseCode
from ferrymq.namesrv import NameServer, NamesrvConfig
from ferrymq.remoting import Connection, RemotingClient, RemotingCommand, RemotingServer, ServerConfig


async def test_the_agent_follows_the_named_leader() -> None:
    calls: list[str] = []
    servers = [RemotingServer(ServerConfig(host="127.0.0.1", port=0)) for _ in range(3)]
    addrs: list[str] = []
    leader = [""]

    def handler(name: str) -> Any:
        async def answer(conn: Connection, req: RemotingCommand) -> RemotingCommand:
            calls.append(name)
            if name == "c":
                return RemotingCommand.make_response_to(req, ResponseCode.SUCCESS, body=b"{}")
            # "a" knows the leader; "b" does not.
            ext = {CONTROLLER_LEADER_FIELD: leader[0]} if name == "a" else None
            return RemotingCommand.make_response_to(req, ResponseCode.CONTROLLER_NOT_LEADER,
                                                    remark="not the leader", ext_fields=ext)
        return answer

    for name, server in zip("abc", servers, strict=True):
        server.register(RequestCode.BROKER_HEARTBEAT, handler(name))
        host, port = await server.start()
        addrs.append(f"{host}:{port}")
    leader[0] = addrs[2]
    client = RemotingClient()
    try:
        # The leader last in the list, "b" (which names nobody) between it and "a".
        config = SimpleNamespace(controller_addr=f"{addrs[0]};{addrs[1]};{addrs[2]}",
                                 controller_heartbeat_interval_ms=1000, controller_lease_ms=3000)
        agent = ControllerAgent(SimpleNamespace(config=config, namesrv_client=client), None)  # type: ignore[arg-type]
        resp = await agent._call(RequestCode.BROKER_HEARTBEAT, {})
        assert resp.code == ResponseCode.SUCCESS
        assert calls == ["a", "c"]  # straight to the leader "a" named, "b" never asked
        await agent._call(RequestCode.BROKER_HEARTBEAT, {})
        assert calls == ["a", "c", "c"]  # the leader first from then on

        # Nobody leads: every controller is asked once and the last refusal comes back.
        calls.clear()
        leader[0] = ""
        agent = ControllerAgent(SimpleNamespace(config=SimpleNamespace(
            controller_addr=f"{addrs[0]};{addrs[1]}", controller_heartbeat_interval_ms=1000,
            controller_lease_ms=3000), namesrv_client=client), None)  # type: ignore[arg-type]
        resp = await agent._call(RequestCode.BROKER_HEARTBEAT, {})
        assert resp.code == ResponseCode.CONTROLLER_NOT_LEADER and calls == ["a", "b"]
    finally:
        await client.close()
        for server in servers:
            await server.stop()


async def test_a_name_server_without_a_controller_is_named_with_the_flag_that_starts_one(
        caplog: pytest.LogCaptureFixture) -> None:
    namesrv = NameServer(NamesrvConfig(port=0))  # no --enable-controller
    addr = await namesrv.start()
    client = RemotingClient()
    try:
        config = SimpleNamespace(controller_addr=addr, controller_heartbeat_interval_ms=1000, controller_lease_ms=3000,
                                 broker_cluster_name="C", broker_name="b", broker_id=1)
        store = SimpleNamespace(max_phy_offset=0, replica=SimpleNamespace(epochs=SimpleNamespace(last_epoch=0)))
        broker = SimpleNamespace(config=config, namesrv_client=client, store=store, addr="127.0.0.1:1")
        agent = ControllerAgent(broker, SimpleNamespace(ha_addr="127.0.0.1:2"))  # type: ignore[arg-type]
        with caplog.at_level(logging.WARNING, logger="ferrymq.broker.failover"):
            await agent.beat()
        # It said only "request type 904 not supported", every second, and the broker waited.
        [line] = [r.getMessage() for r in caplog.records]
        assert f"controller {addr} refused the heartbeat: it runs no controller" in line, line
        assert "--enable-controller" in line, line
    finally:
        await client.close()
        await namesrv.stop()
