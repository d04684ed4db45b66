"""Reading the commit log back after a crash: verify records from the last consistent point,
find where the log really ends, and tell a torn tail from corruption in the middle.

A record is valid when its TOTALSIZE fits its segment, its magic is a message's, its fields
end exactly where TOTALSIZE says, its PHYSICALOFFSET field equals its own position and its
body matches BODYCRC. The position check makes a stray copy of a record (inside a body, or in
garbage) unable to pass for one.

Policy for a bad record (checksum, size or magic wrong; or zeros where a record should be):
if no valid record exists anywhere after it, it is a torn tail and the log is truncated
there. If a valid record follows, the log is corrupt in the middle: recovery refuses with
StoreCorruptionError naming the segment file and offset (unless the operator opted into
truncation). Zero-filled holes are skipped with SEEK_DATA, so the search costs little.

Tail check. A clean checkpoint says where the log ended; the segment files must still hold
that many bytes. A file cut shorter (a copy interrupted, a file system repaired) is treated as
a crash tail: recovery verifies the log from the last record that starts before the cut."""

from __future__ import annotations

import mmap
import os
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import NamedTuple

from ..common.names import SCHEDULE_TOPIC
from ..common.record import BLANK_MAGIC_CODE, MESSAGE_MAGIC_CODE, record_info
from ..common.record.layout import I32, SIZE_AND_MAGIC
from .commitlog import END_FILE_MIN_BLANK, CommitLog, Segment
from .consumequeue import ConsumeQueue
from .encoder import tag_code

_MAGIC_BYTES = I32.pack(MESSAGE_MAGIC_CODE)


class RecordInfo(NamedTuple):
    """What dispatching a record into its consume queue and the key index needs: the four
    properties that matter are scanned for, the rest are not decoded."""

    pos: int
    size: int
    topic: str
    queue_id: int
    queue_offset: int
    store_ts: int
    tags: str | None
    keys: str | None
    uniq: str | None
    delay: str | None


def entry_tag(info: RecordInfo, delay_levels: Sequence[int]) -> int:
    """The tag code of a record's consume-queue entry: in the schedule topic the time it is
    due (its store time plus its delay level's delay), else the hash of its TAGS."""
    if info.topic == SCHEDULE_TOPIC:
        raw_level = info.delay or "1"
        level = int(raw_level) if raw_level.isdigit() else 1
        return info.store_ts + delay_levels[min(max(level, 1), len(delay_levels)) - 1]
    return tag_code(info.tags) if info.tags else 0


@dataclass
class RecoveryReport:
    start: int
    end: int
    records: int
    seconds: float
    torn_tail: str = ""


@dataclass(slots=True)
class ScanEnd:
    end: int  # where the valid log ends
    bad_reason: str  # "" when the log ends cleanly (zeros after the last record)


def check_record(mm: mmap.mmap | bytes, o: int, pos: int, seg_end_o: int,
                 decode: bool) -> tuple[int, RecordInfo | None] | str:
    """Verify the record at segment offset `o` (physical `pos`). Returns (size, info) or the
    reason it is not a valid record."""
    info = record_info(mm, o, pos, seg_end_o - END_FILE_MIN_BLANK, RecordInfo)
    if isinstance(info, str):
        return info
    return info.size, (info if decode else None)


class Scanner:
    """Iterates valid records from `start`; afterwards `result` says where and why it
    stopped."""

    def __init__(self, log: CommitLog, start: int, decode: bool = True) -> None:
        self.log = log
        self.start = start
        self.decode = decode
        self.result = ScanEnd(start, "")

    def __iter__(self) -> Iterator[RecordInfo]:
        log = self.log
        pos = self.start
        while True:
            seg = log.segment_for(pos)
            if seg is None:
                self.result = ScanEnd(pos, "")
                return
            mm = log.map_segment(seg)
            try:
                o = pos - seg.start
                size_o = log.segment_size
                while True:
                    if size_o - o < END_FILE_MIN_BLANK:
                        self.result = ScanEnd(pos, "segment ends without a blank record")
                        return
                    total, magic = SIZE_AND_MAGIC.unpack_from(mm, o)
                    if magic == BLANK_MAGIC_CODE:
                        if total != size_o - o:
                            self.result = ScanEnd(pos, f"blank record of size {total} does "
                                                       f"not reach the segment end")
                            return
                        pos = seg.end
                        break
                    if total == 0 and magic == 0:
                        self.result = ScanEnd(pos, "")
                        return
                    checked = check_record(mm, o, pos, size_o, self.decode)
                    if isinstance(checked, str):
                        self.result = ScanEnd(pos, checked)
                        return
                    size, info = checked
                    if info is not None:
                        yield info
                    o += size
                    pos += size
            finally:
                mm.close()


def find_valid_after(log: CommitLog, pos: int) -> int | None:
    """The position of the first valid record after `pos` (exclusive), or None. Looks for the
    magic code in data regions only (holes cannot hold records)."""
    for seg in log.segments:
        if seg.end <= pos:
            continue
        mm = log.map_segment(seg)
        try:
            o = max(0, pos + 1 - seg.start)
            for data_start, data_end in _data_regions(seg, o, log.segment_size):
                at = max(data_start, o)
                while True:
                    hit = mm.find(_MAGIC_BYTES, at + 4, data_end)
                    if hit < 0:
                        break
                    cand = hit - 4
                    if cand >= o and not isinstance(
                            check_record(mm, cand, seg.start + cand, log.segment_size, False), str):
                        return seg.start + cand
                    at = hit - 3
        finally:
            mm.close()
    return None


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


def _data_regions(seg: Segment, start: int, size: int) -> Iterator[tuple[int, int]]:
    pos = start
    while pos < size:
        try:
            data = os.lseek(seg.fd, pos, os.SEEK_DATA)
        except OSError:  # ENXIO: only a hole remains
            return
        try:
            hole = os.lseek(seg.fd, data, os.SEEK_HOLE)
        except OSError:
            hole = size
        # A record found by its magic may start up to 4 bytes before the data region.
        yield max(start, data - 4), min(hole, size)
        pos = hole
