"""Retention and disk usage: deleting commit-log segments by age and by disk pressure,
refusing writes above the refuse ratio, and what preallocation may take. A part of
MessageStore kept in its own module; it works on the store's log, queues and index."""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from .commitlog import CommitLog
from .config import StoreConfig
from .consumequeue import ConsumeQueue
from .index import Index

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
    config: StoreConfig
    _root: Path
    _log: CommitLog
    _index: Index
    _cqs: dict[tuple[str, int], ConsumeQueue]
    _dead_queues: list[ConsumeQueue]
    _lock: threading.Lock
    _clock: Callable[[], int]
    _refuse_reason: str
    _disk_ratio_seen: float

    def disk_ratio(self) -> float:
        raise NotImplementedError

    def _refresh_disk(self) -> float:
        try:
            ratio = self.disk_ratio()
        except OSError as exc:
            log.error("cannot measure disk usage of %s: %s", self._root, exc)
            return 0.0
        self._disk_ratio_seen = ratio
        limit = self.config.disk_refuse_ratio
        if ratio >= limit:
            reason = (f"disk usage of {self._root} is {ratio:.1%}, at or above "
                      f"disk_refuse_ratio {limit:.0%}: writes are refused until space is freed")
            if not self._refuse_reason:
                log.error(reason)
            self._refuse_reason = reason
        else:
            if self._refuse_reason:
                log.warning("disk usage %.1f%% is below the refuse ratio again; accepting "
                            "writes", ratio * 100)
            self._refuse_reason = ""
        return ratio

    def _may_preallocate(self) -> bool:
        # Zeros ahead of the writer take space: never while retention is freeing it.
        return not self._refuse_reason and self._disk_ratio_seen < self.config.disk_clean_ratio

    def run_cleanup(self, now_ms: int | None = None) -> CleanupReport:
        """Delete commit-log segments past file_reserved_time (by file modification time),
        one more per run at disk_clean_ratio, up to ten per run at disk_force_clean_ratio,
        never the segment being written; then move queue minimums and drop index files
        below the new minimum."""
        now = self._clock() if now_ms is None else now_ms
        cfg = self.config
        ratio = self._refresh_disk()
        report = CleanupReport(ratio)
        expired = 0
        for seg in self._log.segments[:-1]:
            try:
                mtime_ms = int(seg.path.stat().st_mtime * 1000)
            except FileNotFoundError:
                break
            if now - mtime_ms < cfg.file_reserved_ms:
                break
            expired += 1
        if expired:
            report.deleted_segments += self._delete_segments(expired)
        if ratio >= cfg.disk_clean_ratio:
            budget = _FORCE_CLEAN_MAX_SEGMENTS if ratio >= cfg.disk_force_clean_ratio else 1
            while budget > 0 and len(self._log.segments) > 1:
                report.deleted_segments += self._delete_segments(1)
                budget -= 1
                ratio = self._refresh_disk()
                if ratio < cfg.disk_clean_ratio:
                    break
            report.disk_ratio = ratio
        if report.deleted_segments:
            report.disk_ratio = self._refresh_disk()
        self._log.close_retired()
        self._index.close_retired()
        for cq in list(self._cqs.values()):
            cq.close_retired()
        for cq in list(self._dead_queues):
            cq.close_retired()
            if not cq.retired:
                self._dead_queues.remove(cq)
        report.refusing_writes = bool(self._refuse_reason)
        return report

    def _delete_segments(self, count: int) -> list[Path]:
        with self._lock:
            gone = self._log.delete_head(count)
            if not gone:
                return []
            min_phys = self._log.min_offset
            for cq in self._cqs.values():
                cq.correct_min(min_phys)
            self._index.delete_below(min_phys)
        for seg in gone:
            log.info("deleted commit-log segment %s", seg.path)
        return [seg.path for seg in gone]
