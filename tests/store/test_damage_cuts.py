"""Damage across cuts of the log and kills: a damaged record cut away (by a slave's cut or by
recovery) must never hide the good record written at its position afterwards."""

from __future__ import annotations

from pathlib import Path

from store_util import crash_image, msg, open_store, queue_bodies, segment_files

from ferrymq.store import FlushDiskType, MessageStore, PutStatus

# No maintenance pass between the steps, and no scrub: the reads find the damage.
QUIET = {"checkpoint_interval_ms": 3_600_000, "flush_disk_type": FlushDiskType.SYNC_FLUSH,
         "scrub_bytes_per_s": 0}


def put_old(s: MessageStore, n: int) -> list[int]:
    """n messages old-0.. to queue T/0, one put each; returns where each was stored."""
    at = []
    for i in range(n):
        res = s.put_messages([msg("T", 0, f"old-{i}".encode())])
        assert res.status is PutStatus.PUT_OK
        at.append(res.messages[0].phys_offset)
    return at


def test_a_record_written_where_a_cut_damaged_one_was_is_read_after_a_kill(
        tmp_path: Path) -> None:
    root = tmp_path / "s"
    s = open_store(root, **QUIET)
    try:
        at = put_old(s, 5)
    finally:
        s.shutdown()
    # Record 3 rots at rest; a read of the next run finds it.
    seg = segment_files(root)[0]
    data = bytearray(seg.read_bytes())
    body_at = data.index(b"old-3", at[3] - int(seg.name))
    data[body_at] ^= 0xFF
    seg.write_bytes(bytes(data))
    s = open_store(root, **QUIET)
    try:
        assert queue_bodies(s) == [b"old-0", b"old-1", b"old-2", b"old-4"]
        assert [r.phys_offset for r in s.damaged_records()] == [at[3]]
        # As a slave whose master never had records 2..4: the damaged record is cut away, and
        # the master's records (of the same size) go where they were.
        assert s.replica.truncate_log(at[2]) > 0
        assert s.damaged_records() == []
        for i in (2, 3):
            res = s.put_messages([msg("T", 0, f"new-{i}".encode())])
            assert res.status is PutStatus.PUT_OK
            assert res.messages[0].phys_offset == at[i]
        assert queue_bodies(s) == [b"old-0", b"old-1", b"new-2", b"new-3"]
        image = crash_image(s, tmp_path / "img")  # killed before any maintenance pass
    finally:
        s.shutdown()
    r = open_store(image, **QUIET)
    try:
        assert queue_bodies(r) == [b"old-0", b"old-1", b"new-2", b"new-3"]
        assert r.damaged_records() == []
    finally:
        r.shutdown()


def test_a_record_written_where_recovery_cut_a_damaged_one_is_read_after_a_kill(
        tmp_path: Path) -> None:
    s = open_store(tmp_path / "s", **QUIET)
    try:
        at = put_old(s, 5)
        image = crash_image(s, tmp_path / "img")
    finally:
        s.shutdown()
    # The last record is damaged: recovery after the crash cuts the log there (a torn tail).
    seg = segment_files(image)[0]
    data = bytearray(seg.read_bytes())
    data[data.index(b"old-4", at[4] - int(seg.name))] ^= 0xFF
    seg.write_bytes(bytes(data))
    s = open_store(image, **QUIET)
    try:
        assert s.max_phy_offset == at[4]
        assert queue_bodies(s) == [b"old-0", b"old-1", b"old-2", b"old-3"]
        res = s.put_messages([msg("T", 0, b"new-4")])
        assert res.status is PutStatus.PUT_OK and res.messages[0].phys_offset == at[4]
        again = crash_image(s, tmp_path / "img2")  # killed before any maintenance pass
    finally:
        s.shutdown()
    r = open_store(again, **QUIET)
    try:
        assert queue_bodies(r) == [b"old-0", b"old-1", b"old-2", b"old-3", b"new-4"]
    finally:
        r.shutdown()
