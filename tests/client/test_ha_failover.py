"""ferrymq's clients when a broker group's master dies, on real processes (a name server, a
master and a slave, each `python -m ferrymq`): consumers read and commit on the slave and go
back to the master when it returns; producers move to the other group. Routes refresh only
every 30 s here, so what is measured is the refresh a failed request triggers."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from scenario_util import FAST_CONSUMER, FAST_PRODUCER, Recorder

from ferrymq import AdminClient, ConsumeFromWhere, ConsumeStatus, Message, MessageExt, Producer, PushConsumer
from ferrymq.client.api import MQClientAPI
from ferrymq.client.consumers import LitePullConsumer
from ferrymq.common.message import MessageQueue
from ferrymq.embedded import LocalCluster, start_cluster
from ferrymq.embedded.cluster import BrokerProcess
from ferrymq.remoting import ClientConfig, RemotingClient
from waits import wait_until

BROKER_CONFIG: dict[str, str | int | float | bool] = {
    "ha_heartbeat_interval_ms": 100,
    "ha_slave_sync_interval_ms": 200,
    "register_broker_interval_ms": 500,
}
# No periodic route refresh within a test: only the refresh a failure triggers can help.
SLOW_ROUTES = dict(route_refresh_interval=30.0)
TOPIC = "HA"


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[LocalCluster]:
    c = start_cluster(tmp_path / "a", slaves=1, role="ASYNC_MASTER", broker_config=BROKER_CONFIG)
    try:
        yield c
    finally:
        c.close()


def committed_on(ns: str, addr: str, group: str, mqs: list[MessageQueue]) -> dict[int, int]:
    """The group's offsets as one broker (not the route's choice) holds them."""

    async def ask() -> dict[int, int]:
        remoting = RemotingClient(ClientConfig())
        try:
            api = MQClientAPI(remoting, ns, timeout=2.0)
            return {mq.queue_id: await api.query_consumer_offset(addr, group, mq.topic, mq.queue_id)
                    for mq in mqs}
        finally:
            await remoting.close()

    return asyncio.run(ask())


def runtime(admin: AdminClient, addr: str) -> dict[str, str]:
    return next(b.runtime for b in admin.cluster_list() if b.addr == addr)


def caught_up(admin: AdminClient, master: BrokerProcess, slave: BrokerProcess) -> bool:
    m, s = runtime(admin, master.addr), runtime(admin, slave.addr)
    return s.get("haConnected") == "true" and m["commitLogMaxOffset"] == s["commitLogMaxOffset"]


def send_all(namesrv: str, bodies: list[str]) -> None:
    with Producer("p-ha", namesrv, **FAST_PRODUCER) as producer:
        for body in bodies:
            producer.send(Message(TOPIC, body.encode()))


def test_push_consumer_finishes_on_the_slave_and_its_offsets_survive_the_masters_return(
    cluster: LocalCluster,
) -> None:
    master, slave = cluster.static_master(), cluster.slaves()[0]
    ns = cluster.namesrv.addr
    old = [f"old-{i}" for i in range(120)]
    with AdminClient(ns, timeout=2.0) as admin:
        admin.create_topic(TOPIC, 4)
        send_all(ns, old)
        wait_until(lambda: caught_up(admin, master, slave), what="the slave to have every message")
        mqs = admin.message_queues(TOPIC)
        assert runtime(admin, slave.addr).get("msgGetTotalTodayNow", "0") == "0"

    # The listener stops at 30 messages until the master is dead; flow control keeps the
    # consumer from holding more than a few per queue, so the rest must come from the slave.
    seen = Recorder()
    gate = threading.Event()

    def listener(msgs: list[MessageExt], ctx: Any) -> ConsumeStatus:
        if seen.count() >= 30:
            gate.wait(30)
        seen.add(msgs)
        return ConsumeStatus.CONSUME_SUCCESS

    options = {**FAST_CONSUMER, **SLOW_ROUTES, "consume_threads": 1, "pull_batch_size": 2,
               "pull_threshold_for_queue": 2, "consume_from_where": ConsumeFromWhere.FIRST_OFFSET}
    first = PushConsumer("g-ha", ns, **options)
    first.subscribe(TOPIC)
    first.register_listener(listener)
    first.start()
    try:
        wait_until(lambda: seen.count() >= 30, what="30 messages from the master")
        master.kill()
        gate.set()
        wait_until(lambda: set(seen.bodies()) >= {b.encode() for b in old}, timeout=30,
                 what="every message, the rest from the slave")
    finally:
        first.shutdown()
    with AdminClient(ns, timeout=2.0) as admin:
        assert int(runtime(admin, slave.addr).get("msgGetTotalTodayNow", "0")) > 0
    on_slave = committed_on(ns, slave.addr, "g-ha", mqs)
    assert sum(on_slave.values()) == len(old), on_slave

    # The master returns on its store; the slave hands it the offsets committed meanwhile.
    master.start()
    cluster.wait_master()
    wait_until(lambda: committed_on(ns, master.addr, "g-ha", mqs) == on_slave, timeout=20,
             what="the master to take the slave's offsets")

    new = [f"new-{i}" for i in range(20)]
    send_all(ns, new)
    again = Recorder()
    second = PushConsumer("g-ha", ns, **{**FAST_CONSUMER, "consume_from_where": ConsumeFromWhere.FIRST_OFFSET})
    second.subscribe(TOPIC)
    second.register_listener(lambda msgs, ctx: again.add(msgs) or ConsumeStatus.CONSUME_SUCCESS)
    with second:
        wait_until(lambda: set(again.bodies()) >= {b.encode() for b in new}, what="the new messages")
    # Queues are read in order: had the group started from 0, the old ones came first.
    assert sorted(again.bodies()) == sorted(b.encode() for b in new)


def test_lite_pull_consumer_reads_the_slave_of_a_dead_master(cluster: LocalCluster) -> None:
    master, slave = cluster.static_master(), cluster.slaves()[0]
    ns = cluster.namesrv.addr
    bodies = [f"m{i}" for i in range(40)]
    with AdminClient(ns, timeout=2.0) as admin:
        admin.create_topic(TOPIC, 2)
        send_all(ns, bodies)
        wait_until(lambda: caught_up(admin, master, slave), what="the slave to have every message")
    consumer = LitePullConsumer("g-lite", ns, auto_commit=False, **{
        **FAST_CONSUMER, **SLOW_ROUTES, "pull_batch_size": 2, "pull_threshold_for_queue": 2,
        "consume_from_where": ConsumeFromWhere.FIRST_OFFSET})
    consumer.subscribe(TOPIC)
    consumer.start()
    try:
        got: list[bytes] = []
        wait_until(lambda: got.extend(m.body for m in consumer.poll(0.2)) or len(got) >= 10,
                 what="the first messages")
        master.kill()
        wait_until(lambda: got.extend(m.body for m in consumer.poll(0.2)) or len(set(got)) >= len(bodies),
                 timeout=30, what="every message")
        consumer.commit()
        assert set(got) == {b.encode() for b in bodies}
        mqs = sorted(consumer.assignment())
        assert sum(committed_on(ns, slave.addr, "g-lite", mqs).values()) == len(bodies)

        # Back to the master once the route lists it again (its read counter starts at 0).
        # Until the consumer's route lists the master, it reads what is sent now from the
        # slave (which has it too), so one more message goes out each round until a pull
        # has reached the master.
        master.start()
        cluster.wait_master()
        later: list[str] = []
        with AdminClient(ns, timeout=2.0) as admin:

            def read_from_master() -> bool:
                later.append(f"later-{len(later)}")
                send_all(ns, later[-1:])
                got.extend(m.body for m in consumer.poll(0.2))
                return int(runtime(admin, master.addr).get("msgGetTotalTodayNow", "0")) > 0

            wait_until(read_from_master, timeout=60, what="a pull served by the returned master")
        wait_until(lambda: got.extend(m.body for m in consumer.poll(0.2))
                 or {b.encode() for b in later} <= set(got),
                 what="the messages sent after the master's return")
    finally:
        consumer.shutdown()


def test_sends_move_to_the_other_group_when_a_master_dies(cluster: LocalCluster, tmp_path: Path) -> None:
    other = LocalCluster(tmp_path / "b", broker_name="broker-b", controller=False,
                         namesrv=cluster.namesrv, config_file=None)
    b = BrokerProcess(other, 0, "ASYNC_MASTER", None, (), 30.0)
    other.brokers.append(b)
    b.start()
    try:
        ns = cluster.namesrv.addr
        with AdminClient(ns, timeout=2.0) as admin:
            wait_until(lambda: set(admin.brokers()) == {"broker-a", "broker-b"}, what="both masters")
            admin.create_topic(TOPIC, 2)
        with Producer("p-two", ns, **{**FAST_PRODUCER, **SLOW_ROUTES}, send_timeout=3.0) as producer:
            before = {producer.send(Message(TOPIC, b"x")).broker for _ in range(8)}
            assert before == {"broker-a", "broker-b"}
            cluster.static_master().kill()
            after = [producer.send(Message(TOPIC, f"after-{i}".encode())).broker for i in range(50)]
        # Every send succeeded (send raises otherwise), on the group that still has a master.
        assert set(after) == {"broker-b"}
    finally:
        other.close()


def test_sends_resume_on_the_master_the_controller_elects(tmp_path: Path) -> None:
    with start_cluster(tmp_path, slaves=1, role="ASYNC_MASTER", controller=True, controller_lease_ms=1000,
                       broker_config={"controller_heartbeat_interval_ms": 200, **BROKER_CONFIG}) as cluster:
        old = cluster.wait_master()
        replica = next(b for b in cluster.brokers if b is not old)
        ns = cluster.namesrv.addr
        with Producer("p-elect", ns, **{**FAST_PRODUCER, **SLOW_ROUTES}, send_timeout=1.0,
                      retry_times_when_send_failed=0) as producer:
            with AdminClient(ns, timeout=2.0) as admin:
                admin.create_topic(TOPIC, 2)
                producer.send(Message(TOPIC, b"before"))
                # The replica has the message and the topic (else the new master has no route).
                wait_until(lambda: caught_up(admin, old, replica)
                         and runtime(admin, replica.addr)["topicCount"] == runtime(admin, old.addr)["topicCount"],
                         what="the replica to have the message and the topic")
            old.kill()
            assert cluster.wait_master(30, not_addr=old.addr) is replica

            def sent() -> bool:
                try:
                    producer.send(Message(TOPIC, b"after"))
                except Exception:
                    return False
                return True

            # Routes would refresh in 30 s; the producer must look again by itself.
            wait_until(sent, timeout=10, interval=0.1, what="a send to the new master")
