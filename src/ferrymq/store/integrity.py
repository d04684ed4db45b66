"""Checking records as they are read, as RocketMQ's checkCRCOnRecover does at recovery but on
every read: a record handed to a consumer must still be the record that was stored.

The consume queue says where a record starts and how long it is; the record itself must agree
(TOTALSIZE, the fields, PHYSICALOFFSET, and the queue: QUEUEID and topic) and, unless this run
wrote it, its body must match its CRC: the record codec's `record_unsound`, compiled with the
rest of it, one call per pull. QUEUEOFFSET is not compared: recovery keeps a record whose queue
offset left a gap at the offset its queue expected (store._dispatch).

The check is made on every read, so nothing remembers damage. When a record fails it, the log
tells whether the record is damaged or its entry is wrong (no record starts where the entry
says, or a sound record of another size or queue does). Entries are derived from the log, as
recovery and RocketMQ's reput derive them: a wrong entry's range is rebuilt from the log when
the queue's records there are as many as its entries; otherwise the entries are damage too."""

from __future__ import annotations

import enum
import logging
import threading
from collections.abc import Callable, Sequence
from typing import NamedTuple

from ..common.record import (
    BLANK_MAGIC_CODE,
    MESSAGE_MAGIC_CODE,
    first_unsound,
    first_unsound_entries,
    record_info,
    record_unsound,
)
from ..common.record.layout import I32, SIZE_AND_MAGIC
from .commitlog import END_FILE_MIN_BLANK, CommitLog
from .consumequeue import ENTRY, ConsumeQueue
from .damage import CorruptPolicy, DamagedRecord, DamageReports, SkippedRanges
from .recovery import RecordInfo, Scanner, check_record, entry_tag

log = logging.getLogger("ferrymq.store")

_MAGIC = I32.pack(MESSAGE_MAGIC_CODE)
# How far back record_covering looks for the record holding an offset: past the largest
# record (4 MiB messages by default).
_SEARCH_BACK = 8 << 20
# A rebuild looks this many entries either way for sound ones, and scans at most this much of
# the log between them; past that the wrong entry is reported as damaged.
_WALK = 64
_MAX_SCAN = 32 << 20

# (queue, first queue offset, entries): writes rebuilt entries over a queue's (the caller
# holds the store lock).
Rewrite = Callable[[ConsumeQueue, int, bytes], None]


class Verdict(enum.Enum):
    REBUILT = "rebuilt"  # the entries were rebuilt from the log: read them again
    RETRY = "retry"  # the bytes changed under the read (a slave's cut): read again later
    DAMAGED = "damaged"  # reported: passed over (SKIP) or stopped at (STOP)


class _Plan(NamedTuple):
    first: int  # the entries [first, end_entry) are replaced by those of `records`
    end_entry: int
    old: bytes
    start: int  # the log range [start, end) the records were found in
    end: int
    to_log_end: bool  # no sound entry after them: the range runs to the log's end
    records: list[RecordInfo]


