"""Fault runs against a real broker group (name server, master, slaves: separate processes):
producers and a push consumer work while a schedule kills, freezes, restarts or partitions;
then everything is healed, the consumer drained, and the checker run.

Oracles: SYNC_MASTER (static roles or controller) loses no acknowledged message in any
schedule; ASYNC_MASTER may, and its loss window is reported. Nothing may arrive that was never
sent, and the cluster must take sends again after every repair.

`make test` runs a short set; `make chaos` (FERRYMQ_CHAOS_LONG=1) every mode and schedule,
more rounds, longer faults."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import pytest
from faults import SCHEDULES, Target, run_schedule
from proxy import TcpProxy
from workload import Workload

from etcd_cluster import EtcdCluster
from ferrymq.embedded import BrokerProcess, LocalCluster, start_cluster

LONG = os.environ.get("FERRYMQ_CHAOS_LONG") == "1"
ROUNDS = 4 if LONG else 1
GAP_S = 3.0 if LONG else 1.0
SCALE = 2.0 if LONG else 1.0
LEASE_MS = 1000

pytestmark = [pytest.mark.chaos, pytest.mark.slow, pytest.mark.timeout(900 if LONG else 120)]

# Short intervals everywhere a failover waits, so a round takes seconds.
BROKER_CONFIG: dict[str, str | int | float | bool] = {
    "register_broker_interval_ms": 500,
    "ha_slave_sync_interval_ms": 300,
    "ha_heartbeat_interval_ms": 200,
    "controller_heartbeat_interval_ms": 200,
    "sync_flush_timeout_ms": 1500,
}


@dataclass(frozen=True, slots=True)
class Mode:
    role: str
    controller: bool
    zero_loss: bool
    # The brokers' own lease (controller_lease_ms) when not the controller's: a longer one lets
    # a frozen old master take writes after its replacement, which it must then not acknowledge.
    broker_lease_ms: int | None = None
    # Three name servers whose controllers agree through a 3-member etcd cluster.
    quorum: bool = False


MODES = {
    "sync-static": Mode("SYNC_MASTER", False, True),
    "sync-controller": Mode("SYNC_MASTER", True, True),
    "sync-ctl-longlease": Mode("SYNC_MASTER", True, True, broker_lease_ms=3 * LEASE_MS),
    "async-static": Mode("ASYNC_MASTER", False, False),
    "async-controller": Mode("ASYNC_MASTER", True, False),
    "sync-quorum": Mode("SYNC_MASTER", True, True, quorum=True),
}
SHORT = [
    ("sync-static", "kill-master"),
    ("sync-static", "kill-slave"),
    ("sync-static", "partition-ha"),
    ("sync-static", "restart-all"),
    ("sync-controller", "kill-master"),
    ("sync-controller", "pause-master"),
    ("sync-controller", "restart-all"),
    ("sync-ctl-longlease", "pause-master"),
    ("async-controller", "kill-master"),
    ("sync-quorum", "kill-ctl-leader-master"),
]
EVERY = [
    (m, s) for m, mode in MODES.items() for s, sched in SCHEDULES.items()
    if not (sched.static_only and mode.controller) and (mode.broker_lease_ms is None or s == "pause-master")
    and (mode.quorum or not sched.quorum_only)
]


def diagnostics(cluster: LocalCluster, workload: Workload, base: Path) -> str:
    lines = [f"processes' logs under {base / 'logs'}", "timeline (ms since start):"]
    lines += [f"  {t:8.0f} {what}" for t, what in workload.timeline()]
    lines.append(f"send errors: {dict(workload.ledger.send_errors)}")
    result = workload.result()
    for mid in result.lost[:10]:
        lines.append(f"lost {mid}: its send started at {workload.ledger.send_ms[mid]:.0f} ms")
    for p in cluster.processes:
        lines.append(f"--- {p!r} log tail:\n{p.log_tail(25)}")
    return "\n".join(lines)


@pytest.mark.parametrize(("mode_name", "schedule_name"), EVERY if LONG else SHORT,
                         ids=[f"{m}-{s}" for m, s in (EVERY if LONG else SHORT)])
def test_chaos(tmp_path: Path, mode_name: str, schedule_name: str, run_report: list[str]) -> None:
    mode, schedule = MODES[mode_name], SCHEDULES[schedule_name]
    base = tmp_path / "cluster"
    proxy = TcpProxy("").start() if schedule.static_only else None

    def through_proxy(slave: BrokerProcess) -> str:
        assert proxy is not None
        proxy.target = slave.cluster.static_master().ha_addr
        return proxy.addr

    broker_config = dict(BROKER_CONFIG)
    if mode.broker_lease_ms is not None:
        broker_config["controller_lease_ms"] = mode.broker_lease_ms
    etcd = EtcdCluster(tmp_path / "etcd").start_all() if mode.quorum else None
    quorum = ["--controller-etcd", ",".join(etcd.endpoints)] if etcd is not None else []
    try:
        cluster = start_cluster(base, slaves=1, role=mode.role, controller=mode.controller,
                                controller_lease_ms=LEASE_MS, broker_config=broker_config,
                                master_ha_addr=through_proxy if proxy is not None else None,
                                namesrvs=3 if etcd is not None else 1, namesrv_extra=quorum)
    except BaseException:
        if etcd is not None:
            etcd.close()
        raise
    workload = Workload(cluster.namesrv_addrs)
    target = Target(cluster, proxy, LEASE_MS / 1000, etcd=etcd)
    try:
        workload.create_topic()
        workload.start_consumer()
        workload.start_producers()
        assert workload.wait_acked(50, 30), "no load before the faults\n" + diagnostics(cluster, workload, base)
        problems = run_schedule(target, workload, schedule, rounds=ROUNDS, gap_s=GAP_S, scale=SCALE)

        cluster.heal()
        if proxy is not None:
            proxy.heal()
        workload.mark("healed")
        if not workload.wait_acked(workload.acked_count(), 30):
            problems.append("no send acknowledged within 30s after healing everything")
        workload.stop_producers()
        workload.mark("producers stopped")
        drained = workload.drain(30)
        workload.mark("drained" if drained else "drain deadline passed")
        result = workload.result()
    finally:
        workload.close()
        cluster.close()
        if proxy is not None:
            proxy.close()
        if etcd is not None:
            etcd.close()

    oracle = "lost must be 0" if mode.zero_loss else "loss reported"
    failovers = f" failover_s={[round(s, 2) for s in target.failovers]}" if target.failovers else ""
    run_report.append(f"{mode_name:17} {schedule_name:13} [{oracle}] {result.summary()} "
                        f"send_errors={dict(workload.ledger.send_errors)}{failovers}")
    diag = f"{result.summary()}\n{diagnostics(cluster, workload, base)}"
    assert not problems, f"{problems}\n{diag}"
    assert not result.unexpected, f"messages never sent were received\n{diag}"
    assert result.acked > 0
    if proxy is not None:
        # The slave did copy through the proxy, and came back through it after every cut.
        assert proxy.cuts == ROUNDS and proxy.accepted >= ROUNDS + 1, (proxy.cuts, proxy.accepted)
    if mode.zero_loss:
        assert not result.lost, f"{mode.role} lost acknowledged messages\n{diag}"
