"""Quorum mode of the controller (docs/replication.md, "Three controllers"): several name
servers run the controller against one etcd cluster, which does the consensus. One of them leads:
it holds the leader key, created only if absent and bound to an etcd lease it keeps alive; the
others read the state and answer brokers with the leader's address (CONTROLLER_NOT_LEADER).

The replica state is one etcd key, written only by a transaction that compares the key's last
revision and that the leader key is still the one this controller created: a controller that
lost the lead (its lease expired while it was frozen or cut off) cannot write, whatever it
believes. It also stops answering before etcd can let another lead: its lead is trusted only
until `lease_ttl_s * LEAD_TRUST` after the send of its last answered keepalive, and etcd expires
the lease no earlier than `lease_ttl_s` after receiving it."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from ..common import jsonx
from .controller import ControllerNotLeader, MasterChange, ReplicaController
from .etcd import EtcdClient, EtcdUnavailableError, KeyValue

log = logging.getLogger("ferrymq.namesrv.quorum")

# The share of the lease TTL a leader trusts its lead for after a keepalive was sent: what is
# left covers the two clocks' rates and the time a frozen process needs to notice.
LEAD_TRUST = 0.75
DEFAULT_LEASE_TTL_S = 2
T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class QuorumConfig:
    endpoints: tuple[str, ...]
    prefix: str = "/ferrymq/controller"
    # etcd's smallest TTL with its default timing is 2 s (3/2 of its election timeout); the
    # failover after a leader's death is about this long plus `poll_interval_ms`.
    lease_ttl_s: int = DEFAULT_LEASE_TTL_S
    poll_interval_ms: int = 200
    request_timeout_s: float = 1.0


class EtcdQuorum:
    """The StateBackend of the ReplicaController in quorum mode, and its leader election."""

    def __init__(self, config: QuorumConfig) -> None:
        self.config = config
        self.etcd = EtcdClient(config.endpoints, config.request_timeout_s)
        self.leader_key = f"{config.prefix}/leader"
        self.state_key = f"{config.prefix}/state"
        self.my_addr = ""
        self.controller: ReplicaController | None = None
        self.on_changes: Callable[[list[MasterChange]], None] = lambda changes: None
        self.leader_addr = ""  # who leads, as last read ("" unknown)
        self._leading = False
        self._lease_id = 0
        self._leader_rev = 0  # create revision of our leader key
        self._state_rev = 0  # mod revision of the state key we hold
        self._trusted_until = 0.0
        self._etcd_down = False  # the last round found no etcd endpoint answering
        self._lock = asyncio.Lock()  # one controller call at a time, in a worker thread

    # --- the lead --------------------------------------------------------------------------------
    def leading(self) -> bool:
        return self._leading and time.monotonic() < self._trusted_until

    def not_leader(self) -> ControllerNotLeader:
        other = self.leader_addr if self.leader_addr != self.my_addr else ""
        where = f"the leader is {other}" if other else "no controller leads right now"
        return ControllerNotLeader(f"controller {self.my_addr} is not the leader; {where}", other)

    async def call(self, fn: Callable[..., T], *args: Any) -> T:
        """Run a controller request as the leader; ControllerNotLeader when this one is not."""
        async with self._lock:
            if not self.leading():
                raise self.not_leader()
            return await asyncio.to_thread(fn, *args)

    def save(self, doc: dict[str, Any]) -> None:
        """StateBackend.save, in the worker thread of `call`."""
        if not self.leading():
            raise self.not_leader()
        try:
            rev = self.etcd.put_if(self.state_key, jsonx.dumps_bytes(doc), mod_revision=self._state_rev,
                                   guard_key=self.leader_key, guard_create_revision=self._leader_rev)
        except EtcdUnavailableError as exc:
            # Maybe written, maybe not: the next write's compare tells, and steps down if so.
            raise ControllerNotLeader(f"the controller state was not written: {exc}") from None
        if rev is None:
            self._step_down("the state or the leader key changed under it")
            raise self.not_leader()
        self._state_rev = rev

    def _step_down(self, why: str) -> None:
        if self._leading:
            log.warning("controller %s stops leading: %s", self.my_addr, why)
        self._leading = False
        self._leader_rev = 0

    # --- the loop ------------------------------------------------------------------------------
    async def run(self) -> None:
        while True:
            try:
                if self._leading:
                    await self._renew()
                else:
                    await self._campaign()
                if self._etcd_down:
                    log.warning("controller %s reaches etcd again", self.my_addr)
                    self._etcd_down = False
            except EtcdUnavailableError as exc:
                if self._leading and time.monotonic() >= self._trusted_until:
                    self._step_down(f"etcd unreachable ({exc.reason})")
                # Once per outage: while etcd is unreachable this controller neither leads nor
                # follows, and brokers asking it hear "no controller leads".
                log.log(logging.DEBUG if self._etcd_down else logging.WARNING,
                        "controller %s cannot reach etcd: %s", self.my_addr, exc)
                self._etcd_down = True
            except Exception:
                log.exception("controller quorum round failed")
            if self._leading:
                await asyncio.sleep(self.config.lease_ttl_s / 4)
            else:
                await asyncio.sleep(self.config.poll_interval_ms / 1000)

    async def _renew(self) -> None:
        sent = time.monotonic()
        ttl = await asyncio.to_thread(self.etcd.keepalive, self._lease_id)
        if ttl <= 0:
            self._step_down("its etcd lease expired")
            return
        self._trusted_until = sent + ttl * LEAD_TRUST

    async def _campaign(self) -> None:
        holder = await asyncio.to_thread(self.etcd.get, self.leader_key)
        if holder is None:
            sent = time.monotonic()
            lease_id, ttl = await asyncio.to_thread(self.etcd.grant, self.config.lease_ttl_s)
            won, holder = await asyncio.to_thread(
                self.etcd.create, self.leader_key, jsonx.dumps_bytes({"addr": self.my_addr}), lease_id)
            if won and holder is not None:
                await self._take_lead(lease_id, holder.create_revision, sent + ttl * LEAD_TRUST)
                return
            with contextlib.suppress(EtcdUnavailableError):
                await asyncio.to_thread(self.etcd.revoke, lease_id)
        self.leader_addr = _holder_addr(holder)
        await self.refresh()

    async def _take_lead(self, lease_id: int, leader_rev: int, trusted_until: float) -> None:
        assert self.controller is not None
        kv = await asyncio.to_thread(self.etcd.get, self.state_key)
        async with self._lock:
            self.controller.take_over(_doc(kv))
            self._state_rev = kv.mod_revision if kv is not None else 0
            self._lease_id, self._leader_rev, self._trusted_until = lease_id, leader_rev, trusted_until
            self.leader_addr = self.my_addr
            self._leading = True
        log.warning("controller %s leads (etcd revision %d)", self.my_addr, leader_rev)

    async def refresh(self) -> None:
        """A follower copies the state the leader wrote, when it changed."""
        if self._leading or self.controller is None:
            return
        kv = await asyncio.to_thread(self.etcd.get, self.state_key)
        rev = kv.mod_revision if kv is not None else 0
        if rev == self._state_rev:
            return
        async with self._lock:
            changes = self.controller.follow(_doc(kv))
            self._state_rev = rev
        self.on_changes(changes)

    async def close(self) -> None:
        """Give the lead up at once (a stop, not a crash): the others need not wait out the lease."""
        if self._leading:
            self._leading = False
            with contextlib.suppress(EtcdUnavailableError):
                await asyncio.to_thread(self.etcd.revoke, self._lease_id)


def _holder_addr(kv: KeyValue | None) -> str:
    if kv is None:
        return ""
    try:
        return str(jsonx.loads(kv.value).get("addr", ""))
    except (ValueError, AttributeError):
        return ""


def _doc(kv: KeyValue | None) -> dict[str, Any]:
    if kv is None or not kv.value:
        return {}
    doc = jsonx.loads(kv.value)
    return doc if isinstance(doc, dict) else {}
