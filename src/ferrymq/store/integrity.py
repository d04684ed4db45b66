"""Checking records as they are read, as RocketMQ's checkCRCOnRecover does at recovery but on
every read: a record handed to a consumer must still be the record that was stored.

The consume queue says where a record starts and how long it is; the record itself must agree
(TOTALSIZE, the fields, PHYSICALOFFSET, and the queue: QUEUEID and topic) and, unless trusted,
its body must match its CRC: the record codec's `record_unsound`, compiled with the rest of it,
so a pull of cold records costs about what the copy the read already makes does, and a pull
of fresh ones a few nanoseconds a record. QUEUEOFFSET is not compared: recovery keeps a
record whose queue offset left a gap at the offset its queue expected (store._dispatch)."""

from __future__ import annotations

from collections.abc import Callable

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
from .damage import CorruptPolicy, DamagedRecord, DamageRegistry
from .recovery import check_record

_MAGIC = I32.pack(MESSAGE_MAGIC_CODE)
# How far back no_record_starts_at looks for the record holding an offset: past the largest
# record (4 MiB messages by default).
_SEARCH_BACK = 8 << 20

# (topic, queue id, the record's QUEUEOFFSET, phys) -> the size of that queue's entry naming
# phys, None when it has none.
OwnerEntry = Callable[[str, int, int, int], int | None]


class ReadGuard:
    """What a read does about damage: where it reports it, whether it skips or stops, and
    which records it must verify in full. Every record read must be the one its entry says
    (its TOTALSIZE, layout, PHYSICALOFFSET, QUEUEID and topic: a damaged consume-queue entry is
    caught wherever it points); records this run wrote (at or past `hot_start`) and records the
    scrub has verified (below `scrubbed_to`) are trusted to hold their body, the rest have
    their CRC checked too, until the scrub gets there. One compiled call per pull."""

    __slots__ = ("damage", "hot_start", "owner_entry", "policy", "scrubbed_to")

    def __init__(self, damage: DamageRegistry, policy: CorruptPolicy,
                 owner_entry: OwnerEntry | None = None) -> None:
        self.damage = damage
        self.policy = policy
        self.hot_start = 0  # set at start: where this run's writes begin
        self.scrubbed_to = 0  # raised by the scrub as it goes
        # (phys, size) of a queue's entry at an offset, to tell another queue's record from a
        # record whose own queue fields are damaged (see entry_is_damaged).
        self.owner_entry: OwnerEntry = owner_entry or (lambda _t, _q, _o, _p: None)

    def reason(self, buf: bytes, o: int, qo: int, phys: int, size: int, topic: str,
               queue_id: int) -> str | None:
        if size <= 0:
            return "record cut short"  # the entry's size: no record has it, trusted or not
        known = self.damage.known.get(phys)
        if known is not None:
            return known
        entries = self.damage.known_entries
        if entries:
            known = entries.get((phys, size, topic, queue_id, qo))
            if known is not None:
                return known  # a damaged entry: left out whatever the scrub verified since
        return record_unsound(buf, o, phys, size, queue_id, topic.encode(),
                              self.scrubbed_to <= phys < self.hot_start)

    def any_damaged(self, buf: bytes, topic: str, queue_id: int,
                    picked: Callable[[], list[tuple[int, int, int]]],
                    entries: bytes | None = None, count: int = 0) -> bool:
        """Whether a record of `buf` is damaged: records back to back, as `picked` lists them
        ((queue offset, phys, size)), or as the first `count` consume-queue entries in
        `entries` say (a run taken as it lies: no tuple per record unless damage is known)."""
        known, known_entries = self.damage.known, self.damage.known_entries
        lo, hi = self.scrubbed_to, self.hot_start
        if entries is not None and not known and not known_entries:
            return first_unsound_entries(buf, entries, count, lo, hi, queue_id,
                                         topic.encode()) >= 0
        records = picked()
        if known and any(phys in known for _qo, phys, _size in records):
            return True
        if known_entries and any((phys, size, topic, queue_id, qo) in known_entries
                                 for qo, phys, size in records):
            return True
        return first_unsound(buf, records, lo, hi, queue_id, topic.encode()) >= 0


