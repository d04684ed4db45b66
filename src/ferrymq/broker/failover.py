"""Controller mode (docs/replication.md, "Controller"): a broker heartbeats to the controller
and takes the role each answer gives it; as master it changes the in-sync set only through the
controller, so every replica the controller may elect has every acknowledged message."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import TYPE_CHECKING, Any, Protocol

from ..common import jsonx
from ..common.codes import CONTROLLER_LEADER_FIELD, RequestCode, ResponseCode
from ..remoting import RemotingCommand, RemotingError
from .roles import MASTER, SLAVE, UNDECIDED

if TYPE_CHECKING:
    from ..ha import HaMaster
    from .core import ReplicatedBroker

log = logging.getLogger("ferrymq.broker.failover")


class Replica(Protocol):
    """The broker's replication (replication.py), as the agent drives it."""

    role: str  # MASTER, SLAVE or UNDECIDED (roles.py)

    @property
    def epoch(self) -> int: ...

    @property
    def ha_addr(self) -> str: ...

    @property
    def master_ha_addr(self) -> str: ...

    @property
    def master(self) -> HaMaster | None:
        """The HA server every broker runs (it serves slaves while the broker is the master)."""

    def become_master(self, epoch: int) -> None: ...

    def become_slave(self, master_ha_addr: str, master_addr: str) -> None: ...

    def drop_slaves(self) -> None: ...


