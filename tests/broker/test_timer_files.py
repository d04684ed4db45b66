"""The timer files on their own: the pure codec, and the wheel/log/checkpoint store driven with
explicit times (linking, firing order, the checkpoint written only after the files it names,
recovery to it whatever was written after it, the drop of segments no timer needs)."""

from __future__ import annotations

import os
import shutil
import stat
from pathlib import Path

import pytest

import sparse_copy
from ferrymq.broker.timer.checkpoint import CheckpointFile
from ferrymq.broker.timer.codec import (
    CHECKPOINT_COPY_SIZE,
    ENTRY,
    Slot,
    TimerCheckpoint,
    TimerFileError,
    decode_checkpoint,
    decode_entry,
    decode_slot,
    encode_checkpoint,
    encode_entry,
    encode_slot,
    newest_checkpoint,
)
from ferrymq.broker.timer.state import (
    TimerStore,
    TimerStoreConfig,
    checkpoint_path,
    log_dir,
    wheel_path,
)
from ferrymq.store.files import atomic_write, fsync_dir

T0 = 1_800_000_000_000


def test_codec_round_trips_and_rejects_damage() -> None:
    assert decode_slot(encode_slot(Slot(T0, 0, 96, 3))) == Slot(T0, 0, 96, 3, 0)
    raw = encode_entry(-1, T0 + 5, T0, 4096, 210, T0 - 100, True)
    entry = decode_entry(raw, 0, 48)
    assert entry is not None and entry.roll and entry.prev_pos == -1 and entry.size == 210
    assert decode_entry(bytes(ENTRY.size), 0, 0) is None
    with pytest.raises(TimerFileError):
        decode_entry(b"\x01" * ENTRY.size, 0, 0)
    cp = TimerCheckpoint(100, 64, T0, 3, 17, 480, seq=9)
    data = encode_checkpoint(cp)
    assert len(data) == CHECKPOINT_COPY_SIZE and decode_checkpoint(data) == cp
    torn = data[:20] + bytes(CHECKPOINT_COPY_SIZE - 20)
    assert decode_checkpoint(torn) is None
    older = encode_checkpoint(TimerCheckpoint(100, 64, T0 - 100, 0, 16, 432, seq=8))
    assert newest_checkpoint(older + data) == cp
    assert newest_checkpoint(torn + older) is not None and newest_checkpoint(torn + older).seq == 8


def _cfg(tmp_path: Path, **kw: int) -> TimerStoreConfig:
    return TimerStoreConfig(tmp_path, precision_ms=kw.get("precision", 100),
                            slots=kw.get("slots", 64), log_file_size=kw.get("log_size", 48 * 8))


def test_linked_timers_fire_in_time_order_and_far_ones_roll(tmp_path: Path) -> None:
    store = TimerStore(_cfg(tmp_path), T0)
    assert store.horizon_ms == 6_400
    for i, at in enumerate([T0 + 150, T0 + 120, T0 + 199, T0 + 120]):
        assert not store.link(at, 1000 + i, 10)
    assert store.link(T0 + 50_000, 2000, 10)  # beyond the horizon: linked at the last slot
    entries = store.slot_entries(T0 + 100)
    assert [(e.link_ms, e.phys_offset) for e in entries] == [
        (T0 + 120, 1001), (T0 + 120, 1003), (T0 + 150, 1000), (T0 + 199, 1002)]
    (roll,) = store.slot_entries(T0 + 6_300)
    assert roll.roll and roll.deliver_ms == T0 + 50_000
    assert store.pending() == 5
    store.close()


def test_entries_written_after_the_checkpoint_are_unlinked_at_recovery(tmp_path: Path) -> None:
    store = TimerStore(_cfg(tmp_path), T0)
    store.link(T0 + 300, 1, 10)
    store.enqueue_offset = 1
    store.sync()
    # Linked after the last sync (the process dies here, its pages in the page cache): one in
    # the same slot, one alone.
    store.link(T0 + 310, 2, 10)
    store.link(T0 + 900, 3, 10)
    store.enqueue_offset = 3
    again = TimerStore(_cfg(tmp_path), T0)
    assert again.enqueue_offset == 1 and again.log.end == ENTRY.size
    assert [e.phys_offset for e in again.slot_entries(T0 + 300)] == [1]
    assert again.slot_entries(T0 + 900) == [] and again.pending() == 1
    again.link(T0 + 310, 2, 10)  # linked again from the timer queue
    assert [e.phys_offset for e in again.slot_entries(T0 + 300)] == [1, 2]
    again.close()


