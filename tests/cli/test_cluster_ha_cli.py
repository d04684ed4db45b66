"""`ferrymq cluster list` on a real SYNC_MASTER and its slave (separate processes): each
broker's role and its replication state, in the table and in --json."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

from cli_util import ferrymq, json_out

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

        master.kill()
        (alone,) = wait_until(
            lambda: (r := list(rows(server).values())) and len(r) == 1
            and r[0]["replication"]["ha_connected"] is False and r,
            timeout=30, what="the dead master to leave the list and the slave to notice",
        )
        assert alone["broker_id"] == 1
        assert "no" in ferrymq(server, "cluster", "list").stdout.split(slave.addr, 1)[1].splitlines()[0]
