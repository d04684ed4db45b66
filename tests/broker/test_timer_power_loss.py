"""The timer after a power loss that kept its own files but not the commit log's tail: the
kernel writes dirty pages back in any order, so the timer checkpoint (which counts the timer
topic's entries already linked) and the wheel can reach the disk while the records they came
from do not. Built here as the image such a loss leaves: the store of an earlier stop, with
the timer files of a later one."""

from __future__ import annotations

import asyncio
import shutil
import threading
import time
from collections import Counter
from collections.abc import Awaitable
from pathlib import Path

import pytest
from test_timer import T0, Clock, Node, _count, _node, _props, nodes

import sparse_copy
from ferrymq.broker.timer import service as timer_service
from ferrymq.broker.timer import state as timer_state
from ferrymq.broker.timer.codec import newest_checkpoint
from ferrymq.broker.timer.state import checkpoint_path, log_dir, wheel_path
from ferrymq.common.names import TIMER_TOPIC
from ferrymq.store import flush as flush_module
from waits import eventually

__all__ = ["nodes"]  # the fixture, used by name

SLOW = {"timer_flush_interval_ms": 600_000}  # no sync but at start and stop


async def _link_and_stop(nodes: list[Node], store: Path, clock: Clock,
                         timers: list[tuple[str, bytes, int]], pending: int, *,
                         fresh: bool = False, **config: object) -> None:
    """A broker on `store` links `timers` (message id, body, due time) until its wheel holds
    `pending`, and stops cleanly. `fresh`: the topic is created first."""
    node = await _node(nodes, store, clock, **config)
    if fresh:
        await node.wire.create_topic("t", 1)  # type: ignore[union-attr]
    for uniq, body, due in timers:
        await node.send("t", body, _props(uniq, TIMER_DELIVER_MS=due))
    await eventually(lambda: node.timer.pending() == pending, what=f"{pending} timers linked")
    await node.stop()
    nodes.remove(node)


async def _lose_power(nodes: list[Node], node: Node, store: Path, synced: Path,
                      clock: Clock) -> Node:
    """The power goes: the timer checkpoint is the one of the last sync, in `synced` (only a
    sync writes it); the kernel wrote back every page of `node`'s wheel and log, so they hold
    what was linked after that sync. The broker starts again."""
    await node.stop()
    nodes.remove(node)
    sparse_copy.copy_file(checkpoint_path(synced), checkpoint_path(store))
    return await _node(nodes, store, clock)


def _timer_files_onto(src: Path, dst: Path) -> None:
    """What the kernel wrote back of `src`'s timer files, over the store `dst`."""
    sparse_copy.copy_file(wheel_path(src), wheel_path(dst))
    shutil.rmtree(log_dir(dst), ignore_errors=True)
    sparse_copy.copytree(log_dir(src), log_dir(dst))
    sparse_copy.copy_file(checkpoint_path(src), checkpoint_path(dst))


async def _power_loss_image(tmp_path: Path, nodes: list[Node], clock: Clock) -> Path:
    """A store holding K0 (a timer for T0 + 1 s) whose timer files, synced, also hold L0
    (T0 + 1.5 s), a timer sent after K0 that the power loss took from the commit log and the
    timer queue."""
    store = tmp_path / "store"
    await _link_and_stop(nodes, store, clock, [("K0", b"kept", T0 + 1_000)], 1, fresh=True)
    image = tmp_path / "image"
    sparse_copy.copytree(store, image)
    await _link_and_stop(nodes, store, clock, [("L0", b"lost", T0 + 1_500)], 2)
    _timer_files_onto(store, image)
    return image


async def test_a_timer_sent_after_the_loss_at_a_reused_queue_offset_is_delivered(
        tmp_path: Path, nodes: list[Node]) -> None:
    """N0 is sent after the restart and takes the timer queue offset L0 had. The checkpoint
    counted L0 as linked already, so the timer started past N0's entry: N0 (acknowledged) was
    never linked and never delivered. (N0 is longer than L0: L0's own stale link, below, must
    not be what delivers it.)"""
    clock = Clock()
    image = await _power_loss_image(tmp_path, nodes, clock)
    node = await _node(nodes, image, clock)
    assert [m.msg_id for m in await node.pull(TIMER_TOPIC)] == ["K0"]
    await node.send("t", b"a new one", _props("N0", TIMER_DELIVER_MS=T0 + 2_000))
    await node.advance_to(T0 + 3_000)
    await eventually(lambda: _count(node, "t", 2), what="K0 and N0 delivered")
    assert sorted(m.msg_id for m in await node.pull("t")) == ["K0", "N0"]