def entry_is_damaged(guard: ReadGuard, log: CommitLog, phys: int, size: int) -> bool:
    """Whether an entry (phys, size) that failed the read's check is what is damaged, rather
    than the record at `phys`: no record starts there (its offset landed inside a record), or
    a sound record starts there (read with its own TOTALSIZE) and is of another size, or it
    is the record of the queue it names, which has an entry naming it (an entry of one queue
    landing on another queue's record). A record that names a queue without such an entry has
    its own queue fields damaged (the body CRC does not cover them)."""
    rec = log.read_record(phys)
    if rec is None or record_unsound(rec, 0, phys, len(rec)) is not None:
        return no_record_starts_at(log, phys)
    if len(rec) != size:
        return True
    info = record_info(rec, 0, phys, len(rec), tuple)
    if isinstance(info, str):
        return False
    _pos, total, topic, queue_id, queue_offset = info[:5]
    return bool(guard.owner_entry(topic, queue_id, queue_offset, phys) == total)


def no_record_starts_at(log: CommitLog, phys: int) -> bool:
    """Whether `phys` is no record's start, as the log around it tells: it lies inside the
    nearest sound record before it, or in the blank closing its segment (an entry's offset
    damaged). False when that cannot be told (the nearest sound record ends before `phys`,
    damage between): the record there is what is reported. Searches back for a record's magic
    at most _SEARCH_BACK bytes, on damage only."""
    seg = log.segment_for(phys)
    if seg is None:
        return False
    try:
        mm = log.map_segment(seg)
    except (OSError, ValueError):  # deleted by retention meanwhile
        return False
    try:
        o = phys - seg.start
        lo = max(0, o - _SEARCH_BACK)
        end = o + 7  # the magic of a record starting before `o` ends by o + 7
        while True:
            hit = mm.rfind(_MAGIC, lo + 4, end)
            if hit < 0:
                return False
            checked = check_record(mm, hit - 4, seg.start + hit - 4, log.segment_size, False)
            if not isinstance(checked, str):
                after = hit - 4 + checked[0]
                break
            end = hit + 3
        if after > o:
            return True
        if log.segment_size - after < END_FILE_MIN_BLANK:
            return True
        total, magic = SIZE_AND_MAGIC.unpack_from(mm, after)
        return bool(magic == BLANK_MAGIC_CODE and after + total == log.segment_size)
    finally:
        mm.close()


def report_damage(damage: DamageRegistry, log: CommitLog, phys: int, size: int, reason: str,
                  found_by: str, read_at: int | None, topic: str = "", queue_id: int = -1,
                  queue_offset: int = -1) -> bool:
    """Report damage at `phys`, naming the segment that holds it (DamageRegistry.report)."""
    seg = log.segment_for(phys)
    return damage.report(DamagedRecord(phys, size, str(seg.path) if seg else "", reason, found_by,
                                       topic, queue_id, queue_offset), read_at)


def drop_damaged(guard: ReadGuard, log: CommitLog, topic: str, queue_id: int, data: bytes,
                 picked: list[tuple[int, int, int]], read_at: int) -> tuple[bytes, int, int]:
    """Report the damaged records among `picked` and keep the sound ones. Returns (data,
    count, stop): under SKIP every sound record is kept and stop is -1; under STOP only those
    before the first damaged one, and stop is that record's queue offset. `read_at`: the
    damage registry's generation before `data` was read (a slave's cut of the log since then
    voids the reports at or past it)."""
    view = memoryview(data)
    parts: list[memoryview] = []
    o = 0
    stop = -1
    log_end = log.write_pos
    for qo, phys, size in picked:
        # An entry naming bytes past the log's end has none in `data` (reads.py).
        past_end = size > 0 and phys + size > log_end
        reason = (f"the entry names bytes past the commit log's end ({log_end})" if past_end
                  else guard.reason(data, o, qo, phys, size, topic, queue_id))
        if reason is None:
            parts.append(view[o : o + size])
        else:
            # The entry is what is damaged (entry_is_damaged: its size, or an offset landing on
            # another queue's record): reported as such, so that the record stays in the reads
            # of the entry that does point at it. An entry without a positive size, or naming
            # bytes past the log's end, is damaged whatever lies at its offset: reported as the
            # record's damage, it hid the record written there later.
            found_by = ("entry" if size <= 0 or past_end or (
                phys not in guard.damage.known and entry_is_damaged(guard, log, phys, size))
                        else "read")
            report_damage(guard.damage, log, phys, size, reason, found_by, read_at, topic,
                          queue_id, qo)
            if guard.policy is CorruptPolicy.STOP:
                stop = qo
                break
        if size > 0 and not past_end:  # an entry without a positive size has no bytes either
            o += size
    return b"".join(parts), len(parts), stop
