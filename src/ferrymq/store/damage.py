"""Damaged records found at rest: where they are, what they belonged to, and which queue
ranges an operator chose to skip.

A record is damaged when it no longer passes the checks recovery applies (size, magic,
position, body CRC). Reads, the scrub and a tail check report into one registry; each record
is logged once (segment file and offset) however often it is read. The registry is kept in
config/damage.json so that it survives restarts; the file is written by the store's
maintenance thread, never by a reader."""

from __future__ import annotations

import contextlib
import enum
import logging
import threading
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

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
    # "read", "scrub" or "tail"; "entry" when a consume-queue entry is what is damaged (no
    # size, or it points at a sound record of another size): the record is not left out.
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


# (phys, size, topic, queue id, queue offset) of a damaged consume-queue entry: what a read
# looks it up by (the queue offset too: an entry of the same queue naming the same bytes
# later, its own record written there, is sound).
EntryKey = tuple[int, int, str, int, int]


def entry_key(rec: DamagedRecord) -> EntryKey:
    return (rec.phys_offset, rec.size, rec.topic, rec.queue_id, rec.queue_offset)


class DamageRegistry:
    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._records: dict[int, DamagedRecord] = {}
        # The damaged consume-queue entries (found_by "entry"), by EntryKey: entries of
        # several sizes can point at one offset, each is left out (keyed by phys alone, all
        # but the first went unremembered, and were delivered once the scrub passed there);
        # and an entry of one queue that points at another queue's record of the same size
        # is left out without that record being left out of its own queue.
        self._entries: dict[EntryKey, DamagedRecord] = {}
        self._skipped: dict[tuple[str, int], list[SkippedRange]] = {}
        self._dirty = False
        # Counts the starts and ends of a slave's cuts of the log (odd while one is under
        # way). A report made from bytes read before or during a cut may describe bytes the cut
        # removed, or queue entries it had yet to remove: the master's records go there next
        # and the report would hide them. Such a report is dropped (the next read finds real
        # damage again).
        self._epoch = 0
        # phys -> reason of the records reads must leave out; replaced, never mutated, so
        # readers look it up without the lock. A tail cut is not in it: new records go there.
        self.known: dict[int, str] = {}
        # EntryKey -> reason of the damaged consume-queue entries (found_by "entry"): an entry
        # of that queue with that offset and size is left out, the record at the offset is not.
        self.known_entries: dict[EntryKey, str] = {}

    def _refresh_known(self) -> None:
        """The lookups of reads, from the reports; the caller holds the lock or owns the
        registry. A record's own damage covers every entry pointing at it: those entries'
        reports are dropped (never the other way round)."""
        self.known = {p: r.reason for p, r in self._records.items() if r.found_by != "tail"}
        self._entries = {k: r for k, r in self._entries.items() if k[0] not in self.known}
        self.known_entries = {k: r.reason for k, r in self._entries.items()}

    def _put(self, rec: DamagedRecord) -> None:
        """Keep `rec` (loaded): an entry's report beside the others; the caller holds the lock
        or owns the registry."""
        if rec.found_by == "entry":
            self._entries[entry_key(rec)] = rec
        else:
            self._records[rec.phys_offset] = rec

    def load(self) -> None:
        raw = read_json_file(self.path, {})
        if not isinstance(raw, dict):
            return
        for item in raw.get("records", []):
            try:
                rec = DamagedRecord(**item)
            except TypeError:
                continue
            self._put(rec)
        for item in raw.get("skipped", []):
            try:
                rng = SkippedRange(**item)
            except TypeError:
                continue
            self._skipped.setdefault((rng.topic, rng.queue_id), []).append(rng)
        self._refresh_known()

    # --- reporting ---------------------------------------------------------------------------
    @property
    def generation(self) -> int:
        """Taken before the bytes a report judges are read (see report)."""
        return self._epoch

    @contextlib.contextmanager
    def cutting(self) -> Iterator[None]:
        """A cut of the log (and its queues) under way: reads that overlap it report nothing."""
        with self._lock:
            self._epoch += 1
        try:
            yield
        finally:
            with self._lock:
                self._epoch += 1

    def report(self, rec: DamagedRecord, read_at: int | None = None) -> bool:
        """Record `rec`; True (and one error log line) the first time its offset is seen (an
        entry's report: its queue, offset and size). `read_at`: the generation taken before
        the bytes were read; a cut during or since the read drops the report."""
        where = (f" (queue {rec.topic}/{rec.queue_id} offset {rec.queue_offset})"
                 if rec.queue_offset >= 0 else "")
        with self._lock:
            if read_at is not None and (read_at % 2 or read_at != self._epoch):
                log.info("damage at %d%s not recorded: the log was being cut as it was read",
                         rec.phys_offset, where)
                return False
            known = self._records.get(rec.phys_offset)
            if rec.found_by == "entry":
                # The record itself found damaged there covers every entry pointing at it.
                if known is not None and known.found_by != "tail":
                    return False
                key = entry_key(rec)
                if key in self._entries:
                    return False
                # Reported before entries were known by their queue (damage.json without
                # one): this is the same entry found again; it takes that report's place.
                legacy = self._entries.pop((rec.phys_offset, rec.size, "", -1, -1), None)
                self._entries[key] = rec
                if legacy is not None:
                    self._dirty = True
                    self._refresh_known()
                    return False
            else:
                if known is not None:
                    if not known.topic and rec.topic:
                        self._records[rec.phys_offset] = rec  # a read knows the queue: keep that
                        self._dirty = True
                    return False
                self._records[rec.phys_offset] = rec
            self._dirty = True
            self._refresh_known()
        if rec.found_by == "entry":
            log.error("damaged consume-queue entry%s: it points at commit-log offset %d in %s "
                      "with %d bytes (%s); the entry is left out, the record is not", where,
                      rec.phys_offset, rec.segment, rec.size, rec.reason)
            return True
        log.error("damaged commit-log record in %s at offset %d, %d bytes%s: %s; found by %s",
                  rec.segment, rec.phys_offset, rec.size, where, rec.reason, rec.found_by)
        return True

    def records(self) -> list[DamagedRecord]:
        with self._lock:
            return sorted([*self._records.values(), *self._entries.values()],
                          key=lambda r: (r.phys_offset, r.size))

    def forget_from(self, phys: int) -> None:
        """Drop records at or beyond `phys`, on disk first: called before the log is cut
        there. Forgotten in memory only (until the next persist), a kill after the cut left
        damage.json naming positions where good records were written since, and every read
        after the restart left those records out (acknowledged messages lost to their
        consumers). A kill between this and the cut leaves the damaged records in the log,
        unregistered: reads verify them again. Raises OSError, changing nothing, when
        damage.json cannot be written (the caller must not cut then)."""
        with self._lock:
            gone = [p for p in self._records if p >= phys] + [k for k in self._entries
                                                               if k[0] >= phys]
            if not gone:
                return
            keep = {p: r for p, r in self._records.items() if p < phys}
            keep_entries = {k: r for k, r in self._entries.items() if k[0] < phys}
            atomic_write(self.path, jsonx.dumps_bytes(self._json(keep, keep_entries)))
            self._records = keep
            self._entries = keep_entries
            self._dirty = False
            self._refresh_known()

    # --- skipped ranges ------------------------------------------------------------------------
    def skip(self, rng: SkippedRange) -> None:
        with self._lock:
            self._skipped.setdefault((rng.topic, rng.queue_id), []).append(rng)
            self._dirty = True
        log.warning("queue %s/%d: offsets [%d, %d) skipped by an operator", rng.topic,
                    rng.queue_id, rng.from_offset, rng.to_offset)

    def skipped(self) -> list[SkippedRange]:
        with self._lock:
            return [r for ranges in self._skipped.values() for r in ranges]

    def has_skips(self, topic: str, queue_id: int) -> bool:
        return (topic, queue_id) in self._skipped

    def next_skip(self, topic: str, queue_id: int, offset: int) -> int:
        """The start of the first skipped range after `offset` (a read stops before it)."""
        starts = [r.from_offset for r in self._skipped.get((topic, queue_id), ())
                  if r.from_offset > offset]
        return min(starts, default=2**62)

    def skip_end(self, topic: str, queue_id: int, offset: int) -> int:
        """The first offset at or after `offset` outside every skipped range of the queue."""
        ranges = self._skipped.get((topic, queue_id))
        if not ranges:
            return offset
        moved = True
        while moved:
            moved = False
            for r in ranges:
                if r.from_offset <= offset < r.to_offset:
                    offset = r.to_offset
                    moved = True
        return offset

    # --- persistence (maintenance thread) ------------------------------------------------------
    def to_json(self) -> dict[str, Any]:
        with self._lock:
            return self._json(self._records, self._entries)

    def _json(self, records: dict[int, DamagedRecord],
              entries: dict[EntryKey, DamagedRecord]) -> dict[str, Any]:
        """The file's content with `records` and `entries`; the caller holds the lock."""
        return {"records": [asdict(r) for r in sorted([*records.values(), *entries.values()],
                                                      key=lambda r: (r.phys_offset, r.size))],
                "skipped": [asdict(r) for ranges in self._skipped.values() for r in ranges]}

    def persist(self) -> None:
        """Write damage.json if anything changed. Under the lock, as forget_from's write: a
        snapshot taken before a forget_from and written after it put the forgotten records
        back on disk."""
        with self._lock:
            if not self._dirty:
                return
            try:
                atomic_write(self.path, jsonx.dumps_bytes(self._json(self._records,
                                                                      self._entries)))
            except OSError as exc:
                log.error("cannot write %s: %s", self.path, exc)
                return
            self._dirty = False
