"""A designated election (CONTROLLER_ELECT_MASTER, mqadmin electMaster) in the controller's
state machine with an injected clock: only an alive replica of the sync state set; the old
master is told to follow at its next heartbeat, and the choice is durable."""

from __future__ import annotations

from pathlib import Path

import pytest

from ferrymq.namesrv.controller import ElectionRefused, Heartbeat, InvalidControllerRequest, ReplicaController

LEASE = 3000


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000

    def __call__(self) -> int:
        return self.now


def hb(broker_id: int, epoch: int = 0) -> Heartbeat:
    return Heartbeat("C", "b", broker_id, f"127.0.0.1:{10910 + broker_id}", f"127.0.0.1:{20910 + broker_id}",
                     0, epoch)


def test_only_an_alive_in_sync_replica_is_elected_and_the_old_master_follows(tmp_path: Path) -> None:
    clock = Clock()
    c = ReplicaController(tmp_path, lease_ms=LEASE, clock=clock)
    for i in (1, 2, 3):
        c.heartbeat(hb(i))
    c.alter_sync_state_set("b", 1, 1, 1, [1, 2])
    c.take_changes()
    with pytest.raises(ElectionRefused, match="not in the sync state set"):
        c.elect("b", 3)
    with pytest.raises(InvalidControllerRequest, match="no replica 9"):
        c.elect("b", 9)
    with pytest.raises(InvalidControllerRequest, match="unknown broker group"):
        c.elect("nope", 2)
    assert c.elect("b", 1).epoch == 1  # the master already: nothing changes
    assert c.take_changes() == []

    view = c.elect("b", 2)
    assert (view.master_id, view.epoch, view.sync_state_set, view.master_addr) == (2, 2, (2,), "127.0.0.1:10912")
    (change,) = c.take_changes()
    assert (change.old_master_addr, change.new_master_id) == ("127.0.0.1:10911", 2)
    assert c.heartbeat(hb(1, epoch=1)).master_id == 2  # the old master hears it is not master
    assert ReplicaController(tmp_path, lease_ms=LEASE, clock=clock).view("b") == c.view("b")

    clock.now += LEASE + 1
    c.heartbeat(hb(2, epoch=2))
    c.alter_sync_state_set("b", 2, 2, 3, [1, 2])
    with pytest.raises(ElectionRefused, match="not alive"):
        c.elect("b", 1)  # silent for over the lease
