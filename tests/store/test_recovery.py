"""Restart and crash recovery: clean restarts, rebuilding consume queues and the index past the
checkpoint, torn tails of every kind, and mid-log corruption (refused, loudly)."""

from __future__ import annotations

import logging
import os
import shutil
from pathlib import Path

import pytest
from store_util import crash_image, msg, open_store, queue_bodies, segment_files

import sparse_copy
from ferrymq.store import MessageStore, PutStatus, StoreCorruptionError

# Only the checkpoint written at start exists: everything put afterwards lies past it.
NO_CHECKPOINTS = {"checkpoint_interval_ms": 3_600_000}


def fill(store: MessageStore, n: int, size: int = 700, start: int = 0) -> list[tuple[int, int]]:
    """n messages in batches of 3; returns (phys, size) of each."""
    out: list[tuple[int, int]] = []
    for i in range(start, start + n, 3):
        batch = [msg("T", 0, f"{j:06d}".encode() * (size // 6), uniq=f"U{j}", keys=f"k{j}")
                 for j in range(i, min(i + 3, start + n))]
        res = store.put_messages(batch)
        assert res.status is PutStatus.PUT_OK
        out += [(a.phys_offset, a.size) for a in res.messages]
    return out


def body(j: int, size: int = 700) -> bytes:
    return f"{j:06d}".encode() * (size // 6)


def test_clean_restart(tmp_path: Path) -> None:
    s = open_store(tmp_path / "s")
    fill(s, 200)
    end = s.max_phy_offset
    s.shutdown()
    s = open_store(tmp_path / "s")
    try:
        assert not s.recovered_abnormally
        assert s.max_phy_offset == end and s.flushed_offset == end
        assert queue_bodies(s) == [body(j) for j in range(200)]
        assert s.put_messages([msg()]).messages[0].queue_offset == 200
    finally:
        s.shutdown()


def test_crash_rebuilds_queues_and_index(tmp_path: Path) -> None:
    s = open_store(tmp_path / "s", **NO_CHECKPOINTS)
    positions = fill(s, 300)
    image = crash_image(s, tmp_path / "img")
    s.shutdown()
    shutil.rmtree(image / "consumequeue")
    shutil.rmtree(image / "index")
    r = open_store(image, **NO_CHECKPOINTS)
    try:
        assert r.recovered_abnormally
        assert r.last_recovery is not None and r.last_recovery.records == 300
        assert queue_bodies(r) == [body(j) for j in range(300)]
        assert r.reads.query_by_uniq_key("T", "U123") == [positions[123][0]]
        assert r.reads.query_by_key("T", "k299", 5) == [positions[299][0]]
        assert r.put_messages([msg()]).messages[0].queue_offset == 300
    finally:
        r.shutdown()


def test_queue_entries_beyond_the_log_are_dropped(tmp_path: Path) -> None:
    s = open_store(tmp_path / "s", **NO_CHECKPOINTS)
    positions = fill(s, 30)
    image = crash_image(s, tmp_path / "img")
    s.shutdown()
    # the log loses its last 4 records (and a bit of the one before); queue entries stay
    cut_at = positions[25][0] + 10
    seg = segment_files(image)[-1]
    os.truncate(seg, cut_at - int(seg.name))
    r = open_store(image, **NO_CHECKPOINTS)
    try:
        assert r.reads.get_max_offset("T", 0) == 25
        assert r.max_phy_offset == positions[25][0]
        assert queue_bodies(r) == [body(j) for j in range(25)]
        assert r.reads.query_by_uniq_key("T", "U27") == []  # stale index entry filtered out
        res = r.put_messages([msg(body=b"after")])
        assert (res.messages[0].queue_offset, res.messages[0].phys_offset) == (25, cut_at - 10)
    finally:
        r.shutdown()


def _tear(image: Path, kind: str, last: tuple[int, int]) -> None:
    seg = segment_files(image)[-1]
    start = int(seg.name)
    phys, size = last
    with open(seg, "r+b") as f:
        if kind == "truncate_mid_record":
            f.truncate(phys - start + size // 2)
        elif kind == "garbage_appended":
            f.seek(phys - start + size)
            f.write(os.urandom(5000))
        elif kind == "garbage_over_last_record":
            f.seek(phys - start + 20)
            f.write(os.urandom(size + 3000))
        elif kind == "zeroed_tail":
            f.seek(phys - start + 30)
            f.write(bytes(size - 30))
        else:
            raise AssertionError(kind)


@pytest.mark.parametrize("kind", ["truncate_mid_record", "garbage_appended",
                                  "garbage_over_last_record", "zeroed_tail"])
def test_torn_tails_recover_and_accept_appends(tmp_path: Path, kind: str) -> None:
    s = open_store(tmp_path / "s", **NO_CHECKPOINTS)
    positions = fill(s, 40)
    image = crash_image(s, tmp_path / "img")
    s.shutdown()
    _tear(image, kind, positions[-1])
    r = open_store(image, **NO_CHECKPOINTS)
    try:
        assert r.recovered_abnormally
        survivors = 40 if kind == "garbage_appended" else 39
        assert queue_bodies(r) == [body(j) for j in range(survivors)]
        assert r.max_phy_offset == positions[survivors - 1][0] + positions[survivors - 1][1]
        res = r.put_messages([msg(body=b"new")])
        assert res.status is PutStatus.PUT_OK
        assert res.messages[0].queue_offset == survivors
        image2 = crash_image(r, tmp_path / "img2")
    finally:
        r.shutdown()
    # the repaired log recovers again without complaint, the new record included
    r2 = open_store(image2, **NO_CHECKPOINTS)
    try:
        assert queue_bodies(r2)[-1] == b"new"
    finally:
        r2.shutdown()


@pytest.mark.parametrize("where", ["body", "size_field"])
def test_mid_log_corruption_refuses_to_start(tmp_path: Path, where: str,
                                             caplog: pytest.LogCaptureFixture) -> None:
    s = open_store(tmp_path / "s", **NO_CHECKPOINTS)
    positions = fill(s, 60)
    image = crash_image(s, tmp_path / "img")
    s.shutdown()
    phys, size = positions[20]
    seg = next(p for p in segment_files(image) if int(p.name) <= phys < int(p.name) + 65536)
    with open(seg, "r+b") as f:
        at = phys - int(seg.name) + (size - 300 if where == "body" else 1)
        f.seek(at)
        byte = f.read(1)
        f.seek(at)
        f.write(bytes([byte[0] ^ 0x10]))
    before = {p.name: p.stat().st_size for p in segment_files(image)}
    with pytest.raises(StoreCorruptionError) as err:
        open_store(image, **NO_CHECKPOINTS)
    e = err.value
    assert (e.file, e.offset, e.next_valid) == (seg, phys, positions[21][0])
    assert str(phys) in str(e) and seg.name in str(e)
    # nothing was cut: every segment is still there, whole
    assert {p.name: p.stat().st_size for p in segment_files(image)} == before
    # with the operator's explicit consent, the log is cut at the bad record
    with caplog.at_level(logging.ERROR, logger="ferrymq.store"):
        r = open_store(image, truncate_on_corruption=True, **NO_CHECKPOINTS)
    try:
        assert any("corrupted" in rec.message for rec in caplog.records)
        assert queue_bodies(r) == [body(j) for j in range(20)]
    finally:
        r.shutdown()


def test_crash_exactly_at_segment_roll(tmp_path: Path) -> None:
    s = open_store(tmp_path / "s", **NO_CHECKPOINTS)
    n = 0
    while len(segment_files(tmp_path / "s")) < 2:
        fill(s, 3, start=n)
        n += 3
    image = crash_image(s, tmp_path / "img")
    s.shutdown()
    r = open_store(image, **NO_CHECKPOINTS)
    try:
        assert queue_bodies(r) == [body(j) for j in range(n)]
        assert r.put_messages([msg()]).status is PutStatus.PUT_OK
    finally:
        r.shutdown()


def test_an_index_file_killed_before_it_was_sized_is_dropped(tmp_path: Path) -> None:
    """SIGKILL between creating an index file and sizing it leaves an empty file; the next
    start removes it instead of failing to map it."""
    s = open_store(tmp_path / "s")
    r = s.put_messages([msg(keys="k1")])
    assert r.ok
    image = crash_image(s, tmp_path / "img")
    s.shutdown()
    (image / "index" / f"{r.end_offset:020d}").write_bytes(b"")
    s = open_store(image)
    try:
        assert s.reads.query_by_key("T", "k1", 4) == [r.messages[0].phys_offset]
        assert not (image / "index" / f"{r.end_offset:020d}").exists()
    finally:
        s.shutdown()


def test_keys_put_after_recovery_cut_the_log_below_the_index_are_indexed_after_a_kill(
        tmp_path: Path) -> None:
    s = open_store(tmp_path / "s", **NO_CHECKPOINTS)
    positions = fill(s, 6)
    image = crash_image(s, tmp_path / "img")
    s.shutdown()
    # A power loss took the log's last records (torn mid-record); the index kept their keys.
    cut_at = positions[4][0]
    seg = segment_files(image)[-1]
    os.truncate(seg, cut_at + 10 - int(seg.name))
    r = open_store(image, **NO_CHECKPOINTS)
    try:
        assert r.max_phy_offset == cut_at
        index_before = tmp_path / "index-before"
        sparse_copy.copytree(image / "index", index_before)
        res = r.put_messages([msg("T", 0, b"after the cut", keys="fresh")])
        assert res.messages[0].phys_offset == cut_at
        # Killed after the record and its queue entry, before its keys reached the index.
        again = crash_image(r, tmp_path / "img2")
    finally:
        r.shutdown()
    shutil.rmtree(again / "index")
    sparse_copy.copytree(index_before, again / "index")
    r = open_store(again, **NO_CHECKPOINTS)
    try:
        assert queue_bodies(r)[-1] == b"after the cut"
        assert r.reads.query_by_key("T", "fresh", 5) == [cut_at]
    finally:
        r.shutdown()
