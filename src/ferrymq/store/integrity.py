"""Checking records as they are read, as RocketMQ's checkCRCOnRecover does at recovery but on
every read: a record handed to a consumer must agree with its consume-queue entry (TOTALSIZE,
the fields, PHYSICALOFFSET, QUEUEID and topic) and, unless this run wrote it, with its body
CRC: the record codec's `record_unsound`, compiled, one call per pull. QUEUEOFFSET is not
compared: recovery keeps a record whose queue offset left a gap at the offset its queue
expected (store dispatch). The check is made on every read, so nothing remembers damage; when
a record fails it, the log tells whether the record is damaged or its entry is wrong, and a
wrong entry is rebuilt from the log (rebuild.py) or, if it cannot be, reported."""

from __future__ import annotations

import enum
import logging
import threading
from collections.abc import Callable, Sequence

from ..common.record import first_unsound, first_unsound_entries, record_info, record_unsound
from . import rebuild
from .commitlog import CommitLog
from .consumequeue import ConsumeQueue
from .damage import CorruptPolicy, DamagedRecord, DamageReports, SkippedRanges
from .recovery import RecordInfo

log = logging.getLogger("ferrymq.store")


class Verdict(enum.Enum):
    REBUILT = "rebuilt"  # the entries were rebuilt from the log: read them again
    RETRY = "retry"  # the bytes changed under the read (a slave's cut): read again later
    DAMAGED = "damaged"  # reported: passed over (SKIP) or stopped at (STOP)


class ReadGuard:
    """What a read does about damage: the checks, who is to blame, the rebuild, the reports,
    and whether it skips or stops. Records at or past `hot_start` (written by this run) are
    trusted to hold their body; all others have their CRC checked on every read."""

    def __init__(self, clog: CommitLog, lock: threading.Lock, policy: CorruptPolicy,
                 skips: SkippedRanges, delay_levels: Sequence[int],
                 rewrite: rebuild.Rewrite) -> None:
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
        """The entry at `qo` (phys, size) failed the read's check for `reason`. Its range is
        rebuilt from the log when that can be done (rebuild.py): the entry was what is wrong.
        A damaged record stops the rebuild's scan of the log, so when nothing can be rebuilt,
        either the record is damaged (reported as the record's) or the entry is wrong beyond
        repair: it has no bytes of the log (no positive size, or past the log's end) or a
        sound record of another size or queue starts at its offset (reported as the entry's).
        Decided from bytes read without the lock, then confirmed under it: a slave's cut
        meanwhile (which holds the lock) makes it RETRY, and no report describes bytes a cut
        removed."""
        clog = self.log
        no_bytes = size <= 0 or phys + size > clog.write_pos
        rec = None if no_bytes else clog.read_record(phys)
        info = None if rec is None else record_info(rec, 0, phys, len(rec), RecordInfo)
        if isinstance(info, RecordInfo) and info.size == size and (
                info.topic, info.queue_id) == (cq.topic, cq.queue_id):
            return Verdict.RETRY  # sound now: the bytes changed under the read
        entry_wrong = no_bytes or isinstance(info, RecordInfo)
        plan = rebuild.plan(clog, cq, qo)
        with self.lock:
            entry = cq.entry(qo)
            if entry is None or entry[:2] != (phys, size):
                return Verdict.RETRY
            done = None if plan is None else self._rebuild(cq, plan)
            if done is not None:
                return Verdict.REBUILT if done else Verdict.RETRY
            if not entry_wrong:
                data = clog.read(phys, size)
                if data is not None and self.reason(data, 0, phys, size, cq.topic,
                                                    cq.queue_id) is None:
                    return Verdict.RETRY
            self.reports.report(self.damage(phys, size, reason,
                                            "entry" if entry_wrong else "read", cq.topic,
                                            cq.queue_id, qo))
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

    def _rebuild(self, cq: ConsumeQueue, plan: rebuild.Plan) -> bool | None:
        try:
            done = rebuild.apply(self.log, cq, plan, self._levels, self._rewrite)
        except OSError as exc:
            log.error("consume queue %s/%d: rebuilt entries [%d, %d) could not be written: %s",
                      cq.topic, cq.queue_id, plan.first, plan.end_entry, exc)
            return None
        if done:
            log.warning("consume queue %s/%d: entries [%d, %d) disagreed with their records and "
                        "were rebuilt from commit log [%d, %d)", cq.topic, cq.queue_id,
                        plan.first, plan.end_entry, plan.start, plan.end)
        return done
