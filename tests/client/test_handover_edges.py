"""Queue hand-over (broker/handover.py) where no queue is being handed over: a member that only
looks at a queue another member owns must be answered at once, and a release must reach the
broker that new owners ask."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from scenario_util import FAST_CONSUMER, FAST_PRODUCER

from ferrymq import ConsumeFromWhere, Message, aio
from ferrymq.common.message import MessageQueue
from ferrymq.embedded import start_cluster

# Replication and registration fast enough for a test (as in test_ha_failover).
BROKER_CONFIG: dict[str, str | int | float | bool] = {
    "ha_heartbeat_interval_ms": 100,
    "ha_slave_sync_interval_ms": 200,
    "register_broker_interval_ms": 500,
}


async def _handover_waits(admin: aio.AdminClient, addr: str) -> int:
    return int((await admin.api.broker_runtime_info(addr))["consumerHandoverWaits"])


def test_lite_pull_committed_of_a_queue_another_member_owns_is_not_held(standalone: Any) -> None:
    """`committed(mq)` reads the group's offset of any queue (lag monitoring, seek decisions);
    it takes nothing over, so it must not wait for the queue's owner to give it up."""

    async def scenario() -> None:
        async with aio.AdminClient(standalone.namesrv) as admin:
            await admin.create_topic("lite-look", 2)
            addr = (await admin.brokers())["broker-a"]
            q0, q1 = (MessageQueue("lite-look", "broker-a", q) for q in (0, 1))
            async with aio.Producer("p", standalone.namesrv, **FAST_PRODUCER) as producer:
                for q in (q0, q1):
                    for i in range(3):
                        await producer.send_to_queue(Message("lite-look", f"{q.queue_id}-{i}".encode()), q)
            members = []
            for mq in (q0, q1):
                c = aio.LitePullConsumer("g-lite-look", standalone.namesrv, auto_commit=False,
                                         consume_from_where=ConsumeFromWhere.FIRST_OFFSET, **FAST_CONSUMER)
                await c.assign([mq])
                members.append(c)
            first, second = members
            async with first, second:
                got: list[Any] = []
                while len(got) < 3:  # the second member pulled q1: it owns it
                    got += await second.poll(5.0)
                await second.commit()
                assert await first.committed(q1) == 3
                assert await _handover_waits(admin, addr) == 0

    asyncio.run(asyncio.wait_for(scenario(), 60))


def test_a_release_reaches_the_master_when_the_queue_was_read_from_the_slave(tmp_path: Path) -> None:
    """slave_read_enable: the master tells a consumer far behind to read from the slave, and
    offsets go where the queue is read. A new owner asks the master where to start (it never
    read the queue), and the master holds the answer until the old owner released the queue:
    the release must reach the master, or every queue moved waits the whole hand-over limit."""
    config = dict(BROKER_CONFIG, slave_read_enable=True, access_message_in_memory_max_ratio=0)
    cluster = start_cluster(tmp_path / "a", slaves=1, role="ASYNC_MASTER", broker_config=config)
    master = cluster.static_master()
    ns = cluster.namesrv.addr

    def member() -> aio.LitePullConsumer:
        # One message held per queue stops its pulls (nothing is polled): the last answer,
        # the master's, pointed at the slave.
        c = aio.LitePullConsumer("g-slave-read", ns, consume_from_where=ConsumeFromWhere.FIRST_OFFSET,
                                 pull_batch_size=1, pull_threshold_for_queue=1, **FAST_CONSUMER)
        c.subscribe("slave-read")
        return c

    async def scenario() -> None:
        async with aio.AdminClient(ns) as admin:
            await admin.create_topic("slave-read", 2)
            async with aio.Producer("p", ns, **FAST_PRODUCER) as producer:
                for q in range(2):
                    mq = MessageQueue("slave-read", "broker-a", q)
                    for i in range(3):
                        await producer.send_to_queue(Message("slave-read", f"{q}-{i}".encode()), mq)
            while "1" not in (await admin.api.broker_runtime_info(master.addr)).get("inSyncSlaves", ""):
                await asyncio.sleep(0.05)
            async with member() as first:
                while len(first.assignment()) < 2 or set(first.read_from.values()) != {1}:
                    await asyncio.sleep(0.02)
                async with member() as second:
                    while not second.assignment() or len(first.assignment()) > 1:
                        await asyncio.sleep(0.02)
                    table = await admin.api.broker_runtime_info(master.addr)
                    assert table["consumerHandoverWaitsRunOut"] == "0", table["consumerHandoverWaits"]

    try:
        asyncio.run(asyncio.wait_for(scenario(), 90))
    finally:
        cluster.close()