async def test_a_lost_timers_link_does_not_deliver_the_record_written_in_its_place(
        tmp_path: Path, nodes: list[Node]) -> None:
    """The wheel still links L0 at its commit-log offset, where N0 (a timer of the same size,
    due later) is written after the restart. L0's slot must not deliver N0 early, nor twice."""
    clock = Clock()
    image = await _power_loss_image(tmp_path, nodes, clock)
    node = await _node(nodes, image, clock)
    await node.send("t", b"anew", _props("N0", TIMER_DELIVER_MS=T0 + 4_000))
    await node.advance_to(T0 + 2_000)  # past L0's time: only K0 is due
    await eventually(lambda: _count(node, "t", 1), what="K0 delivered")
    assert [m.msg_id for m in await node.pull("t")] == ["K0"]
    await node.advance_to(T0 + 5_000)
    await eventually(lambda: _count(node, "t", 2), what="N0 delivered")
    assert [m.msg_id for m in await node.pull("t")] == ["K0", "N0"]


async def test_timers_linked_after_the_last_sync_are_linked_again_after_a_power_loss(
        tmp_path: Path, nodes: list[Node]) -> None:
    """K1 is stored and linked after the timer's last sync; the power goes with the wheel and
    log pages holding its link written back, and the sync's checkpoint. The store goes back to
    that checkpoint (K1's entry cut, its slot rebuilt without it) and links K1 again from the
    timer queue: delivered once."""
    clock = Clock()
    store = tmp_path / "store"
    await _link_and_stop(nodes, store, clock, [("K0", b"zero", T0 + 1_000)], 1, fresh=True,
                         **SLOW)
    synced = tmp_path / "synced"  # the timer's files as the last sync left them on disk
    sparse_copy.copytree(store, synced)
    node = await _node(nodes, store, clock, **SLOW)
    await node.send("t", b"one", _props("K1", TIMER_DELIVER_MS=T0 + 1_500))
    await eventually(lambda: node.timer.pending() == 2, what="K1 linked")
    node = await _lose_power(nodes, node, store, synced, clock)
    await node.advance_to(T0 + 2_000)
    await eventually(lambda: _count(node, "t", 2), what="K0 and K1 delivered")
    assert sorted(m.msg_id for m in await node.pull("t")) == ["K0", "K1"]


async def test_the_timers_steps_leave_the_checkpoint_on_the_disk_to_its_syncs(
        tmp_path: Path, nodes: list[Node]) -> None:
    """Links and deliveries change the timer's files, not its checkpoint: written after each
    step, a checkpoint could reach the disk ahead of the wheel and log pages it named, and a
    power loss keep it without them. Only the periodic sync writes it, after the files."""
    clock = Clock()
    store = tmp_path / "store"
    node = await _node(nodes, store, clock, **SLOW)
    await node.wire.create_topic("t", 1)  # type: ignore[union-attr]
    on_disk = checkpoint_path(store).read_bytes()
    await node.send("t", b"k", _props("K", TIMER_DELIVER_MS=T0 + 1_000))
    await eventually(lambda: node.timer.pending() == 1, what="K linked")
    await node.advance_to(T0 + 1_000)
    await eventually(lambda: _count(node, "t", 1), what="K delivered")
    assert checkpoint_path(store).read_bytes() == on_disk
    node.timer._last_flush = float("-inf")  # the next turn syncs
    node.timer.poke()
    await eventually(lambda: checkpoint_path(store).read_bytes() != on_disk,
                     what="the periodic sync")
    cp = newest_checkpoint(checkpoint_path(store).read_bytes())
    assert cp is not None and cp.enqueue_offset == 1 and cp.read_time_ms > T0 + 1_000