class ReadGuard:
    """What a read does about damage: the checks, who is to blame, the rebuild, the reports,
    and whether it skips or stops. Records at or past `hot_start` (written by this run) are
    trusted to hold their body; all others have their CRC checked on every read."""

    def __init__(self, clog: CommitLog, lock: threading.Lock, policy: CorruptPolicy,
                 skips: SkippedRanges, delay_levels: Sequence[int], rewrite: Rewrite) -> None:
        self.log = clog
        self.lock = lock  # the store's: a slave's cut of the log holds it
        self.policy = policy
        self.reports = DamageReports()
        self.skips = skips
        self.hot_start = 0  # set at start: where this run's writes begin
        self._levels = delay_levels
        self._rewrite = rewrite

    def reason(self, buf: bytes, o: int, phys: int, size: int, topic: str,
               queue_id: int) -> str | None:
        if size <= 0:
            return "record cut short"  # the entry's size: no record has it
        return record_unsound(buf, o, phys, size, queue_id, topic.encode(), phys < self.hot_start)

    def any_damaged(self, buf: bytes, topic: str, queue_id: int,
                    picked: Callable[[], list[tuple[int, int, int]]],
                    entries: bytes | None = None, count: int = 0) -> bool:
        """Whether a record of `buf` fails its check: records back to back, as `picked` lists
        them ((queue offset, phys, size)), or as the first `count` consume-queue entries in
        `entries` say (a run taken as it lies: no tuple per record)."""
        if entries is not None:
            return first_unsound_entries(buf, entries, count, 0, self.hot_start, queue_id,
                                         topic.encode()) >= 0
        return first_unsound(buf, picked(), 0, self.hot_start, queue_id, topic.encode()) >= 0

    def sort_out(self, cq: ConsumeQueue, data: bytes, picked: list[tuple[int, int, int]]
                 ) -> tuple[bytes, int, int, bool] | None:
        """The sound records of `data` (read back to back as `picked` lists them; an entry
        without a positive size has no bytes). Returns (data, count, stop, held): under SKIP
        damaged records are left out; a read ends at `stop` (-1: it does not) before a record
        that STOP holds it at (`held`) or that changed under it. None when entries were
        rebuilt: the read is to be made again."""
        view = memoryview(data)
        parts: list[memoryview] = []
        o = 0
        for qo, phys, size in picked:
            reason = self.reason(data, o, phys, size, cq.topic, cq.queue_id)
            if reason is None:
                parts.append(view[o : o + size])
            else:
                verdict = self.judge(cq, qo, phys, size, reason)
                if verdict is Verdict.REBUILT:
                    return None
                if verdict is Verdict.RETRY or self.policy is CorruptPolicy.STOP:
                    return b"".join(parts), len(parts), qo, verdict is Verdict.DAMAGED
            if size > 0:
                o += size
        return b"".join(parts), len(parts), -1, False

    # --- who is to blame -------------------------------------------------------------------
    def judge(self, cq: ConsumeQueue, qo: int, phys: int, size: int, reason: str) -> Verdict:
        """The entry at `qo` (phys, size) failed the read's check for `reason`: rebuild its
        range when the entry is what is wrong, else report the damage. Decided from the bytes
        read without the lock, then confirmed under it: a slave's cut meanwhile (which holds
        the lock) makes it RETRY, and no report describes bytes a cut removed."""
        clog = self.log
        wrong = size <= 0 or phys + size > clog.write_pos
        if not wrong:
            rec = clog.read_record(phys)
            info = None if rec is None else record_info(rec, 0, phys, len(rec), RecordInfo)
            if not isinstance(info, RecordInfo):
                wrong = record_covering(clog, phys) is not None  # else the record is damaged
            elif info.size == size and (info.topic, info.queue_id) == (cq.topic, cq.queue_id):
                return Verdict.RETRY  # sound now: the bytes changed under the read
            else:
                wrong = True  # a sound record of another size or queue
        plan = self._plan(cq, qo) if wrong else None
        with self.lock:
            entry = cq.entry(qo)
            if entry is None or entry[:2] != (phys, size):
                return Verdict.RETRY
            if wrong and plan is not None:
                verdict = self._rebuild(cq, plan)
                if verdict is not None:
                    return verdict
            elif not wrong:
                data = clog.read(phys, size)
                if data is not None and self.reason(data, 0, phys, size, cq.topic,
                                                    cq.queue_id) is None:
                    return Verdict.RETRY
            self.reports.report(self.damage(phys, size, reason, "entry" if wrong else "read",
                                            cq.topic, cq.queue_id, qo))
        return Verdict.DAMAGED

    def report_if(self, rec: DamagedRecord, still: Callable[[], bool]) -> bool:
        """Report `rec` if `still()` holds under the store lock (see judge)."""
        with self.lock:
            return still() and self.reports.report(rec)

    def damage(self, phys: int, size: int, reason: str, found_by: str, topic: str = "",
               queue_id: int = -1, queue_offset: int = -1) -> DamagedRecord:
        seg = self.log.segment_for(phys)
        return DamagedRecord(phys, size, str(seg.path) if seg else "", reason, found_by, topic,
                             queue_id, queue_offset)

    # --- rebuilding entries from the log ---------------------------------------------------
    def _sound_entry(self, cq: ConsumeQueue, k: int) -> tuple[int, int] | None:
        entry = cq.entry(k)
        if entry is None or entry[1] <= 0:
            return None
        phys, size, _tag = entry
        data = self.log.read(phys, size)
        if data is None or self.reason(data, 0, phys, size, cq.topic, cq.queue_id) is not None:
            return None
        return phys, size

    def _plan(self, cq: ConsumeQueue, qo: int) -> _Plan | None:
        """The entries around `qo` between the nearest sound ones, and this queue's records in
        the log between those: None unless they are as many (the entries cannot be told
        apart then: a queue file restored into another queue's directory, say)."""
        clog = self.log
        first, start = qo, -1
        while first > max(cq.min_offset, qo - _WALK) and start < 0:
            found = self._sound_entry(cq, first - 1)
            if found is None:
                first -= 1
            else:
                start = found[0] + found[1]
        if start < 0:
            if first != cq.min_offset:
                return None
            start = clog.min_offset
        last, end = qo + 1, -1
        readable = cq.readable_max
        while last < min(readable, qo + _WALK) and end < 0:
            found = self._sound_entry(cq, last)
            if found is None:
                last += 1
            else:
                end = found[0]
        to_log_end = end < 0
        if to_log_end:
            if last != readable or readable != cq.max_offset:
                return None
            end = clog.write_pos
        if not start <= end <= start + _MAX_SCAN:
            return None
        old = _raw_entries(cq, first, last)
        scanner = Scanner(clog, start)
        records = []
        for info in scanner:
            if info.pos >= end:
                break
            if info.queue_id == cq.queue_id and info.topic == cq.topic:
                records.append(info)
        else:
            if scanner.result.end < end:
                return None  # damage between: the records cannot all be counted
        if len(records) != last - first:
            return None
        return _Plan(first, last, old, start, end, to_log_end, records)

    def _rebuild(self, cq: ConsumeQueue, plan: _Plan) -> Verdict | None:
        """Write `plan`'s entries (the caller holds the store lock); RETRY when the queue or
        the log moved since it was made, None when it cannot be used."""
        clog = self.log
        if (_raw_entries(cq, plan.first, plan.end_entry) != plan.old
                or clog.min_offset > plan.start or clog.write_pos < plan.end
                or (plan.to_log_end and cq.max_offset != plan.end_entry)):
            return Verdict.RETRY
        pack, levels = ENTRY.pack, self._levels
        packed = b"".join([pack(i.pos, i.size, entry_tag(i, levels)) for i in plan.records])
        if packed == plan.old:
            return None
        try:
            self._rewrite(cq, plan.first, packed)
        except OSError as exc:
            log.error("consume queue %s/%d: rebuilt entries [%d, %d) could not be written: %s",
                      cq.topic, cq.queue_id, plan.first, plan.end_entry, exc)
            return None
        log.warning("consume queue %s/%d: entries [%d, %d) disagreed with their records and "
                    "were rebuilt from commit log [%d, %d)", cq.topic, cq.queue_id, plan.first,
                    plan.end_entry, plan.start, plan.end)
        return Verdict.REBUILT


