"""Damage at rest: what this run found, and the queue ranges an operator chose to skip.

Nothing here decides what a read delivers: every read checks its records against their
entries again (integrity.py). The reports are kept for this run only, to list them (`ferrymq
store damage`) and to log each damaged record once. Skipped ranges are an operator's decision,
the only damage state kept on disk (config/skipped.json)."""

from __future__ import annotations

import enum
import logging
import threading
from dataclasses import asdict, dataclass
from pathlib import Path

from ..common import jsonx
from .files import atomic_write, read_json_file

log = logging.getLogger("ferrymq.store")


class CorruptPolicy(enum.Enum):
    """What a read does with a damaged record. SKIP (default): the pull returns the good
    messages around it and a next offset past it, so no consumer stalls. STOP: the pull ends
    before it and answers an error until an operator skips the range."""

    SKIP = "skip"
    STOP = "stop"


@dataclass(frozen=True)
class DamagedRecord:
    phys_offset: int
    size: int
    segment: str
    reason: str
    # "read", "scrub" or "tail"; "entry" when a consume-queue entry is what is damaged and
    # the queue's records could not be matched to its entries again (integrity.py).
    found_by: str
    topic: str = ""
    queue_id: int = -1
    queue_offset: int = -1


@dataclass(frozen=True)
class SkippedRange:
    topic: str
    queue_id: int
    from_offset: int  # inclusive
    to_offset: int  # exclusive


class DamageReports:
    """This run's reports, one per (offset, record or entry)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._reports: dict[tuple[int, bool], DamagedRecord] = {}

    def report(self, rec: DamagedRecord) -> bool:
        """Keep `rec`; True, and one error log line, the first time it is seen."""
        key = (rec.phys_offset, rec.found_by == "entry")
        with self._lock:
            known = self._reports.get(key)
            if known is None or (rec.topic and not known.topic):
                self._reports[key] = rec  # a read names the queue the scrub could not
            if known is not None:
                return False
        where = (f" (queue {rec.topic}/{rec.queue_id} offset {rec.queue_offset})"
                 if rec.queue_offset >= 0 else "")
        if rec.found_by == "entry":
            log.error("damaged consume-queue entry%s: it points at commit-log offset %d in %s "
                      "with %d bytes (%s); the entry is left out", where, rec.phys_offset,
                      rec.segment, rec.size, rec.reason)
        else:
            log.error("damaged commit-log record in %s at offset %d, %d bytes%s: %s; found by "
                      "%s", rec.segment, rec.phys_offset, rec.size, where, rec.reason,
                      rec.found_by)
        return True

    def records(self) -> list[DamagedRecord]:
        with self._lock:
            return sorted(self._reports.values(), key=lambda r: (r.phys_offset, r.size))

    def drop_from(self, phys: int) -> None:
        """Forget reports at or past `phys`: the log is cut there (new records go there)."""
        with self._lock:
            self._reports = {k: r for k, r in self._reports.items() if k[0] < phys}


class SkippedRanges:
    """The ranges operators skipped, by queue; written to `path` as each is added. The maps
    are replaced, never mutated, so reads look them up without the lock."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._ranges: dict[tuple[str, int], tuple[SkippedRange, ...]] = {}

    def load(self) -> None:
        raw = read_json_file(self.path, [])
        ranges: dict[tuple[str, int], tuple[SkippedRange, ...]] = {}
        for item in raw if isinstance(raw, list) else []:
            try:
                rng = SkippedRange(**item)
            except TypeError:
                continue
            ranges[(rng.topic, rng.queue_id)] = (*ranges.get((rng.topic, rng.queue_id), ()), rng)
        self._ranges = ranges

    def add(self, rng: SkippedRange) -> None:
        """Skip `rng` from now on, on disk first (raises OSError, changing nothing)."""
        key = (rng.topic, rng.queue_id)
        with self._lock:
            ranges = {**self._ranges, key: (*self._ranges.get(key, ()), rng)}
            atomic_write(self.path, jsonx.dumps_bytes([asdict(r) for rs in ranges.values()
                                                       for r in rs]))
            self._ranges = ranges
        log.warning("queue %s/%d: offsets [%d, %d) skipped by an operator", rng.topic,
                    rng.queue_id, rng.from_offset, rng.to_offset)

    def all(self) -> list[SkippedRange]:
        return [r for ranges in self._ranges.values() for r in ranges]

    def of(self, topic: str, queue_id: int) -> tuple[SkippedRange, ...]:
        return self._ranges.get((topic, queue_id), ())

    def next_start(self, topic: str, queue_id: int, offset: int) -> int:
        """The start of the first skipped range after `offset` (a read stops before it)."""
        return min((r.from_offset for r in self.of(topic, queue_id) if r.from_offset > offset),
                   default=2**62)

    def end_at(self, topic: str, queue_id: int, offset: int) -> int:
        """The first offset at or after `offset` outside every skipped range of the queue."""
        ranges = self.of(topic, queue_id)
        moved = bool(ranges)
        while moved:
            moved = False
            for r in ranges:
                if r.from_offset <= offset < r.to_offset:
                    offset = r.to_offset
                    moved = True
        return offset
