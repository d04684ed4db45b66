"""Checking records as they are read, as RocketMQ's checkCRCOnRecover does at recovery but on
every read: a record handed to a consumer must still be the record that was stored.

The consume queue says where a record starts and how long it is; the record itself must agree
(TOTALSIZE, magic, PHYSICALOFFSET) and its body must match its CRC. One CRC per record costs
far less than the copy the read already makes."""

from __future__ import annotations

import struct
import zlib

from ..common.record import MESSAGE_MAGIC_CODE
from ..common.record.layout import HOST_FLAGS
from .commitlog import END_FILE_MIN_BLANK, CommitLog
from .damage import CorruptPolicy, DamagedRecord, DamageRegistry
from .recovery import check_record

# TOTALSIZE .. BODYLEN with IPv4 born and store hosts (the usual layout): one unpack.
_FIXED_V4 = struct.Struct(">iiiiiqqiq8sq8siqi")
_crc32 = zlib.crc32


def verify_record(buf: bytes, o: int, phys: int, size: int) -> str | None:
    """Why the `size` bytes at `o` of `buf` are not the record stored at `phys`, or None."""
    if o + size > len(buf) or size < _FIXED_V4.size + 3:
        return "record cut short"
    (total, magic, crc, _q, _f, _qo, at, sys_flag, _bt, _bh, _st, _sh, _r, _p,
     body_len) = _FIXED_V4.unpack_from(buf, o)
    if total != size:
        return f"TOTALSIZE {total} differs from the consume queue's {size}"
    if sys_flag & HOST_FLAGS:  # the rare layout: recovery's general check
        checked = check_record(buf, o, phys, o + size + END_FILE_MIN_BLANK, False)
        return checked if isinstance(checked, str) else None
    if magic != MESSAGE_MAGIC_CODE:
        return f"magic {magic & 0xFFFFFFFF:#010x}"
    if at != phys:
        return f"PHYSICALOFFSET field {at} is not the record's position"
    # Checked field by field, as recovery does, but with one unpack for the fixed part.
    body_at = o + _FIXED_V4.size
    end = o + size
    topic_len_at = body_at + body_len
    if body_len < 0 or topic_len_at + 3 > end:
        return f"body length {body_len} overruns the record"
    props_len_at = topic_len_at + 1 + buf[topic_len_at]
    if props_len_at + 2 > end:
        return "topic overruns the record"
    if props_len_at + 2 + ((buf[props_len_at] << 8) | buf[props_len_at + 1]) != end:
        return "properties do not end where the record ends"
    if _crc32(memoryview(buf)[body_at:topic_len_at]) & 0x7FFFFFFF != crc:
        return "body CRC mismatch"
    return None


class ReadGuard:
    """What a read does about damage: where it reports it, whether it skips or stops, and
    which records it must verify. Records this run wrote (at or past `hot_start`) and records
    the scrub has verified (below `scrubbed_to`) are trusted, except those known damaged;
    the rest are checked record by record. So a pull of fresh messages costs no CRC, and a
    pull of cold ones costs one until the scrub gets there."""

    __slots__ = ("damage", "hot_start", "policy", "scrubbed_to")

    def __init__(self, damage: DamageRegistry, policy: CorruptPolicy) -> None:
        self.damage = damage
        self.policy = policy
        self.hot_start = 0  # set at start: where this run's writes begin
        self.scrubbed_to = 0  # raised by the scrub as it goes

    def reason(self, buf: bytes, o: int, phys: int, size: int) -> str | None:
        if size <= 0:
            return "record cut short"  # the entry's size: no record has it, trusted or not
        known = self.damage.known.get(phys)
        if known is not None:
            return known
        if self.scrubbed_to <= phys < self.hot_start:
            return verify_record(buf, o, phys, size)
        return None

    def runs_sound(self, runs: list[list[int]]) -> bool:
        """Whether no record starting in these [start, end) commit-log runs can be damaged:
        none is known to be, and none lies in the range the scrub has yet to verify. One test
        per run: a pull of fresh records is not walked record by record. Every record must
        start inside its run (a positive size), else a run can end at or before the range
        while a record of it starts in there."""
        if self.damage.known:
            return False
        lo, hi = self.scrubbed_to, self.hot_start
        return all(end <= lo or start >= hi for start, end in runs)

    def any_damaged(self, buf: bytes, picked: list[tuple[int, int, int]]) -> bool:
        """Whether a record of `buf` ((queue offset, phys, size) back to back) is damaged."""
        known = self.damage.known
        lo, hi = self.scrubbed_to, self.hot_start
        o = 0
        for _qo, phys, size in picked:
            if size <= 0 or (known and phys in known):
                return True
            if lo <= phys < hi and verify_record(buf, o, phys, size) is not None:
                return True
            o += size
        return False


def drop_damaged(guard: ReadGuard, log: CommitLog, topic: str, queue_id: int, data: bytes,
                 picked: list[tuple[int, int, int]]) -> tuple[bytes, int, int]:
    """Report the damaged records among `picked` and keep the sound ones. Returns (data,
    count, stop): under SKIP every sound record is kept and stop is -1; under STOP only those
    before the first damaged one, and stop is that record's queue offset."""
    view = memoryview(data)
    parts: list[memoryview] = []
    o = 0
    stop = -1
    for qo, phys, size in picked:
        reason = guard.reason(data, o, phys, size)
        if reason is None:
            parts.append(view[o : o + size])
        else:
            seg = log.segment_for(phys)
            guard.damage.report(DamagedRecord(phys, size, str(seg.path) if seg else "", reason,
                                              "read", topic, queue_id, qo))
            if guard.policy is CorruptPolicy.STOP:
                stop = qo
                break
        if size > 0:  # an entry without a positive size has no bytes in `data`
            o += size
    return b"".join(parts), len(parts), stop
