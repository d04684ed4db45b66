"""The store's read side (MessageStore.reads): pulls, consume-queue entries, single records,
queue offsets and times, and lookups by key. Like every reader of the store it takes no lock
(see store.py) and stops at each queue's readable end (store/visibility.py)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, NamedTuple

from ..common.props import (
    KEY_SEPARATOR,
    PROPERTY_KEYS,
    PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX,
)
from ..common.record import (
    MESSAGE_MAGIC_CODE,
    MIN_RECORD_SIZE,
    MessageDecodeError,
    decode_record,
    record_unsound,
)
from ..common.record.layout import SIZE_AND_MAGIC
from .consumequeue import ENTRY
from .core import StoreCore
from .damage import CorruptPolicy
from .integrity import Verdict
from .model import GetResult, GetStatus, QueueEntry
from .reads import RecordFilter, get_messages, offset_by_time, store_time_at

if TYPE_CHECKING:
    from ..common.message import MessageExt

DEFAULT_MAX_BYTES = 4 * 1024 * 1024


class KeyHit(NamedTuple):
    """A record found by key: its commit-log offset, its bytes, and it decoded (bodies left
    compressed)."""

    phys: int
    raw: bytes
    message: MessageExt


class StoreReads:
    def __init__(self, core: StoreCore) -> None:
        # The core never replaces these (the queue map changes in place).
        self._log = core.commitlog
        self._cqs = core.cqs
        self._index = core.index
        self._guard = core.guard

    # --- reads ---------------------------------------------------------------------------------
    def get_messages(self, topic: str, queue_id: int, offset: int, max_nums: int,
                     tag_filter: Callable[[int], bool] | None = None,
                     max_bytes: int = DEFAULT_MAX_BYTES,
                     record_filter: RecordFilter | None = None) -> GetResult:
        cq = self._cqs.get((topic, queue_id))
        if cq is None:
            return GetResult(GetStatus.NO_MATCHED_LOGIC_QUEUE, b"", 0, 0, 0, 0)
        return get_messages(cq, self._log, offset, max_nums, tag_filter, max_bytes,
                            self._guard, record_filter)

    def read_queue_entries(self, topic: str, queue_id: int, offset: int,
                           max_n: int) -> list[QueueEntry]:
        cq = self._cqs.get((topic, queue_id))
        out: list[QueueEntry] = []
        if cq is None:
            return out
        offset = max(offset, cq.min_offset)
        end = cq.readable_max
        while len(out) < max_n and offset < end:
            raw = cq.read_raw(offset, min(max_n - len(out), end - offset))
            if not raw:
                break
            for phys, size, tag in ENTRY.iter_unpack(raw):
                out.append(QueueEntry(offset, phys, size, tag))
                offset += 1
        return out

    def read_queue_record(self, topic: str, queue_id: int, entry: QueueEntry) -> bytes | None:
        """The record a queue's entry names (from read_queue_entries), checked as a pull checks
        its records: TOTALSIZE, fields, position, queue, and the body CRC unless trusted. None
        when it cannot be read or is damaged (damage is reported as a pull reports it). For the
        broker's own readers of queues (schedule, timer, transactions, gRPC): read_record trusts
        the entry, and handed another queue's message, or bytes cut to a wrong size, on."""
        status, data = self.read_queue_record_status(topic, queue_id, entry)
        return data if status is GetStatus.FOUND else None

    def read_queue_record_status(self, topic: str, queue_id: int,
                                 entry: QueueEntry) -> tuple[GetStatus, bytes]:
        """read_queue_record with why there is no record: FOUND, MESSAGE_DAMAGED (reported;
        a reader passes over it when `skips_damaged`, as a pull does) or MESSAGE_WAS_REMOVING
        (not readable now). An entry rebuilt from the log (integrity.py) is read again: the
        record found is the one the queue holds at that offset."""
        guard, clog = self._guard, self._log
        cq = self._cqs.get((topic, queue_id))
        qo, phys, size = entry.queue_offset, entry.phys_offset, entry.size
        for _ in range(3):
            if cq is None or (size > 0 and phys < clog.min_offset):
                break
            # No bytes for an entry without a positive size or naming bytes past the log's
            # end: both wrong (the guard judges them).
            past_end = size <= 0 or phys + size > clog.write_pos
            data = b"" if past_end else clog.read(phys, size)
            if data is None:
                break
            reason = (f"the entry names bytes past the commit log's end ({phys + size})"
                      if past_end else guard.reason(data, 0, phys, size, topic, queue_id))
            if reason is None:
                return GetStatus.FOUND, data
            verdict = guard.judge(cq, qo, phys, size, reason)
            if verdict is Verdict.DAMAGED:
                return GetStatus.MESSAGE_DAMAGED, b""
            rebuilt = cq.entry(qo) if verdict is Verdict.REBUILT else None
            if rebuilt is None:
                break
            phys, size, _tag = rebuilt
        return GetStatus.MESSAGE_WAS_REMOVING, b""

    @property
    def skips_damaged(self) -> bool:
        """Whether reads pass over damaged records (on_corrupt_record SKIP) or stop at them."""
        return self._guard.policy is CorruptPolicy.SKIP

    def read_sound_record(self, phys_offset: int, size: int | None = None) -> bytes | None:
        """read_record, and None unless the record is sound: its fields and body CRC (not
        trusted: the callers store its bytes again under a new CRC, or hand them on). Damage
        found here is reported as a read's is."""
        raw = self.read_record(phys_offset, size)
        if raw is None:
            return None
        reason = record_unsound(raw, 0, phys_offset, len(raw))
        if reason is None:
            return raw
        n = len(raw)

        def still_damaged() -> bool:  # under the store lock: no cut removed it meanwhile
            now = self.read_record(phys_offset, n)
            return now is not None and record_unsound(now, 0, phys_offset, n) is not None

        guard = self._guard
        guard.report_if(guard.damage(phys_offset, n, reason, "read"), still_damaged)
        return None

    def read_record(self, phys_offset: int, size: int | None = None) -> bytes | None:
        clog = self._log
        if phys_offset < clog.min_offset or phys_offset + MIN_RECORD_SIZE > clog.write_pos:
            return None
        if size is not None:
            data = clog.read(phys_offset, size)
            if data is None or len(data) < 8:
                return None
            total, magic = SIZE_AND_MAGIC.unpack_from(data)
            return data if magic == MESSAGE_MAGIC_CODE and total == size else None
        return clog.read_record(phys_offset)

    def get_max_offset(self, topic: str, queue_id: int) -> int:
        cq = self._cqs.get((topic, queue_id))
        return cq.readable_max if cq is not None else 0

    def get_min_offset(self, topic: str, queue_id: int) -> int:
        cq = self._cqs.get((topic, queue_id))
        return cq.min_offset if cq is not None else 0

    def get_offset_by_time(self, topic: str, queue_id: int, timestamp_ms: int) -> int:
        cq = self._cqs.get((topic, queue_id))
        return offset_by_time(cq, self._log, timestamp_ms) if cq is not None else 0

    def get_store_time(self, topic: str, queue_id: int, offset: int) -> int:
        cq = self._cqs.get((topic, queue_id))
        if cq is None or not cq.min_offset <= offset < cq.readable_max:
            return -1
        entry = cq.entry(offset)
        if entry is None or entry[0] < self._log.min_offset:
            return -1
        return store_time_at(self._log, entry[0])

    def get_earliest_store_time(self, topic: str, queue_id: int) -> int:
        return self.get_store_time(topic, queue_id, self.get_min_offset(topic, queue_id))

    def queues(self) -> dict[str, list[int]]:
        out: dict[str, list[int]] = {}
        for topic, qid in list(self._cqs):
            out.setdefault(topic, []).append(qid)
        for qids in out.values():
            qids.sort()
        return out


    # --- index ---------------------------------------------------------------------------------
    def query_by_key(self, topic: str, key: str, max_num: int, begin_ts: int = 0,
                     end_ts: int = 0) -> list[int]:
        return [hit.phys for hit in self.find_by_key(topic, key, max_num, begin_ts, end_ts)]

    def query_by_uniq_key(self, topic: str, key: str) -> list[int]:
        return [hit.phys for hit in self.find_by_uniq_key(topic, key)]

    def find_by_key(self, topic: str, key: str, max_num: int, begin_ts: int = 0,
                    end_ts: int = 0) -> list[KeyHit]:
        """The records of `topic` whose KEYS hold `key`, as read and decoded to check them
        (callers need not read them again), in commit-log order."""
        if end_ts <= 0:
            end_ts = 2**63 - 1
        return self._find(topic, key, max_num, begin_ts, end_ts, uniq=False)

    def find_by_uniq_key(self, topic: str, key: str) -> list[KeyHit]:
        return self._find(topic, key, 32, 0, 2**63 - 1, uniq=True)

    def _find(self, topic: str, key: str, max_num: int, begin_ts: int, end_ts: int,
              uniq: bool) -> list[KeyHit]:
        found: list[KeyHit] = []
        seen: set[int] = set()
        for phys in self._index.query(topic, key, max_num * 4 + 16, begin_ts, end_ts):
            if phys in seen:
                continue
            seen.add(phys)
            raw = self.read_sound_record(phys)
            if raw is None:
                continue
            try:
                msg = decode_record(raw, decompress=False)
            except MessageDecodeError:
                continue
            if msg.topic != topic:
                continue
            if uniq:
                match = msg.properties.get(PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX) == key
            else:
                match = key in msg.properties.get(PROPERTY_KEYS, "").split(KEY_SEPARATOR)
            if match:
                found.append(KeyHit(phys, raw, msg))
                if len(found) >= max_num:
                    break
        return sorted(found, key=lambda hit: hit.phys)
