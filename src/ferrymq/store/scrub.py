"""The background scrub: finding damage at rest before a consumer reaches it.

Recovery after a crash trusts everything below the checkpoint, and a clean start trusts
everything. The scrub thread walks every record the run did not write once after start, with
recovery's checks, at a bounded rate (it sleeps so that it reads at most `bytes_per_s`), and
reports what it finds. It holds no lock: segments are read through their own descriptors, and
a segment deleted by retention meanwhile is passed. A slave's cut of the log ends the pass at
the cut: past it lie the master's records, which this run writes. Reads do not rely on the
scrub: they check every record they hand out."""

from __future__ import annotations

import logging
import mmap
import struct
import threading
import time
from collections.abc import Callable, Iterable

from ..common.record import BLANK_MAGIC_CODE, MessageDecodeError, locate
from .commitlog import END_FILE_MIN_BLANK, Segment
from .consumequeue import ConsumeQueue
from .integrity import ReadGuard
from .recovery import check_record, find_valid_after

log = logging.getLogger("ferrymq.store")

_HEAD = struct.Struct(">ii")
_LOCATE = struct.Struct(">iiiiiq")  # TOTALSIZE MAGIC CRC QUEUEID FLAG QUEUEOFFSET
_CHUNK = 1 << 20


def queue_naming(queues: Iterable[ConsumeQueue], phys: int, queue_id: int,
                 queue_offset: int) -> tuple[str, int, int] | None:
    """(topic, queue id, queue offset) of the consume-queue entry naming the record at
    `phys`, for a report to name its queue: looked up at the record's own QUEUEID and
    QUEUEOFFSET, then, those fields perhaps damaged, by position in every queue."""
    qs = list(queues)
    for cq in qs:
        if cq.queue_id == queue_id and queue_offset >= 0:
            entry = cq.entry(queue_offset)
            if entry is not None and entry[0] == phys:
                return cq.topic, cq.queue_id, queue_offset
    for cq in qs:
        at = cq.first_offset_at_or_above(phys, cq.min_offset, cq.max_offset)
        entry = cq.entry(at) if at < cq.max_offset else None
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
    def __init__(self, guard: ReadGuard, bytes_per_s: int, limit: Callable[[], int],
                 queues: Callable[[], Iterable[ConsumeQueue]] = tuple) -> None:
        self.log = guard.log
        self.guard = guard
        self._queues = queues  # which queue a damaged record is in, for its report to say
        self.bytes_per_s = bytes_per_s
        self._limit = limit  # where what this run did not write ends
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.done = threading.Event()
        self.scanned_bytes = 0
        self.found = 0
        self._started = 0.0
        self._paced = 0
        self._end = 0  # where this pass ends; a cut of the log moves it back (cut)

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

    def cut(self, pos: int) -> None:
        """The log is cut at `pos` (under the store lock): the pass ends there, and reports
        of what it read past `pos` are not made (see _report)."""
        self._end = min(self._end, pos)

    def scrub(self, pos: int, end: int) -> None:
        """Check every record in [pos, end), pacing itself to bytes_per_s."""
        clog = self.log
        self._started = time.monotonic()
        self._paced = 0
        self._end = end
        pos = max(pos, clog.min_offset)
        while pos < self._end and not self._stop.is_set():
            seg = clog.segment_for(pos)
            if seg is None:
                return
            try:
                mm = clog.map_segment(seg)
            except (OSError, ValueError):  # deleted by retention meanwhile
                pos = seg.end
                continue
            try:
                pos = self._scrub_segment(seg, mm, pos)
            finally:
                mm.close()

    def _scrub_segment(self, seg: Segment, mm: mmap.mmap, pos: int) -> int:
        """Check records of `seg` from `pos`; returns where to continue."""
        size_o = self.log.segment_size
        o = pos - seg.start
        while seg.start + o < min(self._end, seg.end):
            if self._stop.is_set() or size_o - o < END_FILE_MIN_BLANK:
                return seg.end
            if seg.start + o >= self.log.write_pos:
                return self._end  # cut: the zeros past it are where records go next
            total, magic = _HEAD.unpack_from(mm, o)
            if magic == BLANK_MAGIC_CODE and total == size_o - o:
                return seg.end
            checked = check_record(mm, o, seg.start + o, size_o, False)
            if isinstance(checked, str):
                nxt = find_valid_after(self.log, seg.start + o)
                self._report(mm, o, seg.start + o, checked, nxt)
                return self._end if nxt is None else nxt
            o += checked[0]
            self.scanned_bytes += checked[0]
            self._pace()
        return seg.start + o

    def _pace(self) -> None:
        if self.bytes_per_s <= 0 or self.scanned_bytes - self._paced < _CHUNK:
            return
        self._paced = self.scanned_bytes
        ahead = self.scanned_bytes / self.bytes_per_s - (time.monotonic() - self._started)
        if ahead > 0:
            self._stop.wait(ahead)

    def _report(self, mm: mmap.mmap, o: int, phys: int, reason: str, nxt: int | None) -> None:
        clog = self.log
        size = (nxt - phys) if nxt is not None else END_FILE_MIN_BLANK
        topic, qid, qo = "", -1, -1
        if clog.segment_size - o >= _LOCATE.size:
            _t, _m, _c, q, _f, off = _LOCATE.unpack_from(mm, o)
            if 0 <= q < 1 << 16 and off >= 0:
                qid, qo = q, off
        owner = queue_naming(self._queues(), phys, qid, qo)
        if owner is not None:
            topic, qid, qo = owner
        elif qid >= 0:  # no entry names it: the record's own fields, if they still parse
            topic = record_topic(mm, o, clog.segment_size - END_FILE_MIN_BLANK)

        def still_damaged() -> bool:  # under the store lock: no cut came since the read
            return phys < min(self._end, clog.write_pos) and isinstance(
                check_record(mm, o, phys, clog.segment_size, False), str)

        if self.guard.report_if(self.guard.damage(phys, size, reason, "scrub", topic, qid, qo),
                                still_damaged):
            self.found += 1