def test_segments_are_dropped_once_no_timer_in_them_can_be_due(tmp_path: Path) -> None:
    store = TimerStore(_cfg(tmp_path, slots=16), T0)  # horizon 1.6 s, 8 entries a segment
    for i in range(20):
        store.link(T0 + 100 + i, i, 10)
    assert store.log.segment_count() == 3
    while store.read_time_ms < T0 + 1_600:
        store.advance()
    assert store.drop_expired() == 0  # written at T0: needed until T0 + horizon
    store.advance()
    assert store.drop_expired() == 2 and store.log.segment_count() == 1
    store.close()


def test_a_changed_geometry_keeps_the_files_one(tmp_path: Path) -> None:
    TimerStore(_cfg(tmp_path, slots=64), T0).close()
    again = TimerStore(_cfg(tmp_path, slots=128), T0)
    assert again.wheel.slots == 64
    again.close()
    checkpoint_path(tmp_path).unlink()
    fresh = TimerStore(_cfg(tmp_path, slots=128), T0)
    assert fresh.wheel.slots == 128
    fresh.close()


@pytest.mark.parametrize("then", ["sync", "close"])
def test_timers_synced_survive_a_power_loss_that_keeps_only_fsynced_names(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, then: str) -> None:
    """A power loss keeps a file's name only if its directory was fsynced after the name was
    made. config/ is fsynced by others (every snapshot of the consumer offsets): the timer's
    checkpoint there survives, so the wheel and log it describes must too, after a sync or a
    close (the broker's stop)."""
    durable: dict[str, set[str]] = {}
    real = os.fsync

    def fsync(fd: int) -> None:
        real(fd)
        if stat.S_ISDIR(os.fstat(fd).st_mode):
            path = os.readlink(f"/proc/self/fd/{fd}")
            durable[path] = set(os.listdir(path))

    monkeypatch.setattr(os, "fsync", fsync)
    root = tmp_path / "root"
    (root / "config").mkdir(parents=True)
    fsync_dir(root)  # the store's start made root/config durable
    store = TimerStore(_cfg(root, slots=16), T0)  # 8 entries a log segment
    for i in range(12):
        store.link(T0 + 300, i, 10)
    store.enqueue_offset = 12
    if then == "sync":
        store.sync()
    else:
        store.close()
    atomic_write(root / "config" / "consumerOffset.json", b"{}")  # fsyncs config/
    image = tmp_path / "image"
    sparse_copy.copytree(root, image)

    def prune(src: Path, dst: Path) -> None:
        kept = durable.get(str(src), set())
        for name in os.listdir(dst):
            if name not in kept:
                shutil.rmtree(dst / name) if (dst / name).is_dir() else (dst / name).unlink()
            elif (dst / name).is_dir():
                prune(src / name, dst / name)

    prune(root.resolve(), image)
    if then == "sync":
        store.close()
    again = TimerStore(_cfg(image, slots=16), T0)
    try:
        assert again.enqueue_offset == 12
        assert [e.phys_offset for e in again.slot_entries(T0 + 300)] == list(range(12))
    finally:
        again.close()


def _disk_image(src: Path, dst: Path) -> None:
    shutil.rmtree(dst, ignore_errors=True)
    sparse_copy.copytree(src, dst)


