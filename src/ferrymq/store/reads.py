"""Reads through the consume queue, following RocketMQ's DefaultMessageStore.getMessage: its
statuses, its nextBeginOffset corrections and its scan limits. Records that lie back to back
in the commit log are read with one pread; a pull of a queue written in batches is one read.
A record filter (SQL92) looks at records after they are read, a batch at a time."""

from __future__ import annotations

from collections.abc import Callable

from ..common.record.layout import (
    HOST_V6_SIZE,
    I32,
    I64,
    POS_PHYSICALOFFSET,
    POS_STORETIMESTAMP_V4,
    POS_SYSFLAG,
    store_timestamp_position,
)
from .commitlog import CommitLog
from .consumequeue import ENTRY, ConsumeQueue
from .damage import CorruptPolicy
from .index import scan_run
from .integrity import ReadGuard, Verdict
from .model import GetResult, GetStatus

# RocketMQ scans at most max(16000 bytes of entries, maxMsgNums entries) per pull when
# filtering, so a pull over a long run of unmatched tags still moves the offset forward.
FILTER_SCAN_ENTRIES = 16000 // ENTRY.size
# Enough bytes to reach STORETIMESTAMP behind any born host.
_STORE_TS_PROBE = POS_STORETIMESTAMP_V4 - 8 + HOST_V6_SIZE + 8
_iter_entries = ENTRY.iter_unpack


# Whether to deliver a record, given the buffer it lies in and where it starts and ends.
RecordFilter = Callable[[bytes, int, int], bool]
# Records read at once while a record filter looks for matches.
FILTER_READ_BATCH = 32
# Reads of a pull made again after entries were rebuilt (integrity.py): once is enough unless
# the queue changes under it.
_READS = 3


def get_messages(cq: ConsumeQueue, log: CommitLog, offset: int, max_nums: int,
                 tag_filter: Callable[[int], bool] | None, max_bytes: int,
                 guard: ReadGuard | None = None,
                 record_filter: RecordFilter | None = None) -> GetResult:
    if record_filter is None:
        return _get(cq, log, offset, max_nums, tag_filter, max_bytes, guard)
    return _get_filtered(cq, log, offset, max_nums, tag_filter, max_bytes, guard, record_filter)


def _get_filtered(cq: ConsumeQueue, log: CommitLog, offset: int, max_nums: int,
                  tag_filter: Callable[[int], bool] | None, max_bytes: int,
                  guard: ReadGuard | None, keep: RecordFilter) -> GetResult:
    """Reads as the unfiltered path does, a batch at a time, and keeps the records `keep`
    accepts, until max_nums are kept or as many entries as a tag-filtered pull scans were
    looked at. Rejected records are passed over: nextBeginOffset moves past them, so a
    consumer whose selector matches nothing still advances (NO_MATCHED_MESSAGE)."""
    limit = offset + max(FILTER_SCAN_ENTRIES, max_nums)
    batch = max(max_nums, FILTER_READ_BATCH)
    parts: list[memoryview] = []
    count = total = 0
    pos = offset
    res = GetResult(GetStatus.NO_MATCHED_MESSAGE, b"", 0, offset, cq.min_offset, cq.readable_max)
    while pos < limit and count < max_nums:
        res = _get(cq, log, pos, min(batch, limit - pos), tag_filter, max_bytes, guard)
        if res.status is GetStatus.FOUND:
            data = res.data
            view = memoryview(data)
            o = 0
            while o < len(data):
                (size,) = I32.unpack_from(data, o)
                if count >= max_nums or (count and total + size > max_bytes):
                    # Where this record's entry lies in the queue: found by the record's
                    # PHYSICALOFFSET (the read checked it against the entry), not taken from
                    # its QUEUEOFFSET field, which recovery may not have kept equal to its
                    # place (and the CRC does not cover).
                    (phys,) = I64.unpack_from(data, o + POS_PHYSICALOFFSET)
                    stop = cq.first_offset_at_or_above(phys, pos, res.next_begin_offset)
                    return _kept(parts, count, stop, res)
                if keep(data, o, o + size):
                    parts.append(view[o : o + size])
                    count += 1
                    total += size
                o += size
            pos = res.next_begin_offset
        elif res.status is GetStatus.NO_MATCHED_MESSAGE and res.next_begin_offset > pos:
            pos = res.next_begin_offset  # unmatched tags or a skipped range: scan on
        elif pos == offset:
            return res  # nothing looked at: that answer as it stands
        else:
            break  # the next pull meets what stopped this one (end of queue, removed, damaged)
    return _kept(parts, count, pos, res)


def _kept(parts: list[memoryview], count: int, next_begin: int, last: GetResult) -> GetResult:
    if not count:
        return GetResult(GetStatus.NO_MATCHED_MESSAGE, b"", 0, next_begin, last.min_offset, last.max_offset)
    return GetResult(GetStatus.FOUND, b"".join(parts), count, next_begin, last.min_offset, last.max_offset)


