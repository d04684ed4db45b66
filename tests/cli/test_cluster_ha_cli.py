"""`ferrymq cluster list` on a real SYNC_MASTER and its slave (separate processes): each
broker's role and its replication state, in the table and in --json. Then, with the master
SIGKILLed, `group progress` and `topic status` still show the broker group, read from its
slave and marked so (they used to leave it out and report a total lag of 0)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from cli_util import ferrymq, json_out

from ferrymq import Message, Producer
from ferrymq.client.admin import AdminClient
from ferrymq.client.admin_async import AsyncAdminClient
from ferrymq.common.message import MessageQueue
from ferrymq.embedded import start_cluster
from waits import wait_until


def rows(server: Any) -> dict[int, dict[str, Any]]:
    return {r["broker_id"]: r for r in json_out(server, "cluster", "list")}


def test_cluster_list_shows_roles_lag_and_in_sync_slaves(tmp_path: Path) -> None:
    config = {"ha_heartbeat_interval_ms": 100, "ha_slave_sync_interval_ms": 200}
    with start_cluster(tmp_path, slaves=1, role="SYNC_MASTER", broker_config=config) as cluster:
        master, slave = cluster.static_master(), cluster.slaves()[0]
        server = SimpleNamespace(namesrv=cluster.namesrv.addr)
        ferrymq(server, "topic", "create", "ha-cli", "--queues", "1")
        ferrymq(server, "send", "ha-cli", "replicated")
        both = wait_until(
            lambda: (r := rows(server)).get(0, {}).get("replication", {}).get("in_sync_slaves") == [1]
            and r.get(1, {}).get("replication", {}).get("ha_connected") and r,
            timeout=30, what="the slave to be in sync",
        )
        m, s = both[0], both[1]
        assert (m["role"], m["broker_role"], m["addr"]) == ("MASTER", "SYNC_MASTER", master.addr)
        assert m["replication"]["ha_addr"] == master.ha_addr
        (link,) = m["replication"]["ha_slaves"]
        assert link["brokerId"] == 1 and link["lagBytes"] == 0 and link["inSync"] is True
        assert m["replication"]["slave_lag_bytes"] is None and m["replication"]["ha_connected"] is None
        assert (s["role"], s["broker_role"], s["addr"]) == ("SLAVE", "SLAVE", slave.addr)
        assert s["replication"]["slave_lag_bytes"] == 0 and s["replication"]["slave_lag_ms"] >= 0
        assert s["replication"]["in_sync_slaves"] is None and s["replication"]["ha_slaves"] is None

        table = ferrymq(server, "cluster", "list").stdout
        master_line = next(line for line in table.splitlines() if master.addr in line)
        slave_line = next(line for line in table.splitlines() if slave.addr in line)
        assert "SYNC_MASTER" in master_line and master.ha_addr in master_line
        assert "SLAVE" in slave_line and "0 B" in slave_line and "yes" in slave_line

        _consume_two_of_four(server.namesrv, slave.addr)
        master.kill()
        (alone,) = wait_until(
            lambda: (r := list(rows(server).values())) and len(r) == 1
            and r[0]["replication"]["ha_connected"] is False and r,
            timeout=30, what="the dead master to leave the list and the slave to notice",
        )
        assert alone["broker_id"] == 1
        assert "no" in ferrymq(server, "cluster", "list").stdout.split(slave.addr, 1)[1].splitlines()[0]
        _progress_and_status_read_from_the_slave(server)
        # A group change goes to masters: the group whose master is down is named, not skipped.
        updated = json_out(server, "group", "update", GROUP, "--retry-max-times", "3")
        assert (updated["brokers"], updated["not_updated"]) == ([], ["broker-a"])
        text = ferrymq(server, "group", "update", GROUP, "--retry-max-times", "3").stdout
        assert "not changed on broker-a: no master is registered" in text


GROUP = "ha-cli-group"


def _consume_two_of_four(namesrv: str, slave_addr: str) -> None:
    """Three more messages (four in all) and the group's offset at 1: a lag of 3, which the
    slave holds once its offsets sync."""
    producer = Producer("ha-cli-producer", namesrv).start()
    try:
        for i in range(3):
            producer.send(Message("ha-cli", f"more{i}".encode()))
    finally:
        producer.shutdown()
    with AdminClient(namesrv) as admin:
        admin.update_consumer_offset(GROUP, MessageQueue("ha-cli", "broker-a", 0), 1)
        assert [(r.lag, r.read_from) for r in admin.group_progress(GROUP)] == [(3, "master")]

    async def slave_view() -> Any:
        async with AsyncAdminClient(namesrv) as admin:
            return await admin.api.consume_stats(slave_addr, GROUP, "ha-cli")

    wait_until(lambda: [v for v in (asyncio.run(slave_view()).get("offsetTable") or {}).values()
                        if (v["consumerOffset"], v["brokerOffset"]) == (1, 4)],
               what="the slave to have the messages and the group's offset")


def _progress_and_status_read_from_the_slave(server: Any) -> None:
    (row,) = json_out(server, "group", "progress", GROUP)
    assert (row["broker"], row["consumer_offset"], row["broker_offset"], row["lag"],
            row["read_from"]) == ("broker-a", 1, 4, 3, "slave")
    text = ferrymq(server, "group", "progress", GROUP).stdout
    assert "total lag 3" in text and "broker-a (slave)" in text
    assert "broker-a: master down, read from slave" in text
    (queue,) = json_out(server, "topic", "status", "ha-cli")
    # The type too is read from the slave: its master is down.
    assert (queue["max_offset"], queue["read_from"], queue["message_type"]) == (4, "slave", "NORMAL")
    text = ferrymq(server, "topic", "status", "ha-cli").stdout
    assert "broker-a (slave)" in text and "broker-a: master down, read from slave" in text
