"""The commit log as a replication source and target (docs/replication.md).

A master ships its log in spans of whole records read from the files; a slave writes them at
the same offsets, so the two logs are byte-identical, and dispatches them into its consume
queues and index exactly as recovery does. A slave that learns it holds bytes its master
never had cuts them (`truncate_log`)."""

from __future__ import annotations

import logging
from dataclasses import dataclass

from ..common.record import BLANK_MAGIC_CODE, MESSAGE_MAGIC_CODE, record_info
from ..common.record.layout import SIZE_AND_MAGIC
from .commitlog import END_FILE_MIN_BLANK
from .core import Pending, StoreCore
from .epochs import EpochFile
from .errors import StoreError
from .reads import store_time_at
from .recovery import RecordInfo

log = logging.getLogger("ferrymq.store")

class ReplicaError(StoreError):
    """Replicated bytes that cannot be applied: the stream and the log disagree."""

    def __init__(self, pos: int, reason: str) -> None:
        super().__init__(f"replication at commit-log offset {pos}: {reason}")
        self.pos = pos
        self.reason = reason


@dataclass(frozen=True, slots=True)
class Span:
    pos: int
    data: bytes
    next_pos: int  # where the following span starts (past a segment's blank record: the next segment)


class ReplicaLog:
    """The log as a replication source and target (MessageStore.replica)."""

    def __init__(self, core: StoreCore) -> None:
        self._core = core
        self._epochs: EpochFile | None = None

    @property
    def epochs(self) -> EpochFile:
        epochs = self._epochs
        if epochs is None:
            epochs = EpochFile(self._core.root / "epochs.json")
            epochs.load()
            self._epochs = epochs
        return epochs

    # --- master side -----------------------------------------------------------------------
    def read_span(self, pos: int, max_bytes: int) -> Span | None:
        """Whole records from `pos` (a record boundary), about `max_bytes` of them (at least
        one record, however large), or None when nothing lies past `pos` yet."""
        clog = self._core.commitlog
        end = clog.write_pos
        if pos >= end:
            return None
        seg = clog.segment_for(pos)
        if seg is None:
            raise ReplicaError(pos, f"not in the log, which holds [{clog.min_offset}, {end})")
        avail = min(end, seg.end) - pos
        data = clog.read(pos, min(avail, max(max_bytes, END_FILE_MIN_BLANK)))
        if data is None:
            raise ReplicaError(pos, "the log could not be read there")
        if pos + len(data) == end < seg.end:
            # Up to the log's end, inside the segment: whole records, since the end only moves
            # past whole records and a blank only ever ends a segment. A slave keeping up
            # reads this way nearly always; the walk below costs a master about half a
            # microsecond a record, and the slave checks every record anyway.
            return Span(pos, data, end)
        o = 0
        while o + END_FILE_MIN_BLANK <= len(data):
            total, magic = SIZE_AND_MAGIC.unpack_from(data, o)
            if magic == BLANK_MAGIC_CODE:
                return Span(pos, data[: o + END_FILE_MIN_BLANK], seg.end)
            if magic != MESSAGE_MAGIC_CODE or total <= 0:
                raise ReplicaError(pos + o, f"no record starts there (magic {magic:#x})")
            if o + total > len(data):
                if o == 0:  # one record larger than max_bytes: ship it alone
                    whole = clog.read(pos, total)
                    if whole is None:
                        raise ReplicaError(pos, f"record of {total} bytes could not be read")
                    return Span(pos, whole, pos + total)
                break
            o += total
        return Span(pos, data[:o], pos + o)

    # --- slave side ------------------------------------------------------------------------
    def append_replicated(self, span: Span) -> None:
        """Write a master's span at its own offset and dispatch its records. Every record is
        checked (size, magic, position, body CRC) before anything is written."""
        pos, data = span.pos, span.data
        infos: list[RecordInfo] = []
        blank_at = -1
        o = 0
        n = len(data)
        # A blank record can only be the span's last 8 bytes; record_info checks the rest.
        last = n - END_FILE_MIN_BLANK
        while o < n:
            if o == last and SIZE_AND_MAGIC.unpack_from(data, o)[1] == BLANK_MAGIC_CODE:
                blank_at = o
                break
            info = record_info(data, o, pos + o, n, RecordInfo)
            if type(info) is str:
                raise ReplicaError(pos + o, info)
            infos.append(info)
            o += info.size
        core = self._core
        clog = core.commitlog
        with core.lock:
            if pos != clog.write_pos:
                raise ReplicaError(pos, f"the log ends at {clog.write_pos}")
            seg = clog.segment_for(pos) or clog.create(pos - pos % clog.segment_size)
            if pos + len(data) > seg.end or (blank_at >= 0 and span.next_pos != seg.end):
                raise ReplicaError(pos, "the span does not fit the segment")
            if blank_at < 0 and span.next_pos != pos + len(data):
                raise ReplicaError(pos, f"next position {span.next_pos} is not the span's end")
            if core.preallocator is not None:
                core.preallocator.claim(pos + len(data))
            clog.write(pos, data)
            pending: Pending = {}
            keys = bytearray()
            core.dispatch(infos, pending, keys)
            queues = list(pending)
            written = core.write_pending(pending, keys, commit=False)
            # The log's end first, then the entries readers see (as a master's append does):
            # an entry visible before the bytes it names were in the log read as one naming
            # bytes past the log's end, and was reported as damage.
            clog.write_pos = span.next_pos
            for cq in written:
                cq.commit()
            arrivals = [(t, q, core.cqs[(t, q)].max_offset) for t, q in queues]
        core.appended(arrivals)

    def truncate_log(self, pos: int) -> int:
        """Cut the log, its queues and damage reports at `pos`; returns the bytes cut. A
        checkpoint no further than the cut is written before it, and a full one after it, so
        a crash during or after the cut does not recover past it."""
        core = self._core
        clog = core.commitlog
        # The checkpoint lock first (checkpoint's order): no checkpoint may be written
        # between the one below and the cut.
        with core.checkpoint_lock, core.lock:
            end = clog.write_pos
            if pos >= end:
                return 0
            pos = max(pos, clog.min_offset)
            # Before the cut: killed after it, the last checkpoint, past the cut, had
            # recovery start in the zeros the cut left and call the log's end there, leaving
            # a hole between the records and the end where appends went on, so the slave
            # could no longer take its master's records at the cut.
            core.checkpoint_below(pos)
            # Reads and the scrub report damage under this lock (integrity.py): none reports
            # from bytes cut, and the scrub's pass ends here.
            core.guard.reports.drop_from(pos)
            if core.scrubber is not None:
                core.scrubber.cut(pos)
            if core.preallocator is None:
                clog.truncate(pos)
            else:
                with core.preallocator.cutting():
                    clog.truncate(pos)
            for cq in core.cqs.values():
                cq.truncate_phys(pos)
            core.index.cut(pos)
            # What was held back past the cut is gone; what is left agrees with the master.
            core.visibility.advance(None)
        core.checkpoint()
        log.warning("commit log truncated from %d to %d (%d bytes its master never had)",
                    end, pos, end - pos)
        return end - pos

    def restart_at(self, pos: int) -> None:
        """An empty log starts at `pos`, the master's first offset (its older segments are
        gone), instead of 0."""
        clog = self._core.commitlog
        with self._core.lock:
            if clog.segments or clog.write_pos == pos:
                if clog.write_pos != pos:
                    raise ReplicaError(pos, f"the log is not empty (it ends at {clog.write_pos})")
                return
            clog.write_pos = clog.flushed = pos

    def record_store_time(self, phys: int) -> int:
        """STORETIMESTAMP of the record at `phys`; -1 when none starts there."""
        return store_time_at(self._core.commitlog, phys)