def test_the_checkpoint_is_written_only_by_a_sync_after_the_files_it_describes(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Links, deliveries and moves of the read time leave the checkpoint on the disk alone; a
    sync fsyncs the log segment and the wheel, then writes the checkpoint of that state and
    fsyncs it. A checkpoint written before the files it names (as it was after every step) may
    reach the disk without them."""
    store = TimerStore(_cfg(tmp_path), T0)
    cp_path = checkpoint_path(tmp_path)
    on_disk = cp_path.read_bytes()
    store.link(T0 + 300, 7, 10)
    store.enqueue_offset = 1
    store.advance()
    store.slot_done = 1
    assert cp_path.read_bytes() == on_disk
    events: list[tuple[str, str]] = []
    real_fsync, real_pwrite = os.fsync, os.pwrite

    def fsync(fd: int) -> None:
        events.append(("fsync", os.readlink(f"/proc/self/fd/{fd}")))
        real_fsync(fd)

    def pwrite(fd: int, data: bytes, offset: int) -> int:
        events.append(("pwrite", os.readlink(f"/proc/self/fd/{fd}")))
        return real_pwrite(fd, data, offset)

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "pwrite", pwrite)
    store.sync()
    monkeypatch.undo()
    names = [(what, Path(path).name) for what, path in events]
    cp_write = names.index(("pwrite", cp_path.name))
    assert names.index(("fsync", f"{0:020d}")) < cp_write
    assert names.index(("fsync", wheel_path(tmp_path).name)) < cp_write
    assert names[cp_write + 1:] == [("fsync", cp_path.name)]
    assert CheckpointFile(cp_path).load() == TimerCheckpoint(
        100, 64, T0 + 100, 1, 1, ENTRY.size, seq=2)
    store.close()


def test_a_start_after_a_kill_checkpoints_only_what_it_made_durable(tmp_path: Path) -> None:
    """Run 1 links A, syncs, links B and is killed (B in the page cache only). Run 2 goes back
    to run 1's sync, and the checkpoint it writes says so: a power loss that then keeps that
    checkpoint and the files run 1 synced (A only) starts from A, B to be linked again."""
    root, disk = tmp_path / "store", tmp_path / "disk"
    run1 = TimerStore(_cfg(root), T0)
    run1.link(T0 + 1_000, 0, 100)
    run1.enqueue_offset = 1
    run1.sync()
    _disk_image(root, disk)  # what the disk holds: A linked and synced
    run1.link(T0 + 2_000, 100, 100)
    run1.enqueue_offset = 2  # then killed: its writes stay in the page cache
    run2 = TimerStore(_cfg(root), T0)
    assert (run2.pending(), run2.enqueue_offset, run2.log.end) == (1, 1, ENTRY.size)
    written_back = checkpoint_path(root).read_bytes()  # run 2's first checkpoint
    # The power loss: the synced files, and run 2's checkpoint the kernel wrote back.
    shutil.rmtree(log_dir(root))
    sparse_copy.copytree(log_dir(disk), log_dir(root))
    sparse_copy.copy_file(wheel_path(disk), wheel_path(root))
    checkpoint_path(root).write_bytes(written_back)
    after = TimerStore(_cfg(root), T0)
    assert (after.enqueue_offset, after.pending(), after.log.end) == (1, 1, ENTRY.size)
    assert [e.phys_offset for e in after.slot_entries(T0 + 1_000)] == [0]
    after.close()


def test_garbage_past_the_checkpoints_end_of_the_log_is_cleared_not_decoded(
        tmp_path: Path) -> None:
    """What a power loss left past the last sync is not read as entries: bytes there that are
    no entry (a lost write, stale blocks) would stop the broker's start."""
    root = tmp_path / "store"
    store = TimerStore(_cfg(root), T0)
    store.link(T0 + 1_000, 0, 100)
    store.enqueue_offset = 1
    store.sync()
    store.link(T0 + 2_000, 100, 100)  # then the power went: B's entry reached the disk as garbage
    seg = log_dir(root) / f"{0:020d}"
    data = bytearray(seg.read_bytes())
    data[ENTRY.size : 2 * ENTRY.size] = b"\x5a" * ENTRY.size
    seg.write_bytes(bytes(data))
    after = TimerStore(_cfg(root), T0)
    assert (after.log.end, after.enqueue_offset, after.pending()) == (ENTRY.size, 1, 1)
    assert after.log.read(ENTRY.size) is None
    after.close()


def test_a_wheel_page_of_a_later_lap_does_not_lose_the_slot_the_sync_left(
        tmp_path: Path) -> None:
    """A small wheel (16 slots) wraps between two syncs: A is synced at T0+500, the read time
    passes it (A delivered, not yet synced), and B is linked one lap later at the same ring
    position. The power loss keeps that wheel page (pointing past the checkpoint's log end),
    not B's entry. Going back to the sync must give the position back to A's slot; keyed by
    the page's time, a rebuild would clear it and lose A."""
    cfg = TimerStoreConfig(tmp_path / "store", precision_ms=100, slots=16, log_file_size=48 * 64)
    disk = tmp_path / "disk"
    store = TimerStore(cfg, T0)
    store.link(T0 + 500, 0, 100)  # A
    store.enqueue_offset = 1
    store.sync()
    _disk_image(cfg.root, disk)
    while store.read_time_ms <= T0 + 500:
        store.advance()
    assert not store.link(T0 + 2_100, 100, 100)  # B: A's ring position, one lap later
    store.enqueue_offset = 2
    store.close()
    wheel_now = wheel_path(cfg.root).read_bytes()  # the page the kernel wrote back
    _disk_image(disk, cfg.root)
    wheel_path(cfg.root).write_bytes(wheel_now)
    after = TimerStore(cfg, T0)
    assert (after.read_time_ms, after.enqueue_offset) == (T0, 1)
    assert [e.phys_offset for e in after.slot_entries(T0 + 500)] == [0]
    after.close()


def test_bytes_that_are_no_entry_past_a_lost_page_do_not_stop_a_later_start(
        tmp_path: Path) -> None:
    """The checkpoint ends the log at 48; of the entries written after it, those at 48 and 96
    were lost and the one at 144 left as garbage. The next start links again from 48 up to
    144; a clean restart after it must not read the garbage past them as an entry."""
    cfg = TimerStoreConfig(tmp_path / "store", precision_ms=100, slots=64, log_file_size=48 * 64)
    store = TimerStore(cfg, T0)
    store.link(T0 + 1_000, 0, 100)
    store.enqueue_offset = 1
    store.sync()
    surviving = checkpoint_path(cfg.root).read_bytes()  # log end 48
    store.link(T0 + 2_000, 100, 100)
    store.link(T0 + 3_000, 200, 100)
    store.link(T0 + 4_000, 300, 100)
    store.enqueue_offset = 4
    store.close()
    seg = log_dir(cfg.root) / f"{0:020d}"
    data = bytearray(seg.read_bytes())
    data[48:144] = bytes(96)
    data[144:192] = b"\x5a" * ENTRY.size
    seg.write_bytes(bytes(data))
    checkpoint_path(cfg.root).write_bytes(surviving)
    restarted = TimerStore(cfg, T0)
    assert restarted.log.end == 48
    restarted.link(T0 + 2_000, 100, 100)
    restarted.link(T0 + 3_000, 200, 100)
    restarted.enqueue_offset = 3
    restarted.close()
    again = TimerStore(cfg, T0)  # a clean restart
    assert again.pending() == 3
    again.close()


@pytest.mark.parametrize(("before", "after", "n"), [(48 * 1000, 48 * 10, 40), (48 * 10, 48 * 7, 15)])
def test_a_changed_log_segment_size_keeps_the_segments_own(tmp_path: Path, before: int,
                                                           after: int, n: int) -> None:
    """mapped_file_size_timer_log changed over existing segments: a smaller size cut the
    segment short (its pending timers lost), one that did not divide the segments' starts
    stopped the start. The segments' own size wins while they exist, as the wheel's geometry
    does."""
    first = TimerStore(TimerStoreConfig(tmp_path, 100, 64, before), T0)
    for i in range(n):
        first.link(T0 + 1_000, 10_000 + 100 * i, 100)
    first.close()
    again = TimerStore(TimerStoreConfig(tmp_path, 100, 64, after), T0)
    assert len(again.slot_entries(T0 + 1_000)) == n
    again.close()
