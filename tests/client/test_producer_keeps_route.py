"""A producer that has a topic's route keeps it: when every broker group of the topic loses its
master, its sends fail with a retriable error saying so, and it never falls back to the
auto-create route (TBW102), which would store the messages, and create the topic, on a broker
of another cluster. Real processes: a name server, broker bk-a (DefaultCluster), broker group
bk-b (master and slave, cluster C2), the master SIGKILLed and later restarted."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from ferrymq import AdminClient, Message, NoRouteError, NoWritableMasterError, Producer, SendError
from ferrymq.common import jsonx
from ferrymq.common.codes import RequestCode, ResponseCode
from ferrymq.embedded.cluster import start_cluster
from ferrymq.embedded.process import ServerProcess
from ferrymq.remoting import ClientConfig, RemotingClient, RemotingCommand
from waits import wait_until

TOPIC = "ctl"


def _topics_on(addr: str) -> set[str]:
    """The topics a broker has (GET_ALL_TOPIC_CONFIG), asked of the broker itself."""
    async def ask() -> set[str]:
        client = RemotingClient(ClientConfig(connect_timeout=3.0))
        try:
            resp = await client.invoke(addr, RemotingCommand.request(RequestCode.GET_ALL_TOPIC_CONFIG), 5.0)
        finally:
            await client.close()
        assert resp.code == ResponseCode.SUCCESS, resp.remark
        table: dict[str, Any] = jsonx.loads(resp.body or b"{}")["topicConfigTable"]
        return set(table)
    return asyncio.run(ask())


def _no_master(admin: AdminClient) -> bool:
    route = admin.topic_route(TOPIC, refresh=True)
    return [q.broker_name for q in route.queue_datas] == ["bk-b"] and "bk-b" not in route.brokers


def _sent_on_c2(producer: Producer) -> bool:
    try:
        return producer.send(Message(TOPIC, b"again")).broker == "bk-b"
    except (NoRouteError, SendError):
        return False


@pytest.mark.timeout(180)
def test_a_topic_whose_groups_lost_their_master_fails_its_sends_and_never_moves(tmp_path: Path) -> None:
    with start_cluster(tmp_path / "c2", slaves=1, role="ASYNC_MASTER", broker_name="bk-b",
                       broker_config={"broker_cluster_name": "C2"}) as c2:
        ns = c2.namesrv.addr
        bk_a = ServerProcess("bk-a", lambda: ["broker", "--namesrv", ns, "--broker-name", "bk-a",
                                              "--broker-port", "0", "--ha-port", "0", "--grpc-port", "-1",
                                              "--store-dir", str(tmp_path / "bk-a")],
                             tmp_path / "bk-a.log", "broker")
        bk_a.start()
        try:
            with AdminClient(ns) as admin:
                wait_until(lambda: set(admin.cluster_brokers()) == {"bk-a", "bk-b"}, what="both groups registered")
                admin.create_topic(TOPIC, 2, cluster="C2")
                with Producer("ctl-pg", ns, send_timeout=3.0) as producer:
                    assert producer.send(Message(TOPIC, b"first")).broker == "bk-b"
                    master = c2.static_master()
                    master.kill()  # SIGKILL; the slave stays up
                    wait_until(lambda: _no_master(admin), what="bk-b listed without its master")
                    for i in range(5):
                        with pytest.raises(NoWritableMasterError) as caught:
                            producer.send(Message(TOPIC, f"m{i}".encode()))
                        err = caught.value
                        assert err.retriable and err.topic == TOPIC and err.broker_names == ("bk-b",)
                        assert "no writable master" in str(err)
                    assert TOPIC not in _topics_on(bk_a.ready["broker"])
                    assert [q.broker_name for q in admin.topic_route(TOPIC, refresh=True).queue_datas] == ["bk-b"]
                    master.start()
                    wait_until(lambda: _sent_on_c2(producer), 60, what="a send stored on bk-b again")
                    assert TOPIC not in _topics_on(bk_a.ready["broker"])
        finally:
            bk_a.kill()