async def test_after_a_kill_only_the_deliveries_since_the_last_sync_come_again(
        tmp_path: Path, nodes: list[Node]) -> None:
    """A kill leaves the checkpoint of the last sync: the timer goes back to it, so the
    timers delivered after it (at most one flush interval of them) are delivered again, those
    delivered before it are not, and none is lost."""
    clock = Clock()
    store = tmp_path / "store"
    await _link_and_stop(nodes, store, clock, [("A", b"a", T0 + 1_000), ("B", b"b", T0 + 2_000),
                                               ("C", b"c", T0 + 3_000)], 3, fresh=True)
    node = await _node(nodes, store, clock, **SLOW)
    await node.advance_to(T0 + 1_000)
    await eventually(lambda: _count(node, "t", 1), what="A delivered")
    await node.stop()  # a clean stop syncs: A's delivery is in the checkpoint
    nodes.remove(node)
    node = await _node(nodes, store, clock, **SLOW)  # its start syncs; no sync after that
    await node.advance_to(T0 + 2_000)
    await eventually(lambda: _count(node, "t", 2), what="B delivered")
    with pytest.MonkeyPatch.context() as patch:
        # Killed: nothing is synced at the stop (the page cache keeps every other write).
        patch.setattr(timer_state.TimerStore, "_sync", lambda self: None)
        await node.stop()
    nodes.remove(node)
    node = await _node(nodes, store, clock)
    await node.advance_to(T0 + 3_000)

    async def delivered() -> Counter[str]:
        return Counter(m.msg_id for m in await node.pull("t"))

    got = await eventually(lambda: _has(delivered(), "C"), what="C delivered")
    assert (got["A"], got["C"]) == (1, 1) and got["B"] in (1, 2), got


async def _has(counts: Awaitable[Counter[str]], key: str) -> Counter[str] | None:
    got = await counts
    return got if got[key] else None


async def test_a_lost_timers_link_stays_dropped_after_a_clean_restart(
        tmp_path: Path, nodes: list[Node]) -> None:
    """L0 is sent again after the loss (a client's retry): the same size and time, written at
    the offset the lost L0 had, so L0's stale link passes for its record. The link is flagged
    lost on the disk at the first start after the loss, so a clean restart later does not
    deliver the message a second time through it."""
    clock = Clock()
    image = await _power_loss_image(tmp_path, nodes, clock)
    await _link_and_stop(nodes, image, clock, [("L0", b"lost", T0 + 1_500)], 3)
    node = await _node(nodes, image, clock)  # a clean restart
    await node.advance_to(T0 + 3_000)
    assert sorted(m.msg_id for m in await node.pull("t")) == ["K0", "L0"]


async def test_a_wheel_page_written_back_without_its_log_entry_keeps_the_synced_timers(
        tmp_path: Path, nodes: list[Node]) -> None:
    """A is linked and synced; C is linked into the same slot after the sync. The kernel
    wrote back the wheel page (the slot pointing at C), not C's log entry nor a checkpoint
    after the sync: the slot's chain was broken at C's missing entry and A was lost with it.
    The slot is rebuilt from the log below the sync, and C linked again from the queue."""
    clock = Clock()
    store = tmp_path / "store"
    await _link_and_stop(nodes, store, clock, [("A", b"a", T0 + 1_050)], 1, fresh=True, **SLOW)
    synced = tmp_path / "synced"
    sparse_copy.copytree(store, synced)
    await _link_and_stop(nodes, store, clock, [("C", b"c", T0 + 1_020)], 2, **SLOW)
    wheel = wheel_path(store).read_bytes()  # the page the kernel wrote back
    _timer_files_onto(synced, store)  # log and checkpoint as the sync left them
    wheel_path(store).write_bytes(wheel)
    node = await _node(nodes, store, clock)
    await node.advance_to(T0 + 2_000)
    assert sorted(m.msg_id for m in await node.pull("t")) == ["A", "C"]


async def test_deliveries_after_the_last_sync_come_again_after_a_power_loss_none_lost(
        tmp_path: Path, nodes: list[Node]) -> None:
    """A and B are linked and synced; C, due first in the same slot, is linked after the
    sync, then C and A are delivered (2 of the slot done). The power goes with the sync's
    checkpoint (none done) and the wheel and log pages with C's link written back. 2 done
    applied to the slot [A, B] would never deliver B; the store goes back to the sync's read
    time and count, C's link is cut and made again: A and C may come again (at least once), B
    comes."""
    clock = Clock()
    store = tmp_path / "store"
    await _link_and_stop(nodes, store, clock, [("A", b"a", T0 + 1_050), ("B", b"b", T0 + 1_080)],
                         2, fresh=True, **SLOW)
    synced = tmp_path / "synced"
    sparse_copy.copytree(store, synced)
    node = await _node(nodes, store, clock, **SLOW)
    await node.send("t", b"c", _props("C", TIMER_DELIVER_MS=T0 + 1_010))
    await eventually(lambda: node.timer.pending() == 3, what="C linked")
    await node.advance_to(T0 + 1_060)
    await eventually(lambda: _count(node, "t", 2), what="C and A delivered")
    node = await _lose_power(nodes, node, store, synced, clock)
    await node.advance_to(T0 + 2_000)
    got = [m.msg_id for m in await node.pull("t")]
    assert {"A", "B", "C"} <= set(got), got


