"""Consume-queue entries rebuilt from the commit log, as recovery and RocketMQ's reput derive
them. When a read finds an entry that disagrees with its record and the entry is what is wrong
(integrity.py), the log between the records of the nearest sound entries before and after it
is scanned: if this queue's records there are exactly as many as the entries, they replace
them. If not, the entries cannot be told apart (a queue file restored into another queue's
directory, a record whose queue fields are damaged) and nothing is rewritten."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import NamedTuple

from ..common.record import record_unsound
from .commitlog import CommitLog
from .consumequeue import ENTRY, ConsumeQueue
from .recovery import RecordInfo, Scanner, entry_tag

# Sound entries are looked for this many entries either way, and at most this much of the
# log is scanned between them: past that the entry is reported as damaged instead.
_WALK = 64
_MAX_SCAN = 32 << 20

# (queue, first queue offset, entries): writes entries over a queue's (under the store lock).
Rewrite = Callable[[ConsumeQueue, int, bytes], None]


class Plan(NamedTuple):
    first: int  # the entries [first, end_entry) are replaced by those of `records`
    end_entry: int
    old: bytes
    start: int  # the log range [start, end) the records were found in
    end: int
    to_log_end: bool  # no sound entry after them: the range runs to the log's end
    records: list[RecordInfo]


def raw_entries(cq: ConsumeQueue, first: int, end: int) -> bytes:
    out = bytearray()
    while first < end:
        raw = cq.read_raw(first, end - first)
        if not raw:
            break
        out += raw
        first += len(raw) // ENTRY.size
    return bytes(out)


def _sound(clog: CommitLog, cq: ConsumeQueue, k: int) -> tuple[int, int] | None:
    """(phys, size) of entry `k` when its record agrees with it, body CRC included."""
    entry = cq.entry(k)
    data = None if entry is None or entry[1] <= 0 else clog.read(entry[0], entry[1])
    if entry is None or data is None or record_unsound(
            data, 0, entry[0], entry[1], cq.queue_id, cq.topic.encode()) is not None:
        return None
    return entry[0], entry[1]


def plan(clog: CommitLog, cq: ConsumeQueue, qo: int) -> Plan | None:
    """What rebuilding the entries around `qo` would write, None when it cannot be done.
    Reads only, without the lock, as the store's readers do."""
    first, start = qo, -1
    while first > max(cq.min_offset, qo - _WALK) and start < 0:
        found = _sound(clog, cq, first - 1)
        first, start = (first - 1, -1) if found is None else (first, sum(found))
    if start < 0:
        if first != cq.min_offset:
            return None
        start = clog.min_offset
    last, end = qo + 1, -1
    readable = cq.readable_max
    while last < min(readable, qo + _WALK) and end < 0:
        found = _sound(clog, cq, last)
        last, end = (last + 1, -1) if found is None else (last, found[0])
    to_log_end = end < 0
    if to_log_end:
        if last != readable or readable != cq.max_offset:
            return None
        end = clog.write_pos
    if not start <= end <= start + _MAX_SCAN:
        return None
    old = raw_entries(cq, first, last)
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
    return Plan(first, last, old, start, end, to_log_end, records)


def apply(clog: CommitLog, cq: ConsumeQueue, p: Plan, delay_levels: Sequence[int],
          rewrite: Rewrite) -> bool | None:
    """Write the plan's entries (the caller holds the store lock): True when written, False
    when the queue or the log moved since it was made (read again), None when it changes
    nothing. OSError from the write is the caller's."""
    if (raw_entries(cq, p.first, p.end_entry) != p.old or clog.min_offset > p.start
            or clog.write_pos < p.end or (p.to_log_end and cq.max_offset != p.end_entry)):
        return False
    pack = ENTRY.pack
    packed = b"".join([pack(i.pos, i.size, entry_tag(i, delay_levels)) for i in p.records])
    if packed == p.old:
        return None
    rewrite(cq, p.first, packed)
    return True
