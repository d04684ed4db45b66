"""Retention and disk usage (MessageStore.retention): deleting commit-log segments by age and
by disk pressure, refusing writes above the refuse ratio, and what preallocation may take. It
works on the store's log, queues and index."""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from .core import StoreCore

log = logging.getLogger("ferrymq.store")

_FORCE_CLEAN_MAX_SEGMENTS = 10


def default_disk_usage(path: str) -> float:
    st = os.statvfs(path)
    if st.f_blocks == 0:
        return 0.0
    return (st.f_blocks - st.f_bfree) / st.f_blocks


@dataclass
class CleanupReport:
    disk_ratio: float
    deleted_segments: list[Path] = field(default_factory=list)
    refusing_writes: bool = False


class Retention:
    def __init__(self, core: StoreCore, disk_usage: Callable[[str], float]) -> None:
        self._core = core
        self._disk_usage = disk_usage
        # Why appends are refused ("" while they are not): the disk at the refuse ratio.
        self.refuse_reason = ""
        self._disk_ratio_seen = 0.0

    def disk_ratio(self) -> float:
        return float(self._disk_usage(str(self._core.root)))

    def refresh_disk(self) -> float:
        root = self._core.root
        try:
            ratio = self.disk_ratio()
        except OSError as exc:
            log.error("cannot measure disk usage of %s: %s", root, exc)
            return 0.0
        self._disk_ratio_seen = ratio
        limit = self._core.config.disk_refuse_ratio
        if ratio >= limit:
            reason = (f"disk usage of {root} is {ratio:.1%}, at or above "
                      f"disk_refuse_ratio {limit:.0%}: writes are refused until space is freed")
            if not self.refuse_reason:
                log.error(reason)
            self.refuse_reason = reason
        else:
            if self.refuse_reason:
                log.warning("disk usage %.1f%% is below the refuse ratio again; accepting "
                            "writes", ratio * 100)
            self.refuse_reason = ""
        return ratio

    def may_preallocate(self) -> bool:
        # Zeros ahead of the writer take space: never while retention is freeing it.
        return (not self.refuse_reason
                and self._disk_ratio_seen < self._core.config.disk_clean_ratio)

    def run_cleanup(self, now_ms: int | None = None) -> CleanupReport:
        """Delete commit-log segments past file_reserved_time (by file modification time),
        one more per run at disk_clean_ratio, up to ten per run at disk_force_clean_ratio,
        never the segment being written; then move queue minimums and drop index files
        below the new minimum."""
        core = self._core
        clog = core.commitlog
        now = core.clock() if now_ms is None else now_ms
        cfg = core.config
        ratio = self.refresh_disk()
        report = CleanupReport(ratio)
        expired = 0
        for seg in clog.segments[:-1]:
            try:
                mtime_ms = int(seg.path.stat().st_mtime * 1000)
            except FileNotFoundError:
                break
            if now - mtime_ms < cfg.file_reserved_ms:
                break
            expired += 1
        if expired:
            report.deleted_segments += self.delete_segments(expired)
        if ratio >= cfg.disk_clean_ratio:
            budget = _FORCE_CLEAN_MAX_SEGMENTS if ratio >= cfg.disk_force_clean_ratio else 1
            while budget > 0 and len(clog.segments) > 1:
                report.deleted_segments += self.delete_segments(1)
                budget -= 1
                ratio = self.refresh_disk()
                if ratio < cfg.disk_clean_ratio:
                    break
            report.disk_ratio = ratio
        if report.deleted_segments:
            report.disk_ratio = self.refresh_disk()
        clog.close_retired()
        core.index.close_retired()
        for cq in list(core.cqs.values()):
            cq.close_retired()
        for cq in list(core.dead_queues):
            cq.close_retired()
            if not cq.retired:
                core.dead_queues.remove(cq)
        report.refusing_writes = bool(self.refuse_reason)
        return report

    def delete_segments(self, count: int) -> list[Path]:
        """Delete the `count` oldest segments (never the one being written) and what points
        into them."""
        core = self._core
        with core.lock:
            gone = core.commitlog.delete_head(count)
            if not gone:
                return []
            min_phys = core.commitlog.min_offset
            for cq in core.cqs.values():
                cq.correct_min(min_phys)
            core.index.delete_below(min_phys)
        for seg in gone:
            log.info("deleted commit-log segment %s", seg.path)
        return [seg.path for seg in gone]
