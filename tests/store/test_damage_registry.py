"""The damage registry (config/damage.json) across cuts of the log and kills: a position it
names must never hide a good record written there after the damaged one was cut away."""

from __future__ import annotations

import json
from pathlib import Path

from store_util import crash_image, msg, open_store, queue_bodies, segment_files

from ferrymq.store import FlushDiskType, MessageStore, PutStatus
from ferrymq.store.damage import DamagedRecord, DamageRegistry

# No maintenance pass between the steps (it would persist the registry meanwhile), and no
# scrub: the reads find the damage.
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
    # Record 3 rots at rest; a read of the next run finds it and the registry keeps it.
    seg = segment_files(root)[0]
    data = bytearray(seg.read_bytes())
    body_at = data.index(b"old-3", at[3] - int(seg.name))
    data[body_at] ^= 0xFF
    seg.write_bytes(bytes(data))
    s = open_store(root, **QUIET)
    try:
        assert queue_bodies(s) == [b"old-0", b"old-1", b"old-2", b"old-4"]
        assert [r.phys_offset for r in s.damaged_records()] == [at[3]]
    finally:
        s.shutdown()
    assert [r["phys_offset"] for r in json.loads((root / "config" / "damage.json").read_bytes())
            ["records"]] == [at[3]]
    s = open_store(root, **QUIET)
    try:
        # As a slave whose master never had records 2..4: the damaged record is cut away, and
        # the master's records (of the same size) go where they were.
        assert s.truncate_log(at[2]) > 0
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


def test_a_record_written_where_recovery_cut_a_registered_one_is_read_after_a_kill(
        tmp_path: Path) -> None:
    s = open_store(tmp_path / "s", **QUIET)
    try:
        at = put_old(s, 5)
        image = crash_image(s, tmp_path / "img")
    finally:
        s.shutdown()
    # The state built: the last record is damaged, and the registry names it (as a read or
    # the scrub of an earlier run left it). Recovery cuts the log there.
    seg = segment_files(image)[0]
    data = bytearray(seg.read_bytes())
    data[data.index(b"old-4", at[4] - int(seg.name))] ^= 0xFF
    seg.write_bytes(bytes(data))
    reg = DamageRegistry(image / "config" / "damage.json")
    reg.report(DamagedRecord(at[4], 200, str(seg), "body CRC mismatch", "scrub"))
    reg.persist()
    s = open_store(image, **QUIET)
    try:
        assert s.max_phy_offset == at[4]
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


def test_a_record_found_damaged_where_an_entry_was_reported_is_left_out(tmp_path: Path) -> None:
    """An entry's report leaves the record it points at readable; the record's own damage,
    found later at the same offset, replaces that report and does leave it out."""
    reg = DamageRegistry(tmp_path / "damage.json")
    assert reg.report(DamagedRecord(500, 90, "seg", "TOTALSIZE 120 differs from the consume "
                                    "queue's 90", "entry", "A", 0, 2))
    assert reg.known == {}
    assert not reg.report(DamagedRecord(500, 90, "seg", "again", "entry", "A", 0, 2))
    assert reg.report(DamagedRecord(500, 120, "seg", "body CRC mismatch", "scrub"))
    assert reg.known == {500: "body CRC mismatch"}
    assert not reg.report(DamagedRecord(500, 90, "seg", "TOTALSIZE", "entry", "A", 0, 2))
    assert [r.found_by for r in reg.records()] == ["scrub"]


def test_an_entry_report_of_an_older_damage_json_is_replaced_when_found_again(
        tmp_path: Path) -> None:
    """damage.json written before entry reports were known by their queue: the report has no
    topic and queue. When a read finds that entry again it takes the old report's place (one
    report, one log line), instead of standing beside it for good."""
    path = tmp_path / "damage.json"
    path.write_text(json.dumps({"records": [
        {"phys_offset": 100, "size": 50, "segment": "seg", "reason": "TOTALSIZE 90 differs",
         "found_by": "entry"}], "skipped": []}))
    reg = DamageRegistry(path)
    reg.load()
    found = DamagedRecord(100, 50, "seg", "TOTALSIZE 90 differs", "entry", "T", 0, 3)
    assert reg.report(found) is False  # known already: no second error line
    assert reg.records() == [found]
    assert reg.known_entries == {(100, 50, "T", 0, 3): "TOTALSIZE 90 differs"}
    reg.persist()
    again = DamageRegistry(path)
    again.load()
    assert again.records() == [found]
