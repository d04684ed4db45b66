"""Third-party clients read from the slave once the master is gone (static roles: ASYNC_MASTER
and one SLAVE, each its own process). The client sends N messages to the master, the slave is
polled until it has all of them, the master is SIGKILLed, and only then is the consumer started:
it must receive all N from the slave. Both clients are the real ones (ali-ons with node, the
RocketMQ C++ client in its own venv)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest
from compat_util import Clients, bodies_received, by_body, cpp_python_or_skip, node_or_skip, run_producer
from compat_util import clients as clients

from ferrymq import AdminClient
from ferrymq.client.admin_async import AsyncAdminClient
from ferrymq.common.message import MessageQueue
from ferrymq.embedded import LocalCluster, start_cluster
from waits import wait_until

pytestmark = pytest.mark.compat

BROKER = "broker-a"
N = 200
QUEUES = 4
FAST_BROKER: dict[str, str | int | float | bool] = {
    "register_broker_interval_ms": 500,
    "ha_slave_sync_interval_ms": 300,
    "ha_heartbeat_interval_ms": 200,
}


class ClusterServer:
    """What compat_util's `clients` needs from a `server`: the name server and a log to show."""

    def __init__(self, cluster: LocalCluster) -> None:
        self.cluster = cluster
        self.namesrv = cluster.namesrv.addr

    @property
    def log_lines(self) -> list[str]:
        return [f"--- {p.name}:\n{p.log_tail(20)}\n" for p in self.cluster.processes]


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[LocalCluster]:
    with start_cluster(tmp_path / "cluster", slaves=1, role="ASYNC_MASTER", broker_config=FAST_BROKER) as c:
        yield c


@pytest.fixture
def server(cluster: LocalCluster) -> ClusterServer:
    return ClusterServer(cluster)


async def _on_slave(namesrv: str, slave: str, topic: str, group: str | None) -> dict[int, int]:
    """Per queue, the slave's max offset (group None) or the group's offset on the slave."""
    async with AsyncAdminClient(namesrv, timeout=2.0) as admin:
        out = {}
        for q in range(QUEUES):
            if group is None:
                out[q] = await admin.api.max_offset(slave, topic, q)
            else:
                out[q] = await admin.api.query_consumer_offset(slave, group, topic, q)
        return out


def slave_has(cluster: LocalCluster, topic: str, want: dict[int, int], group: str | None = None) -> bool:
    try:
        got = asyncio.run(_on_slave(cluster.namesrv.addr, cluster.slaves()[0].addr, topic, group))
    except Exception:  # not there yet: the slave answers TOPIC_NOT_EXIST / QUERY_NOT_FOUND
        return False
    return got == want


def send_and_fail_over(cluster: LocalCluster, clients: Clients, producer: str, topic: str,
                       group_offsets: str | None = None) -> set[str]:
    with AdminClient(cluster.namesrv.addr) as admin:
        admin.create_topic(topic, QUEUES)
        run = clients.ons_producer if producer == "ons" else clients.cpp_producer
        sent = run_producer(run(topic=topic, count=N, body="fo-{i}"), N, 120)
        master_max = {mq.queue_id: admin.max_offset(mq) for mq in admin.message_queues(topic)}
        assert sum(master_max.values()) == N
        if group_offsets is not None:
            # A client that starts a new group at the queue's end needs the group's offsets at
            # 0, copied to the slave before the master goes.
            for q in range(QUEUES):
                admin.update_consumer_offset(group_offsets, MessageQueue(topic, BROKER, q), 0)
    wait_until(lambda: slave_has(cluster, topic, master_max), 30, what="the slave to have every message")
    if group_offsets is not None:
        zeros = dict.fromkeys(range(QUEUES), 0)
        wait_until(lambda: slave_has(cluster, topic, zeros, group_offsets), 30,
                   what="the slave to have the group's offsets")
    cluster.static_master().kill()
    return {s["body"] for s in sent}


def test_ali_ons_consumes_everything_from_the_slave_after_the_master_is_killed(
        cluster: LocalCluster, clients: Clients) -> None:
    node_or_skip()
    topic, group = "fo-ons", "fo-ons-g"
    want = send_and_fail_over(cluster, clients, "ons", topic)
    consumer = clients.ons_consumer(topic=topic, group=group, consumeFromWhere="first", rebalanceIntervalMs=500,
                                    pollNameServerIntervalMs=500, persistIntervalMs=500)
    consumer.wait_received(bodies_received(want), 60, f"all {N} messages from the slave")
    got = by_body(consumer.received())
    assert set(got) == want
    stores = {e["storeHost"] for e in consumer.received()}
    assert stores == {cluster.static_master().addr}, "the slave's copy keeps the master's store host"


def test_cpp_client_consumes_everything_from_the_slave_after_the_master_is_killed(
        cluster: LocalCluster, clients: Clients) -> None:
    cpp_python_or_skip()
    topic, group = "fo-cpp", "fo-cpp-g"
    want = send_and_fail_over(cluster, clients, "cpp", topic, group_offsets=group)
    consumer = clients.cpp_consumer(topic=topic, group=group)
    consumer.wait_received(bodies_received(want), 60, f"all {N} messages from the slave")
    assert set(by_body(consumer.received())) == want
