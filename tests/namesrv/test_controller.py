"""The controller's state machine with an injected clock: first master, election of the most
advanced alive in-sync replica when the lease runs out, no unclean election, fencing of stale
sync state set changes, and a restart from the state file."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ferrymq.namesrv.controller import (
    NO_MASTER,
    STATE_FILE,
    ControllerStateError,
    FencedMasterEpoch,
    FencedSyncStateSetEpoch,
    Heartbeat,
    InvalidControllerRequest,
    ReplicaController,
)

LEASE = 3000


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000

    def __call__(self) -> int:
        return self.now


def hb(broker_id: int, max_offset: int = 0, epoch: int = 0, name: str = "b") -> Heartbeat:
    return Heartbeat("C", name, broker_id, f"127.0.0.1:{10910 + broker_id}", f"127.0.0.1:{20910 + broker_id}",
                     max_offset, epoch)


def make(tmp_path: Path, clock: Clock) -> ReplicaController:
    return ReplicaController(tmp_path, lease_ms=LEASE, clock=clock)


def three_in_sync(c: ReplicaController) -> None:
    """Replica 1 master; 2 and 3 joined its sync state set."""
    c.heartbeat(hb(1))
    c.heartbeat(hb(2))
    c.heartbeat(hb(3))
    view = c.alter_sync_state_set("b", 1, 1, 1, [1, 2, 3])
    assert view.sync_state_set == (1, 2, 3) and view.sync_state_set_epoch == 2


def test_first_replica_heard_becomes_master_at_epoch_1(tmp_path: Path) -> None:
    c = make(tmp_path, Clock())
    view = c.heartbeat(hb(2))
    assert view.to_json() == {"epoch": 1, "masterId": 2, "masterAddr": "127.0.0.1:10912",
                              "masterHaAddr": "127.0.0.1:20912", "syncStateSet": [2], "syncStateSetEpoch": 1}
    # The next replica is told who the master is and is not in the set.
    view = c.heartbeat(hb(1))
    assert (view.master_id, view.epoch, view.sync_state_set) == (2, 1, (2,))
    assert [ch.new_master_id for ch in c.take_changes()] == [2]
    assert c.master_addr("b") == "127.0.0.1:10912" and c.master_addr("other") is None


def test_expired_master_replaced_by_in_sync_replica_with_largest_offset(tmp_path: Path) -> None:
    clock = Clock()
    c = make(tmp_path, clock)
    three_in_sync(c)
    c.take_changes()
    clock.now += 1000
    c.heartbeat(hb(2, max_offset=500))
    c.heartbeat(hb(3, max_offset=900))
    clock.now += LEASE  # master 1 last heard LEASE + 1000 ago; 2 and 3 just within the lease
    assert c.scan() != []
    view = c.view("b")
    assert view is not None
    assert (view.master_id, view.epoch, view.sync_state_set, view.sync_state_set_epoch) == (3, 2, (3,), 3)
    assert view.master_addr == "127.0.0.1:10913"
    assert c.take_changes() == []


def test_tie_on_offset_elects_lowest_id_and_heartbeat_alone_triggers_election(tmp_path: Path) -> None:
    clock = Clock()
    c = make(tmp_path, clock)
    three_in_sync(c)
    c.take_changes()
    clock.now += LEASE - 100
    c.heartbeat(hb(3, max_offset=700))
    c.heartbeat(hb(2, max_offset=700))
    clock.now += 200
    # No scan: the heartbeat itself notices the expired master.
    view = c.heartbeat(hb(3, max_offset=700))
    assert (view.master_id, view.epoch) == (2, 2)
    [change] = c.take_changes()
    assert (change.old_master_id, change.old_master_addr, change.new_master_id) == (1, "127.0.0.1:10911", 2)


def test_master_within_lease_is_kept(tmp_path: Path) -> None:
    clock = Clock()
    c = make(tmp_path, clock)
    three_in_sync(c)
    assert [ch.new_master_id for ch in c.take_changes()] == [1]
    for _ in range(10):
        clock.now += LEASE // 2
        c.heartbeat(hb(1, max_offset=10))
        c.heartbeat(hb(2, max_offset=99))
        assert c.scan() == []
    view = c.view("b")
    assert view is not None and (view.master_id, view.epoch) == (1, 1)


def test_no_unclean_election(tmp_path: Path) -> None:
    clock = Clock()
    c = make(tmp_path, clock)
    c.heartbeat(hb(1))
    c.heartbeat(hb(2, max_offset=10**9))  # far ahead but never in the set
    c.alter_sync_state_set("b", 1, 1, 1, [1])
    clock.now += LEASE + 1
    c.heartbeat(hb(2, max_offset=10**9))
    view = c.view("b")
    assert view is not None
    # No master, the set kept, the epoch not spent.
    assert (view.master_id, view.master_addr, view.sync_state_set, view.epoch) == (NO_MASTER, "", (1,), 1)
    [change] = c.take_changes()[-1:]
    assert (change.old_master_id, change.new_master_id) == (1, NO_MASTER)
    for _ in range(5):
        clock.now += 1000
        assert c.heartbeat(hb(2, max_offset=10**9)).master_id == NO_MASTER
        c.scan()
    # The in-sync replica comes back: it is elected at the next epoch.
    view = c.heartbeat(hb(1, max_offset=5, epoch=1))
    assert (view.master_id, view.epoch, view.sync_state_set, view.sync_state_set_epoch) == (1, 2, (1,), 2)


def test_dead_in_sync_replica_is_not_elected(tmp_path: Path) -> None:
    clock = Clock()
    c = make(tmp_path, clock)
    three_in_sync(c)
    clock.now += LEASE + 1
    c.heartbeat(hb(3, max_offset=1))  # only 3 is alive; 2 (silent) is not a candidate
    view = c.view("b")
    assert view is not None and (view.master_id, view.epoch) == (3, 2)


def test_stale_alter_requests_are_fenced(tmp_path: Path) -> None:
    clock = Clock()
    c = make(tmp_path, clock)
    three_in_sync(c)  # set epoch 2
    with pytest.raises(FencedMasterEpoch) as e1:
        c.alter_sync_state_set("b", 2, 1, 2, [1, 2])  # not the master
    assert "is not the master" in e1.value.remark and e1.value.current_master == 1
    with pytest.raises(FencedMasterEpoch):
        c.alter_sync_state_set("b", 1, 0, 2, [1, 2])  # stale epoch
    with pytest.raises(FencedSyncStateSetEpoch) as e2:
        c.alter_sync_state_set("b", 1, 1, 1, [1, 2])  # stale set epoch
    assert e2.value.current == 2
    with pytest.raises(InvalidControllerRequest, match="must contain the master"):
        c.alter_sync_state_set("b", 1, 1, 2, [2, 3])
    with pytest.raises(InvalidControllerRequest, match=r"unknown replicas \[7\]"):
        c.alter_sync_state_set("b", 1, 1, 2, [1, 7])
    with pytest.raises(InvalidControllerRequest, match="unknown broker group"):
        c.alter_sync_state_set("nope", 1, 1, 2, [1])
    # Nothing refused changed anything; an unchanged set keeps its epoch.
    view = c.alter_sync_state_set("b", 1, 1, 2, [1, 2, 3])
    assert (view.sync_state_set, view.sync_state_set_epoch) == ((1, 2, 3), 2)
    # After a failover the old master is fenced, even before any scan ran.
    clock.now += LEASE + 1
    c.heartbeat(hb(2, max_offset=3))
    with pytest.raises(FencedMasterEpoch):
        c.alter_sync_state_set("b", 1, 1, 2, [1])
    view = c.alter_sync_state_set("b", 2, 2, 3, [2, 3])
    assert (view.sync_state_set, view.sync_state_set_epoch) == ((2, 3), 4)


def test_alter_from_master_whose_lease_ran_out_is_fenced_and_replaces_it(tmp_path: Path) -> None:
    clock = Clock()
    c = make(tmp_path, clock)
    three_in_sync(c)
    c.take_changes()
    clock.now += LEASE - 10
    c.heartbeat(hb(2, max_offset=8))
    clock.now += 20
    with pytest.raises(FencedMasterEpoch):
        c.alter_sync_state_set("b", 1, 1, 2, [1, 2])
    assert [(ch.old_master_id, ch.new_master_id) for ch in c.take_changes()] == [(1, 2)]


@pytest.mark.parametrize(("beat", "message"), [
    (Heartbeat("C", "b", 0, "a:1", "a:2", 0, 0), "brokerId must be a replica id >= 1"),
    (Heartbeat("C", "", 1, "a:1", "a:2", 0, 0), "brokerName must not be empty"),
    (Heartbeat("", "b", 1, "a:1", "a:2", 0, 0), "clusterName must not be empty"),
    (Heartbeat("C", "b", 1, " ", "a:2", 0, 0), "brokerAddr must not be empty"),
    (Heartbeat("C", "b", 1, "a:1", "a:2", -1, 0), "maxOffset must be >= 0"),
])
def test_invalid_heartbeats_are_refused_and_change_nothing(tmp_path: Path, beat: Heartbeat, message: str) -> None:
    c = make(tmp_path, Clock())
    with pytest.raises(InvalidControllerRequest, match=message):
        c.heartbeat(beat)
    assert c.groups == {} and not (tmp_path / STATE_FILE).exists()


def test_group_cannot_change_cluster(tmp_path: Path) -> None:
    c = make(tmp_path, Clock())
    c.heartbeat(hb(1))
    with pytest.raises(InvalidControllerRequest, match="belongs to cluster 'C'"):
        c.heartbeat(Heartbeat("D", "b", 2, "a:1", "a:2", 0, 0))


def test_restart_keeps_epochs_and_sets_and_never_elects_out_of_sync(tmp_path: Path) -> None:
    clock = Clock()
    c = make(tmp_path, clock)
    three_in_sync(c)
    c.alter_sync_state_set("b", 1, 1, 2, [1, 2])  # 3 left the set: set epoch 3
    clock.now += LEASE + 1
    c.heartbeat(hb(2, max_offset=50))  # 2 elected: epoch 2, set {2}, set epoch 4
    doc = json.loads((tmp_path / STATE_FILE).read_text())
    assert doc["groups"]["b"]["epoch"] == 2 and doc["groups"]["b"]["syncStateSet"] == [2]

    clock.now += 10_000
    again = make(tmp_path, clock)
    view = again.view("b")
    assert view is not None
    assert (view.master_id, view.epoch, view.sync_state_set, view.sync_state_set_epoch) == (2, 2, (2,), 4)
    assert view.master_addr == "127.0.0.1:10912"
    # A restart gives the master a full lease: no failover just because the controller restarted.
    assert again.scan() == []
    # Master 2 never returns; 1 and 3 heartbeat but neither is in the set.
    clock.now += LEASE + 1
    again.heartbeat(hb(3, max_offset=10**6))
    again.heartbeat(hb(1, max_offset=10**6))
    view = again.view("b")
    assert view is not None and (view.master_id, view.epoch, view.sync_state_set) == (NO_MASTER, 2, (2,))
    # And this, too, is durable.
    third = make(tmp_path, clock)
    assert third.master_addr("b") == ""


def test_unchanged_state_is_not_rewritten(tmp_path: Path) -> None:
    clock = Clock()
    c = make(tmp_path, clock)
    c.heartbeat(hb(1))
    state = tmp_path / STATE_FILE
    before = state.stat().st_mtime_ns, state.read_bytes()
    for _ in range(5):
        clock.now += 100
        c.heartbeat(hb(1, max_offset=clock.now))
    assert (state.stat().st_mtime_ns, state.read_bytes()) == before


def test_unreadable_state_file_stops_the_controller(tmp_path: Path) -> None:
    (tmp_path / STATE_FILE).write_text("{not json")
    with pytest.raises(ControllerStateError, match="not valid JSON"):
        make(tmp_path, Clock())
    (tmp_path / STATE_FILE).write_text(json.dumps({"version": 1, "groups": {"b": {"epoch": 1}}}))
    with pytest.raises(ControllerStateError, match="malformed"):
        make(tmp_path, Clock())


def test_failed_write_leaves_state_as_on_disk(tmp_path: Path) -> None:
    clock = Clock()
    state_dir = tmp_path / "ctl"
    c = make(state_dir, clock)
    c.heartbeat(hb(1))
    (state_dir / STATE_FILE).unlink()
    state_dir.rmdir()
    state_dir.write_text("a file where the directory was")  # every write now fails
    with pytest.raises(OSError):
        c.heartbeat(hb(2))
    assert sorted(c.groups["b"].replicas) == [1]
    assert c.take_changes()[-1].new_master_id == 1
