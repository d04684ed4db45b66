"""Checking records as they are read, as RocketMQ's checkCRCOnRecover does at recovery but on
every read: a record handed to a consumer must still be the record that was stored.

The consume queue says where a record starts and how long it is; the record itself must agree
(TOTALSIZE, magic, PHYSICALOFFSET) and its body must match its CRC. One CRC per record costs
far less than the copy the read already makes."""

from __future__ import annotations

import struct
from dataclasses import dataclass

from .commitlog import END_FILE_MIN_BLANK, CommitLog
from .damage import CorruptPolicy, DamagedRecord, DamageRegistry
from .recovery import check_record

_TOTAL = struct.Struct(">i")


def verify_record(buf: bytes, o: int, phys: int, size: int) -> str | None:
    """Why the `size` bytes at `o` of `buf` are not the record stored at `phys`, or None."""
    if o + size > len(buf):
        return "record cut short"
    (total,) = _TOTAL.unpack_from(buf, o)
    if total != size:
        return f"TOTALSIZE {total} differs from the consume queue's {size}"
    # The record is judged within its own bytes: the limit is its end plus a blank's room.
    checked = check_record(buf, o, phys, o + size + END_FILE_MIN_BLANK, False)
    return checked if isinstance(checked, str) else None


def first_damaged(buf: bytes, picked: list[tuple[int, int, int]]) -> int:
    """Index in `picked` ((queue offset, phys, size) of the records `buf` holds back to back)
    of the first damaged record, or -1 when all are sound."""
    o = 0
    for i, (_qo, phys, size) in enumerate(picked):
        if verify_record(buf, o, phys, size) is not None:
            return i
        o += size
    return -1


@dataclass(frozen=True, slots=True)
class ReadGuard:
    """What a read does about damage: where it reports it and whether it skips or stops."""

    damage: DamageRegistry
    policy: CorruptPolicy


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
        reason = verify_record(data, o, phys, size)
        if reason is None:
            parts.append(view[o : o + size])
        else:
            seg = log.segment_for(phys)
            guard.damage.report(DamagedRecord(phys, size, str(seg.path) if seg else "", reason,
                                              "read", topic, queue_id, qo))
            if guard.policy is CorruptPolicy.STOP:
                stop = qo
                break
        o += size
    return b"".join(parts), len(parts), stop
