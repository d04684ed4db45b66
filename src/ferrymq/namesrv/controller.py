"""The controller of controller mode (docs/replication.md, "Controller"): which replica of each
broker group is the master, at which epoch, and which replicas are in sync with it.

A state machine without networking or timers: the name server feeds it heartbeats, sync state
set changes and periodic scans, with the time from an injected clock, and applies the master
changes it returns to the routes. The durable part (masters, epochs, sets, replica addresses)
is written to `controller.json` before any answer depends on it, so a restarted controller
never elects a replica that had left the sync state set."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from ..common import jsonx
from ..common.durable import atomic_write
from ..common.errors import FerryMQError
from ..common.paths import StrPath, as_path

STATE_FILE = "controller.json"
_FORMAT_VERSION = 1
NO_MASTER = -1


class ControllerError(FerryMQError):
    """A request the controller refuses; `remark` is what the caller is told."""

    def __init__(self, remark: str) -> None:
        super().__init__(remark)
        self.remark = remark


class InvalidControllerRequest(ControllerError):
    pass


class ControllerNotLeader(ControllerError):
    """Quorum mode: this controller does not lead (or just lost the lead), so it neither
    changes nor answers the replica state; `leader_addr` is the one that leads, "" if unknown."""

    def __init__(self, remark: str, leader_addr: str = "") -> None:
        super().__init__(remark)
        self.leader_addr = leader_addr


class ElectionRefused(ControllerError):
    """A designated election (CONTROLLER_ELECT_MASTER) of a replica that may not be master."""


class StateBackend(Protocol):
    """Where the durable state goes instead of controller.json (quorum mode: etcd). `save`
    raises ControllerNotLeader when the state may not be written (any more)."""

    def save(self, doc: dict[str, Any]) -> None: ...


class FencedMasterEpoch(ControllerError):
    def __init__(self, broker_name: str, master_id: int, epoch: int, current_master: int, current_epoch: int):
        super().__init__(
            f"broker group {broker_name!r}: replica {master_id} at epoch {epoch} is not the master "
            f"(the master is {current_master} at epoch {current_epoch})"
        )
        self.broker_name = broker_name
        self.master_id = master_id
        self.epoch = epoch
        self.current_master = current_master
        self.current_epoch = current_epoch


class FencedSyncStateSetEpoch(ControllerError):
    def __init__(self, broker_name: str, sync_state_set_epoch: int, current: int) -> None:
        super().__init__(
            f"broker group {broker_name!r}: sync state set epoch {sync_state_set_epoch} is stale "
            f"(the current one is {current})"
        )
        self.broker_name = broker_name
        self.sync_state_set_epoch = sync_state_set_epoch
        self.current = current


class ControllerStateError(FerryMQError):
    """The state file exists but cannot be used; starting without it could elect a replica
    that is out of sync, so the controller refuses to start."""

    def __init__(self, path: Path, reason: str) -> None:
        super().__init__(f"controller state {path}: {reason}")
        self.path = path
        self.reason = reason


@dataclass(frozen=True, slots=True)
class Heartbeat:
    cluster_name: str
    broker_name: str
    broker_id: int
    broker_addr: str
    ha_addr: str
    max_offset: int
    epoch: int


@dataclass(slots=True)
class Replica:
    broker_id: int
    addr: str
    ha_addr: str
    last_heartbeat_ms: int
    max_offset: int = 0
    epoch: int = 0
    # False until the replica heartbeats to this controller process: only then is its maxOffset
    # known, so only then can it be elected.
    heard: bool = False


@dataclass(slots=True)
class Group:
    cluster_name: str
    broker_name: str
    replicas: dict[int, Replica] = field(default_factory=dict)
    master_id: int = NO_MASTER
    epoch: int = 0
    sync_state_set: set[int] = field(default_factory=set)
    sync_state_set_epoch: int = 0


@dataclass(frozen=True, slots=True)
class GroupView:
    """What a replica is told: the answer to a heartbeat or a sync state set change."""

    broker_name: str
    epoch: int
    master_id: int
    master_addr: str
    master_ha_addr: str
    sync_state_set: tuple[int, ...]
    sync_state_set_epoch: int

    def to_json(self) -> dict[str, Any]:
        return {
            "epoch": self.epoch,
            "masterId": self.master_id,
            "masterAddr": self.master_addr,
            "masterHaAddr": self.master_ha_addr,
            "syncStateSet": list(self.sync_state_set),
            "syncStateSetEpoch": self.sync_state_set_epoch,
        }


@dataclass(frozen=True, slots=True)
class MasterChange:
    """A group's master changed: the name server drops `old_master_addr` from the route at once.
    `new_master_id` is NO_MASTER when no in-sync replica was alive."""

    broker_name: str
    old_master_id: int
    old_master_addr: str
    new_master_id: int
    new_master_addr: str
    epoch: int


def _monotonic_ms() -> int:
    return int(time.monotonic() * 1000)


class ReplicaController:
    def __init__(
        self,
        state_dir: StrPath,
        *,
        lease_ms: int = 3000,
        clock: Callable[[], int] = _monotonic_ms,
        backend: StateBackend | None = None,
    ) -> None:
        """With a `backend` the state is not read from `state_dir` but handed in by
        `take_over` (and `follow`) and written through the backend."""
        if lease_ms <= 0:
            raise ValueError(f"controller lease must be positive, got {lease_ms} ms")
        self.path = as_path(state_dir) / STATE_FILE
        self.lease_ms = lease_ms
        self._clock = clock
        self.groups: dict[str, Group] = {}
        self._saved: dict[str, Any] = {}
        self._changes: list[MasterChange] = []
        self._backend = backend
        if backend is None:
            self._load()
        else:
            self._saved = self._snapshot()

    # --- requests -------------------------------------------------------------------------------
    def heartbeat(self, hb: Heartbeat) -> GroupView:
        _check_heartbeat(hb)
        now = self._clock()
        g = self.groups.get(hb.broker_name)
        if g is not None and g.cluster_name != hb.cluster_name:
            raise InvalidControllerRequest(
                f"broker group {hb.broker_name!r} belongs to cluster {g.cluster_name!r}, "
                f"not {hb.cluster_name!r}"
            )
        with self._transaction():
            if g is None:
                g = self.groups[hb.broker_name] = Group(hb.cluster_name, hb.broker_name)
                # Epoch 1 for a new group; past the replica's own epoch when it already has one
                # (a controller that lost its directory), so epochs never go backwards.
                g.epoch = max(1, hb.epoch + 1)
                g.master_id = hb.broker_id
                g.sync_state_set = {hb.broker_id}
                g.sync_state_set_epoch = 1
                self._changes.append(
                    MasterChange(hb.broker_name, NO_MASTER, "", hb.broker_id, hb.broker_addr, g.epoch)
                )
            r = g.replicas.get(hb.broker_id)
            if r is None:
                r = g.replicas[hb.broker_id] = Replica(hb.broker_id, hb.broker_addr, hb.ha_addr, now)
            r.addr, r.ha_addr = hb.broker_addr, hb.ha_addr
            r.last_heartbeat_ms, r.max_offset, r.epoch, r.heard = now, hb.max_offset, hb.epoch, True
            self._elect_if_needed(g, now)
        return _view(g)

    def alter_sync_state_set(
        self, broker_name: str, master_id: int, epoch: int, sync_state_set_epoch: int, new_set: Iterable[int]
    ) -> GroupView:
        """Accepted only from the current master at the current epochs; the answer carries the
        new syncStateSetEpoch (the current one when the set is unchanged)."""
        wanted = set(new_set)
        g = self.groups.get(broker_name)
        if g is None:
            raise InvalidControllerRequest(f"unknown broker group {broker_name!r}")
        with self._transaction():
            # A master whose lease ran out is fenced even before the next scan replaces it.
            self._elect_if_needed(g, self._clock())
        if master_id != g.master_id or epoch != g.epoch:
            raise FencedMasterEpoch(broker_name, master_id, epoch, g.master_id, g.epoch)
        if sync_state_set_epoch != g.sync_state_set_epoch:
            raise FencedSyncStateSetEpoch(broker_name, sync_state_set_epoch, g.sync_state_set_epoch)
        if master_id not in wanted:
            raise InvalidControllerRequest(
                f"broker group {broker_name!r}: the sync state set {sorted(wanted)} must contain the master {master_id}"
            )
        unknown = sorted(wanted - set(g.replicas))
        if unknown:
            raise InvalidControllerRequest(
                f"broker group {broker_name!r}: unknown replicas {unknown} in the sync state set"
            )
        if wanted != g.sync_state_set:
            with self._transaction():
                g.sync_state_set = wanted
                g.sync_state_set_epoch += 1
        return _view(g)

    def elect(self, broker_name: str, broker_id: int) -> GroupView:
        """Make `broker_id` the group's master now (mqadmin electMaster). Only a replica an
        automatic election could pick: alive and in the sync state set, so it holds every
        acknowledged message. The master it replaces learns at its next heartbeat and follows
        it; electing the master changes nothing."""
        g = self.groups.get(broker_name)
        if g is None:
            raise InvalidControllerRequest(f"unknown broker group {broker_name!r}")
        r = g.replicas.get(broker_id)
        if r is None:
            raise InvalidControllerRequest(
                f"broker group {broker_name!r} has no replica {broker_id} (replicas: {sorted(g.replicas)})")
        if not self._alive(r, self._clock()):
            raise ElectionRefused(f"broker group {broker_name!r}: replica {broker_id} is not alive "
                                  f"(no heartbeat within the {self.lease_ms} ms lease)")
        if broker_id not in g.sync_state_set:
            raise ElectionRefused(
                f"broker group {broker_name!r}: replica {broker_id} is not in the sync state set "
                f"{sorted(g.sync_state_set)}, it may lack acknowledged messages")
        if broker_id == g.master_id:
            return _view(g)
        old = g.replicas.get(g.master_id)
        old_id, old_addr = (old.broker_id, old.addr) if old is not None else (NO_MASTER, "")
        with self._transaction():
            g.master_id = broker_id
            g.epoch += 1
            g.sync_state_set = {broker_id}
            g.sync_state_set_epoch += 1
            self._changes.append(MasterChange(g.broker_name, old_id, old_addr, broker_id, r.addr, g.epoch))
        return _view(g)

    def scan(self, now: int | None = None) -> list[MasterChange]:
        """Replace every master whose lease ran out; run periodically so a dead master is
        replaced within lease + scan interval even when no replica heartbeats."""
        t = self._clock() if now is None else now
        with self._transaction():
            for g in self.groups.values():
                self._elect_if_needed(g, t)
        return self.take_changes()

    def take_changes(self) -> list[MasterChange]:
        """The master changes since the last call, in order, for the routes to follow; a
        request that was refused may still have replaced a master whose lease ran out."""
        changes, self._changes = self._changes, []
        return changes

    # --- queries --------------------------------------------------------------------------------
    def view(self, broker_name: str) -> GroupView | None:
        g = self.groups.get(broker_name)
        return None if g is None else _view(g)

    def master_addr(self, broker_name: str) -> str | None:
        """The address the group's master registers from; "" when it has none; None for a group
        the controller does not manage."""
        g = self.groups.get(broker_name)
        if g is None:
            return None
        r = g.replicas.get(g.master_id)
        return "" if r is None else r.addr

    def replica_info(self, broker_name: str) -> dict[str, Any]:
        g = self.groups.get(broker_name)
        if g is None:
            raise InvalidControllerRequest(f"unknown broker group {broker_name!r}")
        now = self._clock()
        info = _view(g).to_json()
        info["brokerName"] = g.broker_name
        info["clusterName"] = g.cluster_name
        info["replicas"] = [
            {
                "brokerId": r.broker_id,
                "addr": r.addr,
                "haAddr": r.ha_addr,
                "maxOffset": r.max_offset,
                "epoch": r.epoch,
                "alive": self._alive(r, now),
                "inSync": r.broker_id in g.sync_state_set,
            }
            for r in sorted(g.replicas.values(), key=lambda r: r.broker_id)
        ]
        return info

    # --- election -------------------------------------------------------------------------------
    def _alive(self, r: Replica, now: int) -> bool:
        return r.heard and now - r.last_heartbeat_ms <= self.lease_ms

    def _elect_if_needed(self, g: Group, now: int) -> None:
        old = g.replicas.get(g.master_id)
        if old is not None and now - old.last_heartbeat_ms <= self.lease_ms:
            return
        # Only the sync state set: any other replica may lack acknowledged messages.
        candidates = [
            r for i in g.sync_state_set
            if i != g.master_id and (r := g.replicas.get(i)) is not None and self._alive(r, now)
        ]
        old_id, old_addr = (old.broker_id, old.addr) if old is not None else (NO_MASTER, "")
        if not candidates:
            if g.master_id == NO_MASTER:
                return
            # The set is kept: its members still hold every acknowledged message, and the first
            # of them to come back is elected.
            g.master_id = NO_MASTER
            self._changes.append(MasterChange(g.broker_name, old_id, old_addr, NO_MASTER, "", g.epoch))
            return
        best = max(candidates, key=lambda r: (r.max_offset, -r.broker_id))
        g.master_id = best.broker_id
        g.epoch += 1
        g.sync_state_set = {best.broker_id}
        g.sync_state_set_epoch += 1
        self._changes.append(MasterChange(g.broker_name, old_id, old_addr, best.broker_id, best.addr, g.epoch))

    # --- persistence ----------------------------------------------------------------------------
    def _transaction(self) -> _Transaction:
        return _Transaction(self)

    def _snapshot(self) -> dict[str, Any]:
        return {
            "version": _FORMAT_VERSION,
            "groups": {
                name: {
                    "clusterName": g.cluster_name,
                    "epoch": g.epoch,
                    "masterId": g.master_id,
                    "syncStateSet": sorted(g.sync_state_set),
                    "syncStateSetEpoch": g.sync_state_set_epoch,
                    "replicas": {
                        str(r.broker_id): {"addr": r.addr, "haAddr": r.ha_addr}
                        for r in sorted(g.replicas.values(), key=lambda r: r.broker_id)
                    },
                }
                for name, g in sorted(self.groups.items())
            },
        }

    def _persist(self) -> None:
        snap = self._snapshot()
        if snap != self._saved:
            if self._backend is not None:
                self._backend.save(snap)
            else:
                atomic_write(self.path, jsonx.dumps_bytes(snap))
            self._saved = snap

    # --- quorum mode (quorum.py) ----------------------------------------------------------------
    def take_over(self, doc: dict[str, Any]) -> None:
        """Become the leader with the state the quorum holds. Every replica starts unheard with a
        full lease, as after a restart: the old leader may have heard from the master until a
        moment ago, and only a replica heard since can be elected."""
        self.groups = {}
        self._restore(doc, self._clock())
        self._saved = self._snapshot()
        self._changes = []

    def follow(self, doc: dict[str, Any]) -> list[MasterChange]:
        """A follower copies the leader's state (for the routes' id-0 check) and returns the
        master changes since the last copy, so its routes drop replaced masters too."""
        before = {name: self.master_addr(name) or "" for name in self.groups}
        self._restore(doc, self._clock())
        self._saved = self._snapshot()
        changes = []
        for name, g in self.groups.items():
            old_addr, new = before.get(name, ""), g.replicas.get(g.master_id)
            new_addr = new.addr if new is not None else ""
            if old_addr != new_addr:
                changes.append(MasterChange(name, NO_MASTER, old_addr, g.master_id if new else NO_MASTER,
                                            new_addr, g.epoch))
        return changes

    def _rollback(self, changes_before: int) -> None:
        # Never answer from a state the disk does not have: back to what was last written.
        self._restore(self._saved, self._clock())
        del self._changes[changes_before:]

    def _load(self) -> None:
        if not self.path.exists():
            self._saved = self._snapshot()
            return
        try:
            doc = jsonx.loads(self.path.read_bytes())
        except (ValueError, UnicodeDecodeError) as exc:
            raise ControllerStateError(self.path, f"not valid JSON ({exc})") from None
        try:
            self._restore(doc, self._clock())
        except (AttributeError, KeyError, TypeError, ValueError) as exc:
            raise ControllerStateError(self.path, f"malformed ({type(exc).__name__}: {exc})") from None
        self._saved = self._snapshot()

    def _restore(self, doc: dict[str, Any], now: int) -> None:
        if doc and doc.get("version") != _FORMAT_VERSION:
            raise ValueError(f"unsupported version {doc.get('version')!r}")
        groups: dict[str, Group] = {}
        for name, raw in (doc.get("groups") or {}).items():
            g = Group(str(raw["clusterName"]), str(name))
            g.epoch = _int(raw["epoch"])
            g.master_id = _int(raw["masterId"])
            g.sync_state_set = {_int(i) for i in raw["syncStateSet"]}
            g.sync_state_set_epoch = _int(raw["syncStateSetEpoch"])
            for rid, r in raw["replicas"].items():
                old = self.groups.get(name, g).replicas.get(int(rid))
                # Liveness is not kept on disk: after a restart every replica gets a full lease
                # to heartbeat again, so a controller restart alone never moves a master.
                replica = Replica(int(rid), str(r["addr"]), str(r["haAddr"]), now)
                if old is not None:
                    replica.last_heartbeat_ms, replica.max_offset = old.last_heartbeat_ms, old.max_offset
                    replica.epoch, replica.heard = old.epoch, old.heard
                g.replicas[replica.broker_id] = replica
            if g.master_id != NO_MASTER and g.master_id not in g.replicas:
                raise ValueError(f"group {name!r}: master {g.master_id} is not one of its replicas")
            groups[g.broker_name] = g
        self.groups = groups


class _Transaction:
    """Changes made inside are written to disk when the block ends (if there are any)."""

    def __init__(self, controller: ReplicaController) -> None:
        self._c = controller
        self._changes_before = 0

    def __enter__(self) -> None:
        self._changes_before = len(self._c._changes)

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        if exc_type is None:
            try:
                self._c._persist()
            except (OSError, ControllerNotLeader):
                self._c._rollback(self._changes_before)
                raise
        else:
            self._c._rollback(self._changes_before)


def _int(v: object) -> int:
    if isinstance(v, bool) or not isinstance(v, int):
        raise ValueError(f"expected an integer, got {v!r}")
    return v


def _view(g: Group) -> GroupView:
    m = g.replicas.get(g.master_id)
    return GroupView(
        g.broker_name,
        g.epoch,
        g.master_id if m is not None else NO_MASTER,
        m.addr if m is not None else "",
        m.ha_addr if m is not None else "",
        tuple(sorted(g.sync_state_set)),
        g.sync_state_set_epoch,
    )


def _check_heartbeat(hb: Heartbeat) -> None:
    for name, value in (("clusterName", hb.cluster_name), ("brokerName", hb.broker_name),
                        ("brokerAddr", hb.broker_addr), ("haAddr", hb.ha_addr)):
        if not value.strip():
            raise InvalidControllerRequest(f"heartbeat: {name} must not be empty")
    if hb.broker_id < 1:
        raise InvalidControllerRequest(
            f"heartbeat: brokerId must be a replica id >= 1 in controller mode, got {hb.broker_id}"
        )
    if hb.max_offset < 0:
        raise InvalidControllerRequest(f"heartbeat: maxOffset must be >= 0, got {hb.max_offset}")
    if hb.epoch < 0:
        raise InvalidControllerRequest(f"heartbeat: epoch must be >= 0, got {hb.epoch}")