class ControllerAgent:
    def __init__(self, broker: ReplicatedBroker, replication: Replica) -> None:
        self.broker = broker
        self.rep = replication
        cfg = broker.config
        self.addrs = [a.strip() for a in cfg.controller_addr.split(";") if a.strip()]
        self.interval = cfg.controller_heartbeat_interval_ms / 1000
        self.lease_ms = cfg.controller_lease_ms
        self.last_ok = 0.0  # monotonic time of the send of the last answered heartbeat
        self.sync_state_set: set[int] = set()
        self.sync_state_set_epoch = 0
        self.master_id = -1
        self._task: asyncio.Task[None] | None = None
        self._alter_lock = asyncio.Lock()
        self._pending: set[asyncio.Task[None]] = set()
        self._stopped = False
        self._leader = ""  # the controller that answered last (quorum mode: the leader)

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name="ferrymq-controller-agent")

    async def stop(self) -> None:
        # A stopping master closes its slaves' links: that must not shrink the in-sync set,
        # or the controller would have no replica to elect in its place.
        self._stopped = True
        for task in [self._task, *self._pending]:
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task

    # --- lease -------------------------------------------------------------------------------
    def fenced(self) -> str:
        """Why this master must not take writes now: the controller may have elected another."""
        if self.rep.role != MASTER:
            return ""
        silent_ms = (time.monotonic() - self.last_ok) * 1000
        if silent_ms > self.lease_ms:
            return (f"the broker has not heard from the controller for {silent_ms:.0f} ms (lease "
                    f"{self.lease_ms} ms); it takes no writes until the controller confirms it")
        return ""

    # --- heartbeats --------------------------------------------------------------------------
    async def _call(self, code: RequestCode, body: dict[str, Any]) -> RemotingCommand:
        """Ask the controller that led last first, then the others in turn. One that does not
        lead (quorum mode) answers CONTROLLER_NOT_LEADER naming the leader, which is asked next,
        as RocketMQ's brokers follow the controller leader."""
        last: Exception | None = None
        refused: RemotingCommand | None = None
        order = ([self._leader] if self._leader else []) + [a for a in self.addrs if a != self._leader]
        tried: set[str] = set()
        while order:
            addr = order.pop(0)
            if addr in tried:
                continue
            tried.add(addr)
            req = RemotingCommand.request(code, body=jsonx.dumps_bytes(body))
            try:
                resp = await self.broker.namesrv_client.invoke(addr, req, timeout=max(1.0, self.interval * 2))
            except RemotingError as exc:
                last = exc
                continue
            if resp.code != ResponseCode.CONTROLLER_NOT_LEADER:
                self._leader = addr
                return resp
            refused = resp
            leader = resp.ext_fields.get(CONTROLLER_LEADER_FIELD) or ""
            if leader and leader not in tried:
                order.insert(0, leader)
        if refused is not None:
            return refused
        raise last or RemotingError("no controller address")

    async def _run(self) -> None:
        while True:
            try:
                await self.beat()
            except RemotingError as exc:
                log.warning("controller heartbeat failed: %s", exc)
            except Exception:
                log.exception("controller heartbeat failed")
            await asyncio.sleep(self.interval)

    async def beat(self) -> None:
        broker, store = self.broker, self.broker.store
        assert store is not None
        cfg = broker.config
        sent = time.monotonic()
        resp = await self._call(RequestCode.BROKER_HEARTBEAT, {
            "clusterName": cfg.broker_cluster_name, "brokerName": cfg.broker_name,
            "brokerId": cfg.broker_id, "brokerAddr": broker.addr, "haAddr": self.rep.ha_addr,
            "maxOffset": store.max_phy_offset, "epoch": store.replica.epochs.last_epoch,
        })
        if resp.code != ResponseCode.SUCCESS:
            log.warning("controller %s refused the heartbeat: %s", self._leader or ";".join(self.addrs),
                        _refusal(resp))
            return
        self.last_ok = sent
        await self.apply(jsonx.loads(resp.body or b"{}"))

    async def apply(self, answer: dict[str, Any]) -> None:
        me = self.broker.config.broker_id
        lease = answer.get("leaseMs")
        if isinstance(lease, int) and lease > 0:
            self.lease_ms = min(self.broker.config.controller_lease_ms, lease)
        master_id = int(answer.get("masterId", -1))
        epoch = int(answer.get("epoch", 0))
        self.master_id = master_id
        self._take_set(answer)
        rep = self.rep
        changed = False
        if master_id == me:
            if rep.role != MASTER or rep.epoch != epoch:
                rep.become_master(epoch)
                changed = True
            self._wait_for_set()
        elif master_id > 0:
            ha, addr = str(answer.get("masterHaAddr") or ""), str(answer.get("masterAddr") or "")
            if rep.role != SLAVE or rep.master_ha_addr != ha:
                rep.become_slave(ha, addr)
                changed = True
        elif rep.role == MASTER:
            # The controller has no master for the group: this broker is not it any more.
            rep.role = UNDECIDED
            self.broker.stop_master_services()
            rep.drop_slaves()
            changed = True
        if changed:
            log.info("controller: %s is now %s (epoch %d, master %d)", self.broker.config.broker_name,
                     rep.role, epoch, master_id)
            await self.broker.register_once()

    def _take_set(self, answer: dict[str, Any]) -> None:
        ss_epoch = int(answer.get("syncStateSetEpoch", 0))
        if ss_epoch >= self.sync_state_set_epoch:
            self.sync_state_set_epoch = ss_epoch
            self.sync_state_set = {int(i) for i in answer.get("syncStateSet") or []}

    def _wait_for_set(self) -> None:
        """Every replica the controller counts in sync may be elected: wait for each of them."""
        m = self.rep.master
        if m is None:
            return
        others = self.sync_state_set - {self.broker.config.broker_id}
        if not others <= m.wait_set:
            m.wait_set |= others
        m.in_sync = set(others)
        m.set_changed()

    # --- the in-sync set, changed through the controller ----------------------------------
    def join(self, slave_id: int) -> None:
        self._spawn(self._alter(add=slave_id))

    def leave(self, slave_id: int) -> None:
        self._spawn(self._alter(remove=slave_id))

    def _spawn(self, coro: Any) -> None:
        if self._stopped:
            coro.close()
            return
        task = asyncio.get_running_loop().create_task(coro)
        self._pending.add(task)
        task.add_done_callback(self._pending.discard)

    async def _alter(self, add: int = -1, remove: int = -1) -> None:
        async with self._alter_lock:
            rep, m = self.rep, self.rep.master
            me = self.broker.config.broker_id
            while rep.role == MASTER and m is not None:
                wanted = set(self.sync_state_set)
                if add >= 0:
                    if add in wanted or add not in m.links:
                        break
                    wanted.add(add)
                if remove >= 0:
                    if remove not in wanted:
                        break
                    wanted.discard(remove)
                try:
                    resp = await self._call(RequestCode.CONTROLLER_ALTER_SYNC_STATE_SET, {
                        "brokerName": self.broker.config.broker_name, "masterId": me,
                        "epoch": rep.epoch, "syncStateSetEpoch": self.sync_state_set_epoch,
                        "syncStateSet": sorted(wanted | {me}),
                    })
                except RemotingError as exc:
                    log.warning("changing the in-sync set failed (%s); retrying", exc)
                    await asyncio.sleep(self.interval)
                    continue
                if resp.code == ResponseCode.SUCCESS:
                    self._take_set(jsonx.loads(resp.body or b"{}"))
                    break
                if resp.code == ResponseCode.CONTROLLER_FENCED_SYNC_STATE_SET_EPOCH:
                    await self.beat()  # refresh the set and its epoch, then try again
                    continue
                log.warning("controller refused the in-sync set change: %s", resp.remark)
                return
            if m is None or rep.role != MASTER:
                # Demoted while the change was being asked for: the sets were cleared and the
                # read gate stays as demote() left it (this log may yet be cut).
                return
            if remove >= 0 and remove not in self.sync_state_set:
                # Only now, with the controller agreeing, stop waiting for it.
                m.wait_set.discard(remove)
                link = m.links.get(remove)
                if link is not None:
                    link.join_end = -1
                    link.in_sync = False
            m.in_sync = self.sync_state_set - {me}
            m.set_changed()
            log.info("in-sync set of %s: %s", self.broker.config.broker_name,
                     sorted(self.sync_state_set))


def _refusal(resp: RemotingCommand) -> str:
    if resp.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED:
        # A name server started without --enable-controller answers this to every controller
        # request: the broker would otherwise wait for a role forever, told only "request type
        # 904 not supported".
        return ("it runs no controller (REQUEST_CODE_NOT_SUPPORTED): start that name server with "
                "--enable-controller, or give --controller the address of one that runs it")
    return resp.remark or f"response code {resp.code}"