def _get(cq: ConsumeQueue, log: CommitLog, offset: int, max_nums: int,
         tag_filter: Callable[[int], bool] | None, max_bytes: int,
         guard: ReadGuard | None) -> GetResult:
    for _ in range(_READS):
        res = _get_once(cq, log, offset, max_nums, tag_filter, max_bytes, guard)
        if res is not None:
            return res
    return GetResult(GetStatus.MESSAGE_WAS_REMOVING, b"", 0, offset, cq.min_offset,
                     cq.readable_max)


def _get_once(cq: ConsumeQueue, log: CommitLog, offset: int, max_nums: int,
              tag_filter: Callable[[int], bool] | None, max_bytes: int,
              guard: ReadGuard | None) -> GetResult | None:
    """One read; None when it rebuilt entries it met (they are read again)."""
    mn = cq.min_offset
    mx = cq.readable_max
    if mx == 0:
        return GetResult(GetStatus.NO_MESSAGE_IN_QUEUE, b"", 0, 0, mn, mx)
    if offset < mn:
        return GetResult(GetStatus.OFFSET_TOO_SMALL, b"", 0, mn, mn, mx)
    if offset == mx:
        return GetResult(GetStatus.OFFSET_OVERFLOW_ONE, b"", 0, offset, mn, mx)
    if offset > mx:
        return GetResult(GetStatus.OFFSET_OVERFLOW_BADLY, b"", 0, mn if mn == 0 else mx, mn, mx)
    max_nums = max(1, max_nums)
    scan = max_nums if tag_filter is None else max(FILTER_SCAN_ENTRIES, max_nums)
    if guard is not None and guard.skips.of(cq.topic, cq.queue_id):
        past = guard.skips.end_at(cq.topic, cq.queue_id, offset)
        if past != offset:  # an operator skipped this range
            return GetResult(GetStatus.NO_MATCHED_MESSAGE, b"", 0, min(past, mx), mn, mx)
        scan = min(scan, guard.skips.next_start(cq.topic, cq.queue_id, offset) - offset)
    raw = cq.read_raw(offset, min(scan, mx - offset))
    if raw is None:
        return GetResult(GetStatus.OFFSET_FOUND_NULL, b"", 0, cq.roll_next(offset), mn, mx)
    min_phys = log.min_offset
    log_end = log.write_pos
    if tag_filter is None:
        run = scan_run(raw, max_nums, max_bytes, min_phys)  # compiled: one call per pull
        if run is not None and all(b <= log_end for _a, b in run[2]):
            taken, size, spans = run
            return _read_picked(cq, log, offset, offset + taken, spans, size, taken,
                                lambda: _taken(offset, raw, taken), mn, mx, guard, raw)
    status = GetStatus.NO_MATCHED_MESSAGE
    skip_below = -1
    runs: list[list[int]] = []
    picked: list[tuple[int, int, int]] = []
    total = 0
    count = 0
    i = 0
    for phys, size, tag in _iter_entries(raw):
        if phys < skip_below:
            i += 1
            continue
        if count and (count >= max_nums or total + size > max_bytes):
            break
        if tag_filter is not None and not tag_filter(tag):
            i += 1
            continue
        if phys < min_phys:
            if not count:
                status = GetStatus.MESSAGE_WAS_REMOVING
                skip_below = log.roll_next(phys)
            i += 1
            continue
        if size > 0 and phys + size > log_end:
            if count:
                break  # what comes before it is answered; the next pull meets it
            return _past_end(cq, guard, offset + i, phys, size, mn, mx)
        picked.append((offset + i, phys, size))
        # An entry without a positive size is wrong: no bytes to read (a negative size would
        # cut the run short and put the records after it out of line); the guard judges it.
        if size > 0:
            if runs and runs[-1][1] == phys:
                runs[-1][1] = phys + size
            else:
                runs.append([phys, phys + size])
            total += size
        count += 1
        i += 1
        status = GetStatus.FOUND
        skip_below = -1
    if not count:
        return GetResult(status, b"", 0, offset + i, mn, mx)
    return _read_picked(cq, log, offset, offset + i, runs, total, count, lambda: picked, mn, mx,
                        guard)


