"""Consumer offsets (config/consumerOffset.json).

The file keeps RocketMQ's shape, `{"offsetTable": {"topic@group": {queueId: offset}}}`, so its
tools read it. Each queue's progress is a QueueProgress rather than a bare number: besides the
committed offset it can carry offsets above it that are already acknowledged (precise
acknowledgement), persisted under a separate key that RocketMQ's tools ignore.

Every commit also goes to the offset journal (offset_journal.py); `wait_durable` lets a
request handler answer only once its commit is on disk, and starts the journal's write at
once. A commit nobody waits for (the offset a pull carries, a consumer's oneway round sent
within a millisecond of its completions) is written within `journal_delay` with whatever
comes meanwhile: written at once, a consumer's pulls kept the broker doing a thread
hand-over, a write and an fsync per pull. A write holds one record per queue committed since
the previous one, its progress as it is then: a consumer committing a thousand times a second
costs the journal what one commit per write does. The JSON file is the compacted snapshot
written every flush_consumer_offset_interval and at shutdown."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..common import jsonx
from ..store import atomic_write, read_json_file
from .offset_journal import JournalRecord, OffsetJournal, encode_record

# consumerOffset.json key: the last journal sequence the snapshot covers.
JOURNAL_SEQ_KEY = "ferrymqJournalSeq"

TOPIC_GROUP_SEPARATOR = "@"

# After a failed journal write (a full disk), the next attempt.
JOURNAL_RETRY_S = 0.5

log = logging.getLogger("ferrymq.broker.offsets")


@dataclass(slots=True)
class QueueProgress:
    offset: int
    # Sorted, disjoint [start, end) ranges above `offset` already consumed (ferrymq clients only).
    acked: list[tuple[int, int]] = field(default_factory=list)
    last_update_ms: int = 0


ACKED_RANGES_KEY = "ferrymqAckedRanges"


def parse_table_json(data: dict[str, Any]) -> dict[str, dict[int, QueueProgress]]:
    """The offsets of OffsetManager.table_json (a snapshot file, or a master's answer)."""
    acked = data.get(ACKED_RANGES_KEY) or {}
    out: dict[str, dict[int, QueueProgress]] = {}
    for key, queues in (data.get("offsetTable") or {}).items():
        per = out.setdefault(str(key), {})
        for qid, offset in queues.items():
            ranges = [(int(a), int(b)) for a, b in (acked.get(key, {}).get(str(qid)) or [])]
            per[int(qid)] = QueueProgress(int(offset), ranges)
    return out


class _SnapshotTable:
    """What the two offset tables share: a table guarded by `_lock`, marked `_dirty` by its
    changes, and written whole to `_path` by `_write_snapshot`.

    Snapshots are written one at a time (the periodic one on a worker thread may still run
    when the stop calls persist): two would share the snapshot's temporary file, and an older
    snapshot renamed after a newer one (for the consumer offsets: after the newer one's journal
    generations were dropped) loses what came in between. A failed write (a full disk) leaves
    the table dirty, so the next persist tries again."""

    def __init__(self, path: Path) -> None:
        self._path = path
        self._lock = threading.Lock()
        self._persist_lock = threading.Lock()  # one snapshot write at a time
        self._dirty = False

    def _write_snapshot(self, take: Callable[[], dict[str, Any]],
                        then: Callable[[], None] | None = None) -> bool:
        """Write what `take` returns (called under `_lock`, only when the table is dirty),
        then call `then`; False when there was nothing to write."""
        with self._persist_lock:
            with self._lock:
                if not self._dirty:
                    return False
                body = take()
                self._dirty = False
            try:
                atomic_write(self._path, jsonx.dumps_bytes(body))
            except OSError:
                with self._lock:
                    self._dirty = True
                raise
            if then is not None:
                then()
            return True


class OffsetManager(_SnapshotTable):
    def __init__(self, config_dir: Path, journal_delay: float = 0.1) -> None:
        super().__init__(config_dir / "consumerOffset.json")
        self.table: dict[str, dict[int, QueueProgress]] = {}
        # Lowest offset each group pulled from on a queue where it has no committed offset yet.
        self._first_pull: dict[tuple[str, int], int] = {}
        self._journal = OffsetJournal(config_dir)
        self._gen = 0  # journal generation new records go to
        self._seq = 0  # last journal sequence assigned
        # Queues (key, queue id) committed since the last journal write: the write records
        # their progress as it is then.
        self._unwritten: dict[tuple[str, int], None] = {}
        self._durable = 0  # every record up to this sequence is on disk
        self._waiters: list[tuple[int, asyncio.Future[None]]] = []
        self._wake: asyncio.Event | None = None  # set while commits are journaled
        self._journal_delay = journal_delay
        self._delayed: asyncio.TimerHandle | None = None  # the write of unawaited commits
        self._writing: asyncio.Future[bool] | None = None  # the flusher's write under way
        self.journal_failures = 0  # journal writes that failed (and were retried)
        self._failed_errno = 0
        # On a slave: (key, queue) a consumer committed here while the master was away; kept
        # when ahead of the master's copy, and sent to the master (docs/replication.md).
        self.local_commits: set[tuple[str, int]] | None = None
        # Told (group, topic, queue, from, to) when a commit moves an offset forward: the
        # messages in between were consumed by the group (message trace).
        self.on_advance: Callable[[str, str, int, int, int], None] | None = None

    @staticmethod
    def key(topic: str, group: str) -> str:
        return f"{topic}{TOPIC_GROUP_SEPARATOR}{group}"

    def load(self) -> None:
        """The snapshot, then every journal record after it (commits answered after the last
        snapshot, before a crash)."""
        data = read_json_file(self._path, None)
        covered = 0
        if isinstance(data, dict):
            covered = int(data.get(JOURNAL_SEQ_KEY) or 0)
            for key, queues in parse_table_json(data).items():
                self.table.setdefault(key, {}).update(queues)
        self._seq = covered
        for rec in self._journal.replay():
            if rec.seq <= covered:
                continue
            self._apply(rec.key, rec.queue_id, rec.offset, 0,
                        None if rec.acked is None else list(rec.acked))
            self._seq = max(self._seq, rec.seq)
            self._dirty = True
        self._durable = self._seq
        gens = self._journal.generations()
        self._gen = gens[-1] + 1 if gens else 0

    def _table_json(self) -> dict[str, Any]:
        """RocketMQ's offsetTable, plus ferrymq's acknowledged ranges above each offset under a
        key RocketMQ's tools ignore: the snapshot file's shape and GET_ALL_CONSUMER_OFFSET's
        body. The caller holds the lock."""
        table = {k: {q: p.offset for q, p in sorted(v.items())} for k, v in sorted(self.table.items())}
        acked = {
            k: {str(q): [list(r) for r in p.acked] for q, p in v.items() if p.acked}
            for k, v in self.table.items()
        }
        body: dict[str, Any] = {"offsetTable": table}
        acked = {k: v for k, v in acked.items() if v}
        if acked:
            body[ACKED_RANGES_KEY] = acked
        return body

    def table_json(self) -> dict[str, Any]:
        with self._lock:
            return self._table_json()

    def persist(self) -> bool:
        """Write the snapshot (blocking: the broker calls it on a worker thread) and drop the
        journal generations it covers (_SnapshotTable: one at a time, and still dirty after a
        failed write; the journal keeps every commit meanwhile)."""
        gen = 0

        def take() -> dict[str, Any]:
            nonlocal gen
            body = self._table_json()
            body[JOURNAL_SEQ_KEY] = self._seq
            self._gen += 1  # records after the snapshot go to a new generation
            gen = self._gen
            return body

        return self._write_snapshot(take, lambda: self._journal.drop_before(gen))

    def close(self) -> None:
        self._journal.close()

    # --- durability --------------------------------------------------------------------------
    def open_journal(self) -> None:
        """Journal every commit from now on (on the event loop). The broker calls it before
        it answers requests, and starts run_flusher later: a commit answered in between was
        neither journaled nor waited for. The flusher writes what was buffered meanwhile."""
        if self._wake is None:
            self._wake = asyncio.Event()

    async def run_flusher(self) -> None:
        """Group commit of the journal, off the event loop: whatever was committed while the
        previous write and fsync ran goes out in the next one."""
        self.open_journal()
        wake = self._wake
        assert wake is not None
        try:
            while True:
                await wake.wait()
                wake.clear()
                self._cancel_delayed()
                # Shielded: cancelled (the broker stops), this task still sees the write
                # through, below, before its last one.
                self._writing = asyncio.ensure_future(self._write_buffer())
                if not await asyncio.shield(self._writing):
                    await asyncio.sleep(JOURNAL_RETRY_S)
                    wake.set()
        finally:
            self._wake = None  # later commits are kept by the snapshot written at shutdown
            self._cancel_delayed()
            # The broker's stop cancels this task before the server lets the requests in
            # progress finish: a commit waiting here would wait out the grace period and go
            # unanswered. What is buffered is written now and its waiters answered.
            with contextlib.suppress(asyncio.CancelledError, Exception):
                if self._writing is not None:
                    await self._writing
                await self._write_buffer()
            self._writing = None

    async def _write_buffer(self) -> bool:
        """Write what is buffered and answer the commits it covers. False when the write
        failed (a full disk): the records are back in front of the buffer, in order, and
        their waiters stay unanswered until a retry writes them (an exception here ended
        the flusher: every later commit was answered with nothing on disk, and those
        waiting then never were)."""
        with self._lock:
            slots, upto, gen = self._unwritten, self._seq, self._gen
            self._unwritten = {}
            data = b"".join(self._record(key, qid, upto) for key, qid in slots)
        if data:
            try:
                await asyncio.to_thread(self._journal.append, gen, data)
            except OSError as exc:
                with self._lock:
                    self._unwritten.update(slots)  # written with their progress by then
                self._journal_failed(exc)
                return False
            if self._failed_errno:
                log.info("offset journal writes work again")
                self._failed_errno = 0
        self._durable = max(self._durable, upto)
        self._release_waiters()
        return True

    def _record(self, key: str, queue_id: int, seq: int) -> bytes:
        """The queue's whole progress, as one journal line (the caller holds the lock)."""
        progress = self.table.get(key, {}).get(queue_id)
        if progress is None:
            return b""
        ranges = tuple(progress.acked)
        return encode_record(JournalRecord(seq, key, queue_id, progress.offset, ranges))

    def _cancel_delayed(self) -> None:
        if self._delayed is not None:
            self._delayed.cancel()
            self._delayed = None

    def _journal_failed(self, exc: OSError) -> None:
        self.journal_failures += 1
        if exc.errno != self._failed_errno:
            log.error("cannot write the consumer-offset journal (%s); commits that wait for "
                      "it are answered once a retry succeeds", exc)
            self._failed_errno = exc.errno or -1

    def _write_soon(self) -> None:
        """Unawaited commits are buffered: written with the next awaited one, or after
        `journal_delay`."""
        if self._delayed is not None or self._wake is None:
            return
        if self._journal_delay <= 0:
            self._wake.set()
            return
        self._delayed = asyncio.get_running_loop().call_later(self._journal_delay, self._wake.set)

    def _release_waiters(self) -> None:
        still: list[tuple[int, asyncio.Future[None]]] = []
        for seq, fut in self._waiters:
            if seq <= self._durable:
                if not fut.done():
                    fut.set_result(None)
            else:
                still.append((seq, fut))
        self._waiters = still

    async def wait_durable(self, seq: int) -> None:
        """Until the commit numbered `seq` is on disk (at once without a running flusher:
        then only the snapshot written at shutdown keeps it)."""
        if seq <= self._durable or self._wake is None:
            return
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append((seq, fut))
        self._wake.set()
        await fut

    def note_pull(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        key = self.key(topic, group)
        per = self.table.get(key)
        if per is not None and queue_id in per:
            return
        slot = (key, queue_id)
        first = self._first_pull.get(slot)
        if first is None or offset < first:
            self._first_pull[slot] = offset

    def commit(self, group: str, topic: str, queue_id: int, offset: int, now_ms: int = 0,
               acked: list[tuple[int, int]] | None = None) -> int:
        """A negative offset means "nothing consumed here since I started" (ali-ons sends -1 for
        an empty queue, and for 0): it never overwrites a real offset, and with none stored it
        becomes the lowest offset the group pulled from, so messages that arrive while the
        consumer is down are not skipped on its restart.

        Returns the journal sequence to pass to wait_durable (0: nothing changed)."""
        with self._lock:
            key = self.key(topic, group)
            per = self.table.get(key)
            progress = None if per is None else per.get(queue_id)
            if offset < 0:
                if progress is not None and progress.offset >= 0:
                    return 0
                first = self._first_pull.get((key, queue_id))
                if first is None:
                    return 0
                offset = first
            self._first_pull.pop((key, queue_id), None)
            moved_from = -1 if progress is None else progress.offset
            self._apply(key, queue_id, offset, now_ms, acked)
            if self.on_advance is not None and 0 <= moved_from < offset:
                self.on_advance(group, topic, queue_id, moved_from, offset)
            if self.local_commits is not None:
                self.local_commits.add((key, queue_id))
            self._seq += 1
            if self._wake is not None:
                self._unwritten[(key, queue_id)] = None
                self._write_soon()
            return self._seq

    def _apply(self, key: str, queue_id: int, offset: int, now_ms: int,
               acked: list[tuple[int, int]] | None) -> None:
        per = self.table.setdefault(key, {})
        progress = per.get(queue_id)
        if progress is None:
            per[queue_id] = QueueProgress(offset, list(acked or []), now_ms)
        else:
            progress.offset = offset
            progress.last_update_ms = now_ms
            if acked is not None:
                progress.acked = list(acked)
            else:
                progress.acked = [(a, b) for a, b in progress.acked if b > offset]
        self._dirty = True

    def adopt(self, table: dict[str, dict[int, QueueProgress]]) -> list[tuple[str, int, int]]:
        """A slave takes its master's offsets and acknowledged ranges (parse_table_json of the
        master's table), except where a consumer committed further here; returns those
        (key, queue, offset) the master is behind on."""
        ahead: list[tuple[str, int, int]] = []
        local = self.local_commits or set()
        with self._lock:
            for key, queues in table.items():
                for qid, theirs in queues.items():
                    offset, ranges = theirs.offset, theirs.acked
                    mine = self.table.get(key, {}).get(qid)
                    if (key, qid) in local and mine is not None and mine.offset > offset:
                        ahead.append((key, qid, mine.offset))
                        continue
                    local.discard((key, qid))
                    if mine is None or mine.offset != offset or mine.acked != ranges:
                        self._apply(key, qid, offset, 0, list(ranges))
            for key, qid in list(local):
                if qid not in table.get(key, {}):
                    mine = self.table.get(key, {}).get(qid)
                    if mine is not None:
                        ahead.append((key, qid, mine.offset))
        return ahead

    def query(self, group: str, topic: str, queue_id: int) -> int:
        """-1 when the group has never committed on this queue."""
        per = self.table.get(self.key(topic, group))
        if per is None:
            return -1
        progress = per.get(queue_id)
        return -1 if progress is None else progress.offset

    def progress(self, group: str, topic: str, queue_id: int) -> QueueProgress | None:
        per = self.table.get(self.key(topic, group))
        return None if per is None else per.get(queue_id)

    def groups_of_topic(self, topic: str) -> set[str]:
        prefix = topic + TOPIC_GROUP_SEPARATOR
        return {k[len(prefix):] for k in self.table if k.startswith(prefix)}

    def topics_of_group(self, group: str) -> set[str]:
        suffix = TOPIC_GROUP_SEPARATOR + group
        return {k[: -len(suffix)] for k in self.table if k.endswith(suffix)}

    def queue_offsets(self, group: str, topic: str) -> dict[int, int]:
        per = self.table.get(self.key(topic, group), {})
        return {q: p.offset for q, p in per.items()}


class DelayOffsetManager(_SnapshotTable):
    """config/delayOffset.json: how far each delay level's queue has been delivered."""

    def __init__(self, config_dir: Path) -> None:
        super().__init__(config_dir / "delayOffset.json")
        self.table: dict[int, int] = {}

    def load(self) -> None:
        data = read_json_file(self._path, None)
        if isinstance(data, dict):
            self.table = {int(k): int(v) for k, v in (data.get("offsetTable") or {}).items()}

    def get(self, level: int) -> int:
        return self.table.get(level, 0)

    def set(self, level: int, offset: int) -> None:
        with self._lock:
            if self.table.get(level) != offset:
                self.table[level] = offset
                self._dirty = True

    def persist(self) -> bool:
        return self._write_snapshot(lambda: {"offsetTable": dict(sorted(self.table.items()))})
