"""`ferrymq cluster elect-master` against a real controller-mode group (a name server with the
controller and two broker processes): refused while the replica is not in sync, then the
replica becomes master and the old master a slave following it. Its own processes: controller
mode is needed, which no other CLI test module runs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from cli_util import ferrymq_at, json_at

from ferrymq.embedded import start_cluster
from waits import wait_until


def test_elect_master_moves_the_master_to_an_in_sync_replica(tmp_path: Path) -> None:
    with start_cluster(tmp_path, slaves=1, role="SYNC_MASTER", controller=True, controller_lease_ms=2000,
                       broker_config={"controller_heartbeat_interval_ms": 200, "ha_heartbeat_interval_ms": 100,
                                      "ha_slave_sync_interval_ms": 200}) as cluster:
        old = cluster.wait_master()
        replica = next(b for b in cluster.brokers if b is not old)
        ns = cluster.namesrv.addr

        def elect() -> Any:
            code, out, _ = ferrymq_at(ns, "cluster", "elect-master", "broker-a", "--broker-id",
                                              str(replica.broker_id), "--json")
            doc = json.loads(out.strip().splitlines()[-1])
            if code != 0:
                # Refused until the replica has caught up and joined the sync state set.
                assert doc["error"]["code_name"] == "CONTROLLER_ELECT_MASTER_FAILED", doc
                assert "not in the sync state set" in doc["error"]["message"]
                return None
            return doc

        elected = wait_until(elect, what="the replica to be in sync and elected")
        assert (elected["master_id"], elected["master_addr"]) == (replica.broker_id, replica.addr)
        assert elected["sync_state_set"] == [replica.broker_id] and elected["controller"] == ns
        assert cluster.wait_master(30, not_addr=old.addr) is replica

        def roles() -> Any:
            rows = {r["addr"]: r["broker_role"] for r in json_at(ns, "cluster", "list")}
            return rows.get(old.addr) == "SLAVE" and rows.get(replica.addr) == "SYNC_MASTER" and rows

        wait_until(roles, what="the old master to follow the elected one")
        err = json_at(ns, "cluster", "elect-master", "broker-a", "--broker-id", "9", exit_code=1)["error"]
        assert err["code_name"] == "CONTROLLER_INVALID_REQUEST" and "no replica 9" in err["message"]
