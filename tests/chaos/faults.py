"""Fault schedules over a LocalCluster: each fault is injected, held, then repaired, for a
number of rounds, while the workload runs; the timeline goes into the workload's ledger."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from proxy import TcpProxy
from workload import Workload

from etcd_cluster import EtcdCluster
from ferrymq.common import jsonx
from ferrymq.common.codes import RequestCode, ResponseCode
from ferrymq.embedded import BrokerProcess, LocalCluster
from ferrymq.embedded.cluster import NamesrvProcess
from ferrymq.remoting import RemotingClient, RemotingCommand

Repair = Callable[[], object]


@dataclass
class Target:
    cluster: LocalCluster
    proxy: TcpProxy | None  # between the (static) slave and the master's HA port
    lease_s: float  # the controller's lease; also how long a freeze must last to matter
    # Seconds from a master's kill until another broker was registered as master (quorum faults).
    failovers: list[float] = field(default_factory=list)
    etcd: EtcdCluster | None = None  # the quorum's etcd cluster (quorum modes)

    def master(self) -> BrokerProcess:
        if self.cluster.controller:
            return self.cluster.wait_master(30.0)
        return self.cluster.static_master()

    def slave(self) -> BrokerProcess:
        if not self.cluster.controller:
            return self.cluster.slaves()[0]
        master = self.master()
        return next(b for b in self.cluster.brokers if b is not master and b.running)


def kill_master(t: Target) -> Repair:
    m = t.master()
    m.kill()
    return m.start


def controller_leader(cluster: LocalCluster) -> NamesrvProcess:
    """The name server whose controller leads (quorum mode): the one that answers the group's
    replica info; the others answer CONTROLLER_NOT_LEADER."""

    async def leads(ns: NamesrvProcess) -> bool:
        client = RemotingClient()
        try:
            req = RemotingCommand.request(RequestCode.CONTROLLER_GET_REPLICA_INFO,
                                          body=jsonx.dumps_bytes({"brokerName": cluster.broker_name}))
            return (await client.invoke(ns.addr, req, 2.0)).code == ResponseCode.SUCCESS
        finally:
            await client.close()

    deadline = time.monotonic() + 30
    while True:
        for ns in cluster.namesrvs:
            if ns.running and asyncio.run(leads(ns)):
                return ns
        if time.monotonic() > deadline:
            raise TimeoutError("no controller leads")
        time.sleep(0.1)


def kill_leader_then_master(t: Target) -> Repair:
    """The controller leader dies, then the master: a new leader must take over and elect the
    slave. The time from the master's kill to the new master's registration is recorded."""
    leader = controller_leader(t.cluster)
    m = t.master()
    leader.kill()
    m.kill()
    killed = time.monotonic()
    t.cluster.wait_master(30.0, not_addr=m.addr)
    t.failovers.append(time.monotonic() - killed)

    def repair() -> None:
        leader.start()
        m.start()

    return repair


def kill_namesrv(t: Target) -> Repair:
    """The first name server (the one clients ask first; maybe the controller leader) dies."""
    ns = t.cluster.namesrvs[0]
    ns.kill()
    return ns.start


def kill_etcd_member(t: Target) -> Repair:
    """The etcd member every controller asks first dies: they move to the next endpoint, and the
    two left are still a majority."""
    if t.etcd is None:
        raise ValueError("kill_etcd_member needs a quorum mode's etcd cluster")
    etcd = t.etcd
    etcd.kill(0)
    return lambda: etcd.start(0)


def kill_slave(t: Target) -> Repair:
    s = t.slave()
    s.kill()
    return s.start


def pause_master(t: Target) -> Repair:
    m = t.master()
    m.pause()
    return m.resume


def restart_all(t: Target) -> Repair:
    t.cluster.crash_all()
    return t.cluster.heal


def partition_ha(t: Target) -> Repair:
    if t.proxy is None:
        raise ValueError("partition_ha needs the slave started behind a proxy")
    t.proxy.cut()
    return t.proxy.heal


@dataclass(frozen=True, slots=True)
class Schedule:
    name: str
    inject: Callable[[Target], Repair]
    # How long the fault is held: seconds plus a multiple of the controller lease.
    hold_s: float
    hold_leases: float = 0.0
    static_only: bool = False  # the proxy can only sit in front of a static slave
    quorum_only: bool = False  # needs several name servers and controllers (a quorum mode)

    def hold(self, lease_s: float, scale: float) -> float:
        return (self.hold_s + self.hold_leases * lease_s) * scale


SCHEDULES = {
    s.name: s
    for s in (
        Schedule("kill-master", kill_master, 1.0, hold_leases=1.5),
        Schedule("kill-slave", kill_slave, 1.5),
        Schedule("pause-master", pause_master, 0.5, hold_leases=2.0),
        Schedule("restart-all", restart_all, 0.2),
        Schedule("partition-ha", partition_ha, 2.0, static_only=True),
        Schedule("kill-ctl-leader-master", kill_leader_then_master, 0.5, quorum_only=True),
        Schedule("kill-namesrv", kill_namesrv, 1.0, hold_leases=1.5, quorum_only=True),
        Schedule("kill-etcd-member", kill_etcd_member, 3.0, quorum_only=True),
    )
}


def run_schedule(target: Target, workload: Workload, schedule: Schedule, *, rounds: int, gap_s: float,
                 scale: float = 1.0, recover_timeout: float = 30.0) -> list[str]:
    """Inject, hold, repair `rounds` times with `gap_s` of normal running before each; after
    each repair, wait until sends are acknowledged again. Returns what did not recover (a
    round whose cluster took no send within `recover_timeout`)."""
    problems: list[str] = []
    for i in range(rounds):
        time.sleep(gap_s)  # normal running between faults: a duration, not a wait for a state
        workload.mark(f"{schedule.name} #{i}: inject")
        repair = schedule.inject(target)
        time.sleep(schedule.hold(target.lease_s, scale))
        repair()
        workload.mark(f"{schedule.name} #{i}: repaired")
        before = workload.acked_count()
        if not workload.wait_acked(before, recover_timeout):
            problems.append(f"round {i}: no send acknowledged within {recover_timeout}s after the repair")
            workload.mark(f"{schedule.name} #{i}: not recovered")
        else:
            workload.mark(f"{schedule.name} #{i}: sends acknowledged again")
    return problems
