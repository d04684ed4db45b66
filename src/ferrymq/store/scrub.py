"""Finding damage at rest: the tail check after a clean stop, and the background scrub.

Tail check. A clean checkpoint says where the log ended; the segment files must still hold
that many bytes. A file cut shorter (a copy interrupted, a file system repaired) is treated as
a crash tail: recovery verifies the log from the last record that starts before the cut.

Scrub. Recovery after a crash trusts everything below the checkpoint, and a clean start
trusts everything: a flipped byte in a cold segment would only be noticed when a consumer
reaches it. The scrub thread walks every record below the checkpoint once after start, with
recovery's checks, at a bounded rate (it sleeps so that it reads at most `bytes_per_s`), and
reports what it finds into the damage registry. It holds no lock: segments are read through
their own descriptors, and a segment deleted by retention meanwhile is simply passed."""

from __future__ import annotations

import logging
import mmap
import struct
import threading
import time
from collections.abc import Callable, Iterable

from ..common.record import BLANK_MAGIC_CODE, MessageDecodeError, locate
from .commitlog import END_FILE_MIN_BLANK, CommitLog, Segment
from .consumequeue import ConsumeQueue
from .damage import DamagedRecord, DamageRegistry
from .integrity import ReadGuard
from .recovery import check_record, find_valid_after

log = logging.getLogger("ferrymq.store")

_HEAD = struct.Struct(">ii")
_LOCATE = struct.Struct(">iiiiiq")  # TOTALSIZE MAGIC CRC QUEUEID FLAG QUEUEOFFSET
_CHUNK = 1 << 20


def tail_cut(clog: CommitLog, end: int) -> int | None:
    """The first position below `end` that the segment files no longer hold, or None."""
    for seg in clog.segments:
        if seg.start >= end:
            break
        held = seg.start + clog.loaded_sizes.get(seg.start, clog.segment_size)
        if held < min(seg.end, end):
            return held
    return None


def last_record_before(queues: Iterable[ConsumeQueue], pos: int) -> int | None:
    """The commit-log position of the last record starting before `pos` that a consume queue
    points at (every message record is in one), or None."""
    best: int | None = None
    for cq in queues:
        if not cq.files or cq.max_offset <= cq.min_offset:
            continue
        at = cq.first_offset_at_or_above(pos, cq.min_offset, cq.max_offset) - 1
        if at < cq.min_offset:
            continue
        entry = cq.entry(at)
        if entry is not None and (best is None or entry[0] > best):
            best = entry[0]
    return best


def queue_naming(queues: Iterable[ConsumeQueue], phys: int, queue_id: int,
                 queue_offset: int) -> tuple[str, int, int] | None:
    """(topic, queue id, queue offset) of the consume-queue entry naming the record at
    `phys`: looked up at the record's own QUEUEID and QUEUEOFFSET, then, those fields perhaps
    damaged, by position in every queue (entries are in commit-log order). None when no
    entry names it."""
    qs = list(queues)
    for cq in qs:
        if cq.queue_id == queue_id and queue_offset >= 0:
            entry = cq.entry(queue_offset)
            if entry is not None and entry[0] == phys:
                return cq.topic, cq.queue_id, queue_offset
    for cq in qs:
        if cq.max_offset <= cq.min_offset:
            continue
        at = cq.first_offset_at_or_above(phys, cq.min_offset, cq.max_offset)
        entry = cq.entry(at)
        if entry is not None and entry[0] == phys:
            return cq.topic, cq.queue_id, at
    return None


def record_topic(mm: mmap.mmap, o: int, limit: int) -> str:
    """The topic the record at `o` names, "" when its fields no longer say where it is."""
    try:
        _t, _s, _b, _bl, topic_at, props_at = locate(mm, o, limit)
    except (MessageDecodeError, ValueError):
        return ""
    return bytes(mm[topic_at : props_at - 2]).decode("utf-8", "replace")


