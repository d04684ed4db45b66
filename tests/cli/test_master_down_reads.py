"""`group progress` and `topic status` with a broker group's master SIGKILLed: the group is
still shown, read from its slave and marked so (they used to leave it out and report a total
lag of 0). A real SYNC_MASTER and its slave, separate processes."""

from __future__ import annotations

import asyncio
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from cli_util import ferrymq, json_out

from ferrymq.client.admin import AdminClient
from ferrymq.client.admin_async import AsyncAdminClient
from ferrymq.common.message import MessageQueue
from ferrymq.embedded import start_cluster
from waits import wait_until

TOPIC, GROUP = "md-orders", "md-group"


def test_progress_and_status_read_a_group_whose_master_is_down_from_its_slave(
    tmp_path: Path,
) -> None:
    config = {"ha_heartbeat_interval_ms": 100, "ha_slave_sync_interval_ms": 200}
    with start_cluster(tmp_path, slaves=1, role="SYNC_MASTER", broker_config=config) as cluster:
        master, slave = cluster.static_master(), cluster.slaves()[0]
        server = SimpleNamespace(namesrv=cluster.namesrv.addr)
        ferrymq(server, "topic", "create", TOPIC, "--queues", "1")
        for i in range(5):
            ferrymq(server, "send", TOPIC, f"m{i}")
        mq = MessageQueue(TOPIC, "broker-a", 0)
        with AdminClient(cluster.namesrv.addr) as admin:
            admin.update_consumer_offset(GROUP, mq, 2)  # consumed 2 of 5: a lag of 3

        async def slave_view() -> Any:
            async with AsyncAdminClient(cluster.namesrv.addr) as admin:
                return await admin.api.consume_stats(slave.addr, GROUP, TOPIC)

        wait_until(lambda: [v for v in (asyncio.run(slave_view()).get("offsetTable") or {}).values()
                            if v["consumerOffset"] == 2 and v["brokerOffset"] == 5],
                   what="the slave to have the messages and the group's offset")
        before = json_out(server, "group", "progress", GROUP)
        assert [(r["lag"], r["read_from"]) for r in before if r["topic"] == TOPIC] == [(3, "master")]

        master.kill()
        wait_until(lambda: [r["broker_id"] for r in json_out(server, "cluster", "list")] == [1],
                   what="the name server to drop the dead master")

        rows = [r for r in json_out(server, "group", "progress", GROUP) if r["topic"] == TOPIC]
        assert [(r["broker"], r["consumer_offset"], r["broker_offset"], r["lag"], r["read_from"])
                for r in rows] == [("broker-a", 2, 5, 3, "slave")]
        text = ferrymq(server, "group", "progress", GROUP).stdout
        assert "total lag 3" in text and "broker-a (slave)" in text
        assert "broker-a: master down, read from slave" in text

        (queue,) = json_out(server, "topic", "status", TOPIC)
        assert (queue["max_offset"], queue["read_from"]) == (5, "slave")
        text = ferrymq(server, "topic", "status", TOPIC).stdout
        assert "broker-a (slave)" in text and "broker-a: master down, read from slave" in text