async def test_a_stop_while_a_delivery_waits_for_its_flush_counts_it_before_closing(
        tmp_path: Path, nodes: list[Node], monkeypatch: pytest.MonkeyPatch) -> None:
    """SYNC_FLUSH on a slow disk: X's delivery is stored and waits for its fsync when the
    broker stops. The stop cancelled the timer there, so X was not counted as delivered and a
    clean restart delivered it again; the stop now lets the step finish."""
    clock = Clock()
    store = tmp_path / "store"
    node = await _node(nodes, store, clock, flush_disk_type="SYNC_FLUSH")
    await node.wire.create_topic("t", 1)  # type: ignore[union-attr]
    await node.send("t", b"x", _props("X", TIMER_DELIVER_MS=T0 + 1_000))
    await eventually(lambda: node.timer.pending() == 1, what="X linked")
    flush_once = flush_module.FlushService._flush_once

    def slow_disk(self: flush_module.FlushService) -> None:
        time.sleep(0.5)
        flush_once(self)

    monkeypatch.setattr(flush_module.FlushService, "_flush_once", slow_disk)
    assert node.broker is not None and node.broker.store is not None
    before = node.broker.store.max_phy_offset
    clock.now = T0 + 1_000
    node.timer.poke()
    await eventually(lambda: node.broker.store.max_phy_offset > before,  # type: ignore[union-attr]
                     what="X's delivery stored, waiting for its flush")
    await node.stop()
    nodes.remove(node)
    monkeypatch.setattr(flush_module.FlushService, "_flush_once", flush_once)
    node = await _node(nodes, store, clock, flush_disk_type="SYNC_FLUSH")
    await node.advance_to(T0 + 2_000)
    assert [m.msg_id for m in await node.pull("t")] == ["X"]


async def test_a_failed_sync_does_not_stop_the_timer(
        tmp_path: Path, nodes: list[Node], monkeypatch: pytest.MonkeyPatch) -> None:
    """An fsync error at the periodic sync ended the timer's task: nothing was delivered any
    more, and the broker's stop raised it before closing the files."""
    clock = Clock()
    node = await _node(nodes, tmp_path / "store", clock, timer_flush_interval_ms=100)
    await node.wire.create_topic("t", 1)  # type: ignore[union-attr]
    sync = timer_state.TimerStore.sync
    failed: list[int] = []

    def sync_failing_once(self: timer_state.TimerStore) -> None:
        if not failed:
            failed.append(1)
            raise OSError(5, "Input/output error")
        sync(self)

    monkeypatch.setattr(timer_state.TimerStore, "sync", sync_failing_once)
    await eventually(lambda: failed, what="a failed sync")
    await node.send("t", b"x", _props("X", TIMER_DELIVER_MS=T0 + 1_000))
    await node.advance_to(T0 + 1_000)
    assert [m.msg_id for m in await node.pull("t")] == ["X"]


async def test_a_stop_during_the_periodic_sync_does_not_wait_out_the_flush_interval(
        tmp_path: Path, nodes: list[Node], monkeypatch: pytest.MonkeyPatch) -> None:
    """The stop's wake-up came while the sync ran, and the loop cleared it after: the stop
    waited the whole flush interval (10 min here) or the grace."""
    clock = Clock()
    node = await _node(nodes, tmp_path / "store", clock, **SLOW)
    monkeypatch.setattr(timer_service, "STOP_GRACE_S", 600.0)
    in_sync, release = threading.Event(), threading.Event()
    sync = timer_state.TimerStore.sync

    def held_sync(self: timer_state.TimerStore) -> None:
        in_sync.set()
        release.wait(30)
        sync(self)

    monkeypatch.setattr(timer_state.TimerStore, "sync", held_sync)
    node.timer._last_flush = float("-inf")  # the next turn syncs
    node.timer.poke()
    await eventually(in_sync.is_set, what="the periodic sync running")
    stopping = asyncio.ensure_future(node.timer.stop())
    release.set()
    await asyncio.wait_for(stopping, 30)


async def test_a_failed_sync_at_close_does_not_abort_the_brokers_stop(
        tmp_path: Path, nodes: list[Node], monkeypatch: pytest.MonkeyPatch) -> None:
    """The timer's close syncs its files; an fsync error there escaped the timer's stop and
    ended the broker's stop half way (store never shut down, server still listening)."""
    node = await _node(nodes, tmp_path / "store", Clock())
    sync = timer_state.TimerStore._sync

    def failing_at_close(self: timer_state.TimerStore) -> None:
        if node.timer._stopping:
            raise OSError(5, "Input/output error")
        sync(self)

    monkeypatch.setattr(timer_state.TimerStore, "_sync", failing_at_close)
    assert node.broker is not None
    await node.broker.stop()
    assert node.broker.store is None or node.broker.store._state != "running"