def _past_end(cq: ConsumeQueue, guard: ReadGuard | None, qo: int, phys: int, size: int,
              mn: int, mx: int) -> GetResult | None:
    """The entry at `qo` names a record ending past the commit log's end: no queue's entry
    can (entries are written after their records), so it is wrong, unless the log was cut
    since the entries were read (a slave's cut: the next pull meets the queue as cut). Judged
    as any entry failing its check is; answered as removed instead, the consumer asked for it
    again for good."""
    verdict = Verdict.RETRY if guard is None else guard.judge(
        cq, qo, phys, size, f"the entry names bytes past the commit log's end ({phys + size})")
    if verdict is Verdict.REBUILT:
        return None
    if verdict is Verdict.RETRY:
        return GetResult(GetStatus.MESSAGE_WAS_REMOVING, b"", 0, qo, mn, mx)
    if guard is not None and guard.policy is CorruptPolicy.STOP:
        return GetResult(GetStatus.MESSAGE_DAMAGED, b"", 0, qo, mn, mx)
    return GetResult(GetStatus.NO_MATCHED_MESSAGE, b"", 0, qo + 1, mn, mx)


def _read_picked(cq: ConsumeQueue, log: CommitLog, offset: int, next_begin: int,
                 runs: list[list[int]], total: int, count: int,
                 picked: Callable[[], list[tuple[int, int, int]]], mn: int, mx: int,
                 guard: ReadGuard | None, entries: bytes | None = None) -> GetResult | None:
    """Read the records a pull took (`runs` of the commit log) and drop the damaged ones.
    `picked` lists them as (queue offset, phys, size); `entries`, when the pull took its first
    `count` consume-queue entries as they lie, holds them, so a sound pull is checked without
    `picked` being called. None when entries were rebuilt (the pull reads them again)."""
    data = _read_runs(log, runs, total)
    if data is None:  # a segment was deleted between the check and the read
        return GetResult(GetStatus.MESSAGE_WAS_REMOVING, b"", 0, offset, mn, mx)
    if guard is not None and guard.any_damaged(data, cq.topic, cq.queue_id, picked, entries,
                                               count):
        kept = guard.sort_out(cq, data, picked())
        if kept is None:
            return None
        data, count, stop, held = kept
        if stop >= 0:
            next_begin = stop
            if not count:  # held by the policy, or the bytes changed under the read
                status = GetStatus.MESSAGE_DAMAGED if held else GetStatus.MESSAGE_WAS_REMOVING
                return GetResult(status, b"", 0, stop, mn, mx)
        if not count:  # only damaged records: move past them, as past unmatched tags
            return GetResult(GetStatus.NO_MATCHED_MESSAGE, b"", 0, next_begin, mn, mx)
    return GetResult(GetStatus.FOUND, data, count, next_begin, mn, mx)


def _taken(offset: int, raw: bytes, count: int) -> list[tuple[int, int, int]]:
    """(queue offset, phys, size) of the first `count` entries of `raw`."""
    return [(offset + i, phys, size)
            for i, (phys, size, _tag) in enumerate(_iter_entries(raw[: count * ENTRY.size]))]


def _read_runs(log: CommitLog, runs: list[list[int]], total: int) -> bytes | None:
    if not runs:
        return b""  # only damaged entries were taken
    if len(runs) == 1:
        return log.read(runs[0][0], runs[0][1] - runs[0][0])
    # Runs come in queue order, which is commit-log order unless an entry is damaged: one
    # pointing back would slice the span at a negative position (Python counts it from the
    # end), read the wrong bytes and put every record after it out of line with its entry.
    first = min(a for a, _ in runs)
    last = max(b for _, b in runs)
    if last - first <= 2 * total + 65536:
        # Records of other queues sit in between: one larger read and slicing beats a
        # syscall per run.
        span = log.read(first, last - first)
        if span is not None:
            view = memoryview(span)
            return b"".join([view[a - first : b - first] for a, b in runs])
    parts: list[bytes] = []
    for a, b in runs:
        part = log.read(a, b - a)
        if part is None:
            return None
        parts.append(part)
    return b"".join(parts)


def store_time_at(log: CommitLog, phys: int) -> int:
    """STORETIMESTAMP of the record at `phys`, -1 when it cannot be read."""
    head = log.read(phys, min(_STORE_TS_PROBE, max(0, log.write_pos - phys)))
    if head is None or len(head) < POS_STORETIMESTAMP_V4 + 8:
        return -1
    (sys_flag,) = I32.unpack_from(head, POS_SYSFLAG)
    at = store_timestamp_position(sys_flag)
    if len(head) < at + 8:
        return -1
    ts: int = I64.unpack_from(head, at)[0]
    return ts


def offset_by_time(cq: ConsumeQueue, log: CommitLog, ts: int) -> int:
    """The smallest queue offset whose store time is >= ts (RocketMQ 5's LOWER boundary):
    every message older → max offset, ts before the first → min offset, empty → 0."""
    hi = cq.readable_max
    if hi == 0:
        return 0
    lo = cq.min_offset
    min_phys = log.min_offset
    while lo < hi:
        mid = (lo + hi) // 2
        entry = cq.entry(mid)
        t = -1 if entry is None or entry[0] < min_phys else store_time_at(log, entry[0])
        if t < ts:
            lo = mid + 1
        else:
            hi = mid
    return lo