class Scrubber:
    def __init__(self, clog: CommitLog, damage: DamageRegistry, bytes_per_s: int,
                 limit: Callable[[], int], guard: ReadGuard | None = None,
                 queues: Callable[[], Iterable[ConsumeQueue]] = tuple) -> None:
        self.log = clog
        # Which queue a damaged record is in, for its report (and log line) to name it.
        self._queues = queues
        self._guard = guard  # told how far records are verified, so reads need not
        self.damage = damage
        self.bytes_per_s = bytes_per_s
        self._limit = limit  # where cold data ends (the checkpoint's consistent offset)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.done = threading.Event()
        self.scanned_bytes = 0
        self.found = 0
        self._started = 0.0
        self._paced = 0
        self._epoch = 0  # the damage registry's generation when the pass began

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="ferrymq-store-scrub",
                                        daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    def _run(self) -> None:
        try:
            t0 = time.monotonic()
            self.scrub(self.log.min_offset, self._limit())
            log.info("scrub checked %d bytes of the commit log in %.1f s: %d damaged records",
                     self.scanned_bytes, time.monotonic() - t0, self.found)
        except Exception:
            log.exception("commit-log scrub failed")
        finally:
            self.done.set()

    def scrub(self, pos: int, end: int) -> None:
        """Check every record in [pos, end), pacing itself to bytes_per_s."""
        clog = self.log
        self._started = time.monotonic()
        self._paced = 0
        # A slave's cut of the log ends the pass: past the cut lie its master's records, at
        # positions the pass's record boundaries no longer match (checked from a boundary of
        # the old records, a sound record's middle read as damage); this run wrote them.
        self._epoch = self.damage.generation
        pos = max(pos, clog.min_offset)
        if self._guard is not None and self._guard.scrubbed_to < pos:
            self._guard.scrubbed_to = pos
        while pos < end and not self._stop.is_set():
            seg = clog.segment_for(pos)
            if seg is None:
                return
            try:
                mm = clog.map_segment(seg)
            except (OSError, ValueError):  # deleted by retention meanwhile
                pos = seg.end
                continue
            try:
                pos = self._scrub_segment(seg, mm, pos, end)
            finally:
                mm.close()

    def _scrub_segment(self, seg: Segment, mm: mmap.mmap, pos: int, end: int) -> int:
        """Check records of `seg` from `pos`; returns where to continue."""
        size_o = self.log.segment_size
        o = pos - seg.start
        stop_o = min(end, seg.end) - seg.start
        while o < stop_o:
            if self._stop.is_set() or size_o - o < END_FILE_MIN_BLANK:
                return seg.end
            read_at = self.damage.generation  # before the bytes: a cut after them voids a report
            if read_at != self._epoch:
                log.info("scrub: the log was cut; this pass ends at %d", seg.start + o)
                return end
            if seg.start + o >= self.log.write_pos:
                # A slave's cut of the log since the scrub began: the zeros past it are where
                # its master's records go next, not damage (reported, they hid those records
                # from every read).
                return end
            total, magic = _HEAD.unpack_from(mm, o)
            if magic == BLANK_MAGIC_CODE and total == size_o - o:
                self._advance(seg.start + o, seg.end)
                return seg.end
            checked = check_record(mm, o, seg.start + o, size_o, False)
            if isinstance(checked, str):
                nxt = find_valid_after(self.log, seg.start + o)
                self._report(mm, o, seg.start + o, str(seg.path), checked, nxt, read_at)
                return end if nxt is None else nxt
            self._advance(seg.start + o, seg.start + o + checked[0])
            o += checked[0]
            self.scanned_bytes += checked[0]
            self._pace()
        return seg.start + o

    def _advance(self, frm: int, to: int) -> None:
        """[frm, to) is verified: reads may trust it if everything before it was too."""
        if self._guard is not None and self._guard.scrubbed_to == frm:
            self._guard.scrubbed_to = to

    def _pace(self) -> None:
        if self.bytes_per_s <= 0 or self.scanned_bytes - self._paced < _CHUNK:
            return
        self._paced = self.scanned_bytes
        ahead = self.scanned_bytes / self.bytes_per_s - (time.monotonic() - self._started)
        if ahead > 0:
            self._stop.wait(ahead)

    def _report(self, mm: mmap.mmap, o: int, phys: int, segment: str, reason: str,
                nxt: int | None, read_at: int) -> None:
        size = (nxt - phys) if nxt is not None else END_FILE_MIN_BLANK
        topic, qid, qo = "", -1, -1
        if self.log.segment_size - o >= _LOCATE.size:
            _t, _m, _c, q, _f, off = _LOCATE.unpack_from(mm, o)
            if 0 <= q < 1 << 16 and off >= 0:
                qid, qo = q, off
        owner = queue_naming(self._queues(), phys, qid, qo)
        if owner is not None:
            topic, qid, qo = owner
        elif qid >= 0:  # no entry names it: the record's own fields, if they still parse
            topic = record_topic(mm, o, self.log.segment_size - END_FILE_MIN_BLANK)
        if self.damage.report(DamagedRecord(phys, size, segment, reason, "scrub", topic, qid,
                                            qo), read_at):
            self.found += 1
