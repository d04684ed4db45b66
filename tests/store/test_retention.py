"""Retention and disk limits, with an injected clock and disk usage."""

from __future__ import annotations

from pathlib import Path

from store_util import FakeClock, msg, open_store, segment_files

from ferrymq.store import GetStatus, MessageStore, PutStatus

HOUR = 3_600_000


class Disk:
    def __init__(self) -> None:
        self.ratio = 0.10

    def __call__(self, path: str) -> float:
        return self.ratio


def fill_segments(store: MessageStore, segments: int) -> None:
    root = store.config.root
    i = 0
    while len(segment_files(root)) < segments:
        res = store.put_messages([msg("T", 0, b"x" * 900, uniq=f"U{i}"),
                                  msg("Q", 1, b"y" * 900)])
        assert res.status is PutStatus.PUT_OK
        i += 1


def test_expired_segments_deleted_never_the_active_one(tmp_path: Path) -> None:
    clock = FakeClock()
    clock.now = 10**13  # well after the files' real modification times...
    disk = Disk()
    s = open_store(tmp_path / "s", clock=clock, disk_usage=disk, file_reserved_time_hours=72)
    try:
        fill_segments(s, 4)
        report = s.retention.run_cleanup(now_ms=0)  # ...but "now" before them: nothing has expired
        assert report.deleted_segments == [] and len(segment_files(tmp_path / "s")) == 4
        before_max = s.reads.get_max_offset("T", 0)
        first_uniq_phys = s.reads.query_by_uniq_key("T", "U0")
        assert first_uniq_phys
        report = s.retention.run_cleanup()
        assert len(report.deleted_segments) == 3
        files = segment_files(tmp_path / "s")
        assert len(files) == 1 and int(files[0].name) == s.min_phy_offset
        assert s.reads.get_max_offset("T", 0) == before_max
        min_t = s.reads.get_min_offset("T", 0)
        assert 0 < min_t < before_max
        first = s.reads.read_queue_entries("T", 0, min_t, 1)[0]
        assert first.phys_offset >= s.min_phy_offset
        assert s.reads.read_queue_entries("T", 0, min_t - 1, 1)[0].queue_offset == min_t
        r = s.reads.get_messages("T", 0, 0, 10)
        assert (r.status, r.next_begin_offset) == (GetStatus.OFFSET_TOO_SMALL, min_t)
        assert s.reads.get_messages("T", 0, min_t, 10).status is GetStatus.FOUND
        assert s.reads.query_by_uniq_key("T", "U0") == []
        assert s.reads.read_record(first_uniq_phys[0]) is None
        # consume-queue files wholly below the new minimum are gone
        cq_files = sorted((tmp_path / "s" / "consumequeue" / "T" / "0").iterdir())
        assert int(cq_files[0].name) // 20 <= min_t
        assert len(cq_files) < (before_max + 63) // 64
        assert s.put_messages([msg()]).status is PutStatus.PUT_OK
    finally:
        s.shutdown()
    s = open_store(tmp_path / "s", clock=clock, disk_usage=disk)
    try:  # minimums survive a restart
        assert s.reads.get_min_offset("T", 0) == min_t
    finally:
        s.shutdown()


def test_disk_ratios_clean_early_force_and_refuse(tmp_path: Path) -> None:
    clock = FakeClock()
    disk = Disk()
    s = open_store(tmp_path / "s", clock=clock, disk_usage=disk)
    try:
        fill_segments(s, 14)
        clock.now = 0  # nothing is expired by age
        disk.ratio = 0.5
        assert s.retention.run_cleanup().deleted_segments == []
        disk.ratio = 0.76  # above the clean ratio: one segment per run
        assert len(s.retention.run_cleanup().deleted_segments) == 1
        assert len(segment_files(tmp_path / "s")) == 13
        disk.ratio = 0.86  # forced: up to ten per run
        assert len(s.retention.run_cleanup().deleted_segments) == 10
        assert len(s.retention.run_cleanup().deleted_segments) == 2  # never the active segment
        assert len(segment_files(tmp_path / "s")) == 1
        disk.ratio = 0.93
        report = s.retention.run_cleanup()
        assert report.refusing_writes
        end = s.max_phy_offset
        res = s.put_messages([msg(body=b"refused")])
        assert res.status is PutStatus.DISK_FULL and "disk_refuse_ratio" in res.reason
        assert s.max_phy_offset == end
        disk.ratio = 0.5
        s.retention.run_cleanup()
        assert s.put_messages([msg(body=b"back")]).status is PutStatus.PUT_OK
    finally:
        s.shutdown()
