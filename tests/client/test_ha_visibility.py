"""A master in controller mode shows consumers only what its in-sync slave has, on real
processes. A message the slave does not have yet may still be cut by a failover; a consumer
that read it would hold a queue offset the new master hands to the next message, and would
skip that message (an acknowledged message never delivered: seen once in a chaos run before
this rule). The slave is frozen with SIGSTOP so the master holds the message."""

from __future__ import annotations

import concurrent.futures
from pathlib import Path

import pytest
from scenario_util import FAST_PRODUCER

from ferrymq import AdminClient, Message, Producer, SendStatus
from ferrymq.client.results import PullStatus
from ferrymq.common.message import MessageQueue
from ferrymq.embedded import start_cluster
from waits import wait_until

TOPIC = "VIS"
CONFIG: dict[str, str | int | float | bool] = {
    "controller_heartbeat_interval_ms": 200,
    "ha_heartbeat_interval_ms": 100,
    "ha_slave_sync_interval_ms": 200,
    "register_broker_interval_ms": 500,
    # The frozen slave stays in the in-sync set for the whole check, and the send waits.
    "ha_max_time_slave_not_catchup_ms": 60_000,
    "sync_flush_timeout_ms": 60_000,
}


def commit_log_end(admin: AdminClient, addr: str) -> int:
    return int(next(b.runtime for b in admin.cluster_list() if b.addr == addr)["commitLogMaxOffset"])


def in_sync(admin: AdminClient, addr: str) -> str:
    return next(b.runtime for b in admin.cluster_list() if b.addr == addr).get("inSyncSlaves", "")


@pytest.mark.parametrize("role", ["SYNC_MASTER", "ASYNC_MASTER"])
def test_a_message_the_in_sync_slave_lacks_is_not_read_until_the_slave_has_it(tmp_path: Path, role: str) -> None:
    with start_cluster(tmp_path, slaves=1, role=role, controller=True, controller_lease_ms=3000,
                       broker_config=CONFIG) as cluster:
        master = cluster.wait_master()
        slave = next(b for b in cluster.brokers if b is not master)
        ns = cluster.namesrv.addr
        with AdminClient(ns, timeout=2.0) as admin, \
                Producer("p-vis", ns, **FAST_PRODUCER, send_timeout=90.0) as producer:
            admin.create_topic(TOPIC, 1)
            wait_until(lambda: in_sync(admin, master.addr) != "", timeout=30, what="the slave in sync")
            first = producer.send(Message(TOPIC, b"replicated"))
            assert first.status is SendStatus.SEND_OK
            mq = MessageQueue(TOPIC, first.broker, 0)
            wait_until(lambda: admin.max_offset(mq) == 1, what="the first message readable")

            slave.pause()
            try:
                end = commit_log_end(admin, master.addr)
                with concurrent.futures.ThreadPoolExecutor(1) as pool:
                    held = pool.submit(producer.send, Message(TOPIC, b"held"))
                    # Stored on the master (its log grew); a SYNC_MASTER's send waits for the
                    # frozen slave, an ASYNC_MASTER's is answered at once.
                    wait_until(lambda: commit_log_end(admin, master.addr) > end, what="the send stored")
                    if role == "SYNC_MASTER":
                        assert not held.done()
                    else:
                        assert held.result(timeout=30).status is SendStatus.SEND_OK
                    assert admin.max_offset(mq) == 1
                    pulled = admin.pull(mq, 1)
                    assert pulled.status is PullStatus.NO_NEW_MSG, pulled
                    assert pulled.messages == []
                    assert [m.body for m in admin.pull(mq, 0).messages] == [b"replicated"]
                    slave.resume()
                    result = held.result(timeout=60)
            finally:
                if slave.paused:
                    slave.resume()
            assert result.status is SendStatus.SEND_OK
            assert result.queue_offset == 1
            # The slave has it now: readers see it.
            wait_until(lambda: admin.max_offset(mq) == 2, what="the message to become readable")
            assert [m.body for m in admin.pull(mq, 1).messages] == [b"held"]


def test_read_uncommitted_shows_what_the_master_stored_at_once(tmp_path: Path) -> None:
    with start_cluster(tmp_path, slaves=1, role="ASYNC_MASTER", controller=True, controller_lease_ms=3000,
                       broker_config={**CONFIG, "read_uncommitted": True}) as cluster:
        master = cluster.wait_master()
        slave = next(b for b in cluster.brokers if b is not master)
        ns = cluster.namesrv.addr
        with AdminClient(ns, timeout=2.0) as admin, Producer("p-vis", ns, **FAST_PRODUCER) as producer:
            admin.create_topic(TOPIC, 1)
            wait_until(lambda: in_sync(admin, master.addr) != "", timeout=30, what="the slave in sync")
            slave.pause()
            try:
                sent = producer.send(Message(TOPIC, b"unreplicated"))
                mq = MessageQueue(TOPIC, sent.broker, 0)
                assert admin.max_offset(mq) == 1
                assert [m.body for m in admin.pull(mq, 0).messages] == [b"unreplicated"]
            finally:
                slave.resume()