def _raw_entries(cq: ConsumeQueue, first: int, end: int) -> bytes:
    out = bytearray()
    while first < end:
        raw = cq.read_raw(first, end - first)
        if not raw:
            break
        out += raw
        first += len(raw) // ENTRY.size
    return bytes(out)


def record_covering(clog: CommitLog, phys: int) -> int | None:
    """Where what covers `phys` ends when no record can start there: the nearest sound record
    before it, reaching past it, or the blank closing its segment. None when a record may start
    there (damaged, or the nearest sound record ends before `phys`, damage between). Searches
    back for a record's magic at most _SEARCH_BACK bytes, on damage only."""
    seg = clog.segment_for(phys)
    if seg is None:
        return None
    try:
        mm = clog.map_segment(seg)
    except (OSError, ValueError):  # deleted by retention meanwhile
        return None
    try:
        o = phys - seg.start
        lo = max(0, o - _SEARCH_BACK)
        end = o + 7  # the magic of a record starting before `o` ends by o + 7
        while True:
            hit = mm.rfind(_MAGIC, lo + 4, end)
            if hit < 0:
                return None
            checked = check_record(mm, hit - 4, seg.start + hit - 4, clog.segment_size, False)
            if not isinstance(checked, str):
                after = hit - 4 + checked[0]
                break
            end = hit + 3
        if after > o:
            return seg.start + after
        if clog.segment_size - after < END_FILE_MIN_BLANK:
            return seg.end
        total, magic = SIZE_AND_MAGIC.unpack_from(mm, after)
        return seg.end if magic == BLANK_MAGIC_CODE and after + total == clog.segment_size \
            else None
    finally:
        mm.close()