async def test_a_timer_held_behind_the_open_slot_does_not_spin_the_loop(
        tmp_path: Path, nodes: list[Node]) -> None:
    """M, due inside the slot being delivered, waits for that slot's next entry E. Once M
    was due before E, the loop's next wake-up lay in the past: it went round without waiting
    (hundreds of thousands of steps) until E was due, holding the broker's event loop."""
    clock = Clock()
    node = await _node(nodes, tmp_path / "store", clock)
    await node.wire.create_topic("t", 1)  # type: ignore[union-attr]
    await node.send("t", b"e", _props("E", TIMER_DELIVER_MS=T0 + 1_090))
    await eventually(lambda: node.timer.pending() == 1, what="E linked")
    clock.now = T0 + 1_010
    node.timer.poke()
    await eventually(lambda: node.timer._open is not None, what="E's slot open")
    await node.send("t", b"m", _props("M", TIMER_DELIVER_MS=T0 + 1_020))
    await eventually(lambda: node.timer._hold_until == T0 + 1_020, what="M held")
    steps = 0
    step = timer_service.TimerService._step

    async def counting(self: timer_service.TimerService, state: timer_state.TimerStore) -> bool:
        nonlocal steps
        steps += 1
        return await step(self, state)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(timer_service.TimerService, "_step", counting)
        clock.now = T0 + 1_030  # M due, E not yet
        node.timer.poke()
        await asyncio.sleep(0.2)  # the window the steps are counted in
    assert steps < 50
    await node.advance_to(T0 + 1_100)
    assert sorted(m.msg_id for m in await node.pull("t")) == ["E", "M"]


async def test_a_timer_message_damaged_at_rest_is_not_delivered_altered(
        tmp_path: Path, nodes: list[Node]) -> None:
    """A linked timer message's body is damaged at rest while the broker is down. Its
    delivery read it unchecked and stored it in its real topic under a fresh CRC: the
    consumer got the altered body, and no later check could tell."""
    clock = Clock()
    store = tmp_path / "store"
    await _link_and_stop(nodes, store, clock, [("K0", b"precious-body", T0 + 1_000)], 1,
                         fresh=True, scrub_bytes_per_s=0)
    segment = sorted((store / "commitlog").iterdir())[0]
    at = segment.read_bytes().index(b"precious-body")
    with open(segment, "r+b") as f:
        f.seek(at + 2)
        f.write(b"#")
    node = await _node(nodes, store, clock, scrub_bytes_per_s=0)
    await node.advance_to(T0 + 2_000)
    assert [m.body for m in await node.pull("t")] == []
    assert node.broker is not None and node.broker.store is not None
    assert node.broker.store.damaged_records() != []


async def test_a_sync_counts_deliveries_only_once_their_copies_are_on_disk(
        tmp_path: Path, nodes: list[Node]) -> None:
    """ASYNC_FLUSH with a commit log flushed rarely: the checkpoint that counts K as delivered
    reaches the disk only after K's copy in its real topic does (the commit log is flushed for
    it). Written first, a power loss kept the count and lost the copy: K was never delivered."""
    clock = Clock()
    store = tmp_path / "store"
    node = await _node(nodes, store, clock, flush_interval_commitlog_ms=600_000, **SLOW)
    await node.wire.create_topic("t", 1)  # type: ignore[union-attr]
    await node.send("t", b"k", _props("K", TIMER_DELIVER_MS=T0 + 1_000))
    await eventually(lambda: node.timer.pending() == 1, what="K linked")
    await node.advance_to(T0 + 1_000)
    await eventually(lambda: _count(node, "t", 1), what="K delivered")
    assert node.broker is not None and node.broker.store is not None
    delivered_to = node.broker.store.max_phy_offset
    on_disk = checkpoint_path(store).read_bytes()
    node.timer._last_flush = float("-inf")  # the next turn syncs
    node.timer.poke()
    await eventually(lambda: checkpoint_path(store).read_bytes() != on_disk,
                     what="the periodic sync")
    cp = newest_checkpoint(checkpoint_path(store).read_bytes())
    assert cp is not None and cp.read_time_ms > T0 + 1_000  # K counted as delivered
    assert node.broker.store.flushed_offset >= delivered_to
