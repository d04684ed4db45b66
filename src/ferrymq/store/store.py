"""MessageStore: the commit log, consume queues, key index, flushing, checkpoints and recovery
behind one thread-safe object, the core its parts are built on: the read side (`reads`,
queries.py), the log as a replication source and target (`replica`, replica.py) and retention
(`retention`, retention.py), each taking the core in its constructor (core.py says what they
use of it).

Appends are serialised by one lock and each batch is written with one pwrite; its
consume-queue entries and index keys are written in the same critical section, so a reader
that sees a queue offset can always read its record. Readers take no lock: the structures
they walk are replaced, never mutated, and deleted files stay open for a grace period."""

from __future__ import annotations

import contextlib
import itertools
import logging
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from ..common.dirlock import DirectoryLock
from ..common.histogram import Histogram
from ..common.names import SCHEDULE_TOPIC
from ..common.record import KEY_ENTRY, key_entries
from .checkpoint import Checkpoint, CheckpointFile, create_abort, remove_abort, sync_names
from .commitlog import CommitLog
from .config import FlushDiskType, StoreConfig
from .consumequeue import ENTRY, ConsumeQueue, QueueFile
from .core import Pending
from .damage import DamagedRecord, SkippedRange, SkippedRanges
from .encoder import Encoder, IllegalMessage, encode, place, tag_code
from .errors import StoreCorruptionError, StoreSpaceError, StoreStateError
from .files import FileIO, is_disk_full
from .flush import FlushService
from .groupcommit import PutCoalescer
from .index import Index
from .integrity import ReadGuard
from .model import PutResult, PutStatus, StoreMessage
from .prealloc import Preallocator
from .queries import StoreReads
from .recovery import RecordInfo, RecoveryReport, Scanner, entry_tag, find_valid_after, last_record_before, tail_cut
from .replica import ReplicaLog
from .retention import Retention, default_disk_usage
from .scrub import Scrubber
from .visibility import Visibility

log = logging.getLogger("ferrymq.store")

_MAX_GROUP_BYTES = 4 * 1024 * 1024

ArrivalListener = Callable[[str, int, int], None]


class MessageStore:
    def __init__(self, config: StoreConfig, clock: Callable[[], int] | None = None,
                 disk_usage: Callable[[str], float] | None = None, *,
                 file_io: FileIO | None = None) -> None:
        self.config = config
        self.clock = clock or (lambda: int(time.time() * 1000))
        self._io = file_io or FileIO()
        root = config.root
        self._root = root
        self._dir_lock = DirectoryLock(root, "store")
        self.commitlog = CommitLog(root / "commitlog", config.commitlog_segment_size, self._io)
        self._cq_root = root / "consumequeue"
        self.cqs: dict[tuple[str, int], ConsumeQueue] = {}
        self.index = Index(root / "index", config.index_hash_slots, config.index_max_entries,
                            self._io)
        self._encoder = Encoder(config.store_address, config.max_message_size,
                                config.delay_levels_ms)
        self._sync = config.flush_disk_type is FlushDiskType.SYNC_FLUSH
        self._flusher = FlushService(self.commitlog, self._sync, config.flush_interval_ms)
        # A coalesced group stays well inside a segment (a roll-over moves a whole batch).
        self._coalescer = PutCoalescer(self._append, self._flusher, self._sync,
                                       config.sync_flush_timeout_ms,
                                       min(_MAX_GROUP_BYTES, config.commitlog_segment_size // 4))
        self.lock = threading.Lock()
        self.checkpoint_lock = threading.Lock()
        self._dirty: set[QueueFile] = set()
        self.dead_queues: list[ConsumeQueue] = []  # deleted, descriptors not yet closed
        self._listeners: list[ArrivalListener] = []
        self._append_listeners: list[Callable[[], None]] = []
        self.visibility = Visibility()
        self._state = "new"
        self._last_store_ts = 0
        self._maint_stop = threading.Event()
        self._maint: threading.Thread | None = None
        self._cp_file = CheckpointFile(config.root / "checkpoint")
        self._last_cp: Checkpoint | None = None  # the last one this run wrote
        self._skips = SkippedRanges(root / "config" / "skipped.json")
        self.guard = ReadGuard(self.commitlog, self.lock, config.on_corrupt_record, self._skips,
                                config.delay_levels_ms, self._rewrite_entries)
        self.scrubber: Scrubber | None = None
        self.preallocator: Preallocator | None = None
        self.recovered_abnormally = False
        self.last_recovery: RecoveryReport | None = None
        self.reads = StoreReads(self)
        self.replica = ReplicaLog(self)
        self.retention = Retention(self, disk_usage or default_disk_usage)

    # --- lifecycle ---------------------------------------------------------------------------
    def start(self) -> None:
        if self._state != "new":
            raise StoreStateError("start", self._state)
        self._dir_lock.acquire()  # before anything in the directory is read
        try:
            self._start()
        except BaseException:
            self._dir_lock.release()
            raise

    def _start(self) -> None:
        root = self._root
        abort = root / "abort"
        unclean = abort.exists()
        cp = self._cp_file.read()
        self.commitlog.load()
        self._load_queues()
        self.index.load()
        self._skips.load()
        if not unclean and cp is not None and cp.clean and self._plausible_end(cp.log_flushed):
            cut = tail_cut(self.commitlog, cp.log_flushed)
            if cut is None:
                self.commitlog.write_pos = self.commitlog.flushed = cp.log_flushed
            else:
                self._recover_cut(cp, cut)
        elif not unclean and cp is None and not self.commitlog.segments:
            pass  # a new store
        else:
            self.recovered_abnormally = True
            self._recover(cp)
        min_phys = self.commitlog.min_offset
        for cq in self.cqs.values():
            cq.correct_min(min_phys)
        self.guard.hot_start = self.commitlog.write_pos
        create_abort(abort)
        self._cp_file.open()
        self._state = "running"
        self.checkpoint()
        self.retention.refresh_disk()
        self._flusher.start()
        self._maint = threading.Thread(target=self._maintain, name="ferrymq-store-maint",
                                       daemon=True)
        self._maint.start()
        if self.config.preallocate_bytes > 0:
            self.preallocator = Preallocator(self.commitlog, self._io, self.config.preallocate_bytes,
                                             self.retention.may_preallocate)
            self.preallocator.start()
        if self.config.scrub_bytes_per_s > 0:
            cold = self.commitlog.write_pos  # what this run has not written
            self.scrubber = Scrubber(self.guard, self.config.scrub_bytes_per_s, lambda: cold,
                                     lambda: list(self.cqs.values()))
            self.scrubber.start()

    def stop_threads(self) -> None:
        """Stop every background thread (scrub, preallocation, maintenance, flush), after any
        put in progress. Part of shutdown; alone, it is what a crash leaves of a store."""
        if self.scrubber is not None:
            self.scrubber.stop()
        if self.preallocator is not None:
            self.preallocator.stop()
        self._maint_stop.set()
        if self._maint is not None:
            self._maint.join()
        with self.lock:  # waits for a put in progress
            pass
        self._flusher.stop()

    def shutdown(self) -> None:
        if self._state != "running":
            return
        self._state = "stopping"
        self.stop_threads()
        try:
            self.checkpoint(clean=True)
            clean = True
        except OSError as exc:
            # The abort file stays, so the next start verifies the tail: safe, only slower.
            log.error("final checkpoint failed (%s); the next start will recover", exc)
            clean = False
        self.index.close()
        for cq in self.cqs.values():
            cq.close()
        self.commitlog.close()
        self._cp_file.close()
        if clean:
            remove_abort(self._root / "abort")
        self._state = "stopped"
        self._dir_lock.release()

    def _plausible_end(self, pos: int) -> bool:
        segs = self.commitlog.segments
        if not segs:
            return pos % self.commitlog.segment_size == 0
        return segs[0].start <= pos <= segs[-1].end

    def _load_queues(self) -> None:
        if not self._cq_root.is_dir():
            return
        per_file = self.config.consume_queue_entries_per_file
        for tdir in self._cq_root.iterdir():
            if not tdir.is_dir():
                continue
            for qdir in tdir.iterdir():
                if qdir.is_dir() and qdir.name.isdigit():
                    cq = ConsumeQueue(tdir.name, int(qdir.name), qdir, per_file, self._io)
                    cq.load()
                    self.cqs[(tdir.name, int(qdir.name))] = cq

    def _rewrite_entries(self, cq: ConsumeQueue, at: int, packed: bytes) -> None:
        """Entries rebuilt from the log over a queue's (integrity.py; under the lock)."""
        cq.overwrite(at, packed, self._dirty)

    def _queue(self, key: tuple[str, int]) -> ConsumeQueue:
        cq = self.cqs.get(key)
        if cq is None:
            topic, qid = key
            cq = ConsumeQueue(topic, qid, self._cq_root / topic / str(qid),
                              self.config.consume_queue_entries_per_file, self._io)
            self.cqs[key] = cq
        return cq

    # --- recovery ------------------------------------------------------------------------------
    def _recover_cut(self, cp: Checkpoint, cut: int) -> None:
        """A clean checkpoint reaches `cut` and beyond, but the files end there: recover as
        after a crash, from the last record that starts before the cut."""
        seg = self.commitlog.segment_for(cut)
        log.error("commit log %s ends at %d, before %d where the clean shutdown left it: the "
                  "tail was cut; verifying it as after a crash", seg.path if seg else "", cut,
                  cp.log_flushed)
        self.recovered_abnormally = True
        floor = seg.start if seg is not None else self.commitlog.min_offset
        start = max(floor, last_record_before(self.cqs.values(), cut) or floor)
        self._recover(cp, start)
        end = self.commitlog.write_pos
        self.guard.reports.report(DamagedRecord(
            end, cp.log_flushed - end, str(seg.path) if seg else "",
            f"tail cut at {cut}: {cp.log_flushed - end} bytes of records lost", "tail"))

    def _recover(self, cp: Checkpoint | None, start_at: int | None = None) -> None:
        t0 = time.monotonic()
        clog = self.commitlog
        start = cp.consistent if cp is not None else clog.min_offset
        if start_at is not None:
            start = start_at
        start = max(start, clog.min_offset)
        if clog.segments:
            start = min(start, clog.segments[-1].end)
        for cq in self.cqs.values():
            cq.truncate_phys(start)
        scanner = Scanner(clog, start)
        records_in = iter(scanner)
        pending: Pending = {}
        keys = bytearray()
        records = 0
        while chunk := list(itertools.islice(records_in, 50_000)):
            self.dispatch(chunk, pending, keys)
            self.write_pending(pending, keys)
            records += len(chunk)
        end = scanner.result.end
        reason = scanner.result.bad_reason
        nxt = find_valid_after(clog, end)
        if nxt is not None:
            seg = clog.segment_for(end)
            path = seg.path if seg is not None else clog.dir
            why = reason or "zeros where a record should be"
            if not self.config.truncate_on_corruption:
                raise StoreCorruptionError(path, end, why, nxt)
            log.error("commit log corrupted in %s at %d (%s), valid data follows at %d; "
                      "truncating as configured", path, end, why, nxt)
        if reason:
            log.warning("torn commit-log tail at %d (%s): truncated", end, reason)
        clog.truncate(end)
        for cq in self.cqs.values():
            cq.truncate_phys(end)
        self.index.cut(end)  # keys of records lost past `end` (a power loss) may be in it
        clog.flushed = min(clog.flushed, start)
        clog.flush(end)
        clog.flushed = end
        self.index.finish_batch()
        self.last_recovery = RecoveryReport(start, end, records, time.monotonic() - t0, reason)
        log.info("recovered commit log from %d to %d (%d records) in %.3f s", start, end,
                 records, self.last_recovery.seconds)

    def dispatch(self, infos: list[RecordInfo], pending: Pending, keys: bytearray) -> None:
        """Queue each record's consume-queue entry in `pending` and its key-index entries in
        `keys`; _write_pending writes both. Records already in their queue are passed over."""
        index_end = self.index.end_phys
        pack = ENTRY.pack
        last_topic: str | None = None
        last_qid = -1
        cq: ConsumeQueue | None = None
        waiting: list[bytes] = []
        last_tags: str | None = None
        tags_code = 0
        for info in infos:
            topic = info.topic
            if topic != last_topic or info.queue_id != last_qid:
                key = (topic, info.queue_id)
                cq = self._queue(key)
                waiting = pending.setdefault(key, [])
                last_topic, last_qid = key
            assert cq is not None
            expected = cq.max_offset + len(waiting)
            if info.queue_offset < expected:
                continue  # already in the queue
            if info.queue_offset > expected:
                log.warning("queue %s/%d: record at %d has queue offset %d, queue expected %d",
                            topic, info.queue_id, info.pos, info.queue_offset, expected)
            if topic == SCHEDULE_TOPIC:
                tag = entry_tag(info, self.config.delay_levels_ms)
            else:
                if info.tags != last_tags:
                    last_tags = info.tags
                    tags_code = tag_code(last_tags) if last_tags else 0
                tag = tags_code
            waiting.append(pack(info.pos, info.size, tag))
            # Records already indexed before a crash are not indexed twice (recovery rescans).
            if (info.keys or info.uniq) and info.pos > index_end:
                key_entries(keys, topic, info.keys, info.uniq, info.pos, info.store_ts)

    def write_pending(self, pending: Pending, keys: bytearray,
                      commit: bool = True) -> list[ConsumeQueue]:
        """Write the queued entries and keys; returns the queues written. Without `commit`
        readers do not see the entries until the caller commits those queues."""
        written: list[ConsumeQueue] = []
        for key, entries in pending.items():
            if entries:
                cq = self.cqs[key]
                cq.append(b"".join(entries), self._dirty)
                if commit:
                    cq.commit()
                written.append(cq)
        pending.clear()
        if keys:
            _h, first_pos, first_ts = KEY_ENTRY.unpack_from(keys, 0)
            self.index.ensure_room(1, first_pos, first_ts)
            self.index.put_entries(keys, 0, 0)
            del keys[:]
        return written

    # --- appends -------------------------------------------------------------------------------
    def add_arrival_listener(self, cb: ArrivalListener) -> None:
        """`cb(topic, queue_id, readable max offset)` when readers may see more of a queue."""
        self._listeners.append(cb)

    def add_append_listener(self, cb: Callable[[], None]) -> None:
        """`cb()` after every append to the commit log, readable or not (replication)."""
        self._append_listeners.append(cb)

    def appended(self, arrivals: list[tuple[str, int, int]]) -> None:
        for hook in self._append_listeners:
            try:
                hook()
            except Exception:
                log.exception("append listener failed")
        self._arrived(arrivals)

    def _arrived(self, arrivals: list[tuple[str, int, int]]) -> None:
        for cb in self._listeners:
            for topic, qid, max_offset in arrivals:
                try:
                    cb(topic, qid, max_offset)
                except Exception:
                    log.exception("arrival listener failed")

    def set_confirmed(self, offset: int | None) -> None:
        """Readers may see records up to commit-log `offset` (None: all of them); see
        store/visibility.py. Called by a controller-mode master as its slaves report, and by a
        slave once its log lines up with its new master's."""
        with self.lock:
            grown = self.visibility.advance(offset)
            arrivals = [(cq.topic, cq.queue_id, cq.readable_max) for cq in grown]
        self._arrived(arrivals)

    @property
    def confirmed_offset(self) -> int | None:
        return self.visibility.confirm

    def _append(self, msgs: Sequence[StoreMessage]) -> PutResult:
        clog = self.commitlog
        if self._state != "running":
            return PutResult(PutStatus.SERVICE_NOT_AVAILABLE, [], clog.write_pos,
                             f"message store is {self._state}")
        if not msgs:
            return PutResult(PutStatus.MESSAGE_ILLEGAL, [], clog.write_pos, "no messages")
        refused = self.retention.refuse_reason
        if refused:
            return PutResult(PutStatus.DISK_FULL, [], clog.write_pos, refused)
        try:
            enc = encode(self._encoder, msgs)
        except IllegalMessage as exc:
            return PutResult(exc.status, [], clog.write_pos, exc.reason)
        size = len(enc.data)
        if size + 8 > clog.segment_size:
            return PutResult(PutStatus.MESSAGE_ILLEGAL, [], clog.write_pos,
                             f"batch of {size} bytes does not fit a commit-log segment")
        index = self.index
        with self.lock:
            now = self.clock()
            if now < self._last_store_ts:
                now = self._last_store_ts  # store times never go back: time search relies on it
            self._last_store_ts = now
            pos = clog.write_pos
            try:
                index.ensure_room(enc.nkeys, pos, now)
                pos = clog.prepare(size)  # a roll-over to a new segment moves the batch
                if self.preallocator is not None:
                    self.preallocator.claim(pos + size)
                place(self._encoder, enc, pos, now, self._next_offset)
                clog.write(pos, enc.data)
            except OSError as exc:
                return self._io_failure(exc, "commit log")
            written: list[tuple[ConsumeQueue, list[tuple[QueueFile, int]]]] = []
            try:
                for key, entries in enc.entries.items():
                    cq = self._queue(key)
                    written.append((cq, cq.append(entries, self._dirty)))
            except OSError as exc:
                for cq, undo in reversed(written):
                    cq.rollback(undo)
                clog.unwrite(pos, len(enc.data))
                return self._io_failure(exc, "consume queue")
            end = pos + len(enc.data)
            clog.write_pos = end
            visible = self.visibility.appended
            arrivals: list[tuple[str, int, int]] = []
            for cq, _ in written:
                before = cq.max_offset
                cq.commit()
                if visible(cq, before, end):
                    arrivals.append((cq.topic, cq.queue_id, cq.max_offset))
            if enc.nkeys:
                try:
                    index.put_entries(enc.keys, pos, now)
                except OSError as exc:  # the data is stored; only lookups by key miss it
                    log.error("index update failed at %d: %s", pos, exc)
        self.appended(arrivals)
        return PutResult(PutStatus.PUT_OK, enc.appended, end)

    def _next_offset(self, key: tuple[str, int]) -> int:
        cq = self.cqs.get(key)
        return cq.max_offset if cq is not None else 0

    def _io_failure(self, exc: OSError, what: str) -> PutResult:
        if is_disk_full(exc):
            if isinstance(exc, StoreSpaceError):
                what = f"{exc.what} {exc.path}, which needed {exc.needed} bytes"
            reason = (f"no space left on the device of {self._root} while writing the {what} "
                      f"({exc.strerror}); nothing of this batch was stored, writes resume "
                      "when space is freed")
            log.error(reason)
            return PutResult(PutStatus.DISK_FULL, [], self.commitlog.write_pos, reason)
        log.error("write to the %s failed: %s", what, exc)
        return PutResult(PutStatus.UNKNOWN_ERROR, [], self.commitlog.write_pos,
                         f"write to the {what} failed: {exc}")

    def put_messages(self, msgs: Sequence[StoreMessage]) -> PutResult:
        result = self._append(msgs)
        if self._sync and result.status is PutStatus.PUT_OK:
            timeout = self.config.sync_flush_timeout_ms / 1000
            if not self._flusher.wait_flushed(result.end_offset, timeout):
                result.status = PutStatus.FLUSH_DISK_TIMEOUT
                result.reason = f"not flushed to disk within {self.config.sync_flush_timeout_ms} ms"
        return result

    async def put_messages_async(self, msgs: Sequence[StoreMessage]) -> PutResult:
        """Append on the calling (loop) thread, coalesced with the other puts waiting on this
        loop (store/groupcommit.py); under SYNC_FLUSH wait for the group commit without
        blocking the loop."""
        if not msgs:
            return self._append(msgs)
        result = self._coalescer.put(msgs)
        return result if isinstance(result, PutResult) else await result

    @property
    def coalescer(self) -> PutCoalescer:
        return self._coalescer

    # --- queues --------------------------------------------------------------------------------
    def delete_queue(self, topic: str) -> None:
        with self.lock:
            for key in [k for k in self.cqs if k[0] == topic]:
                cq = self.cqs.pop(key)
                self.visibility.forget(cq)
                cq.destroy()
                self.dead_queues.append(cq)
            with contextlib.suppress(OSError):
                (self._cq_root / topic).rmdir()

    # --- damage --------------------------------------------------------------------------------
    def damaged_records(self) -> list[DamagedRecord]:
        """What reads, the scrub and the tail check found damaged since the start."""
        return self.guard.reports.records()

    def skipped_ranges(self) -> list[SkippedRange]:
        return self._skips.all()

    def skip_range(self, topic: str, queue_id: int, from_offset: int, to_offset: int) -> None:
        """Make reads of the queue pass over [from_offset, to_offset) (an operator gives up on
        damaged records there), from now on and after restarts."""
        self._skips.add(SkippedRange(topic, queue_id, from_offset, to_offset))

    # --- positions -----------------------------------------------------------------------------
    @property
    def max_phy_offset(self) -> int:
        return self.commitlog.write_pos

    @property
    def min_phy_offset(self) -> int:
        return self.commitlog.min_offset

    @property
    def flushed_offset(self) -> int:
        return self.commitlog.flushed

    def wait_flushed(self, offset: int, timeout_s: float) -> bool:
        """Block until the commit log is on disk up to `offset` (the flush thread is woken
        for it, whatever the flush mode); False when it is not within `timeout_s`."""
        return self._flusher.wait_flushed(offset, timeout_s)

    @property
    def root(self) -> Path:
        return self._root

    @property
    def flush_latency(self) -> Histogram:
        """Commit-log fsync durations (metrics)."""
        return self._flusher.latency

    # --- checkpoint and retention --------------------------------------------------------------
    def checkpoint(self, clean: bool = False) -> Checkpoint:
        """fsync consume queues and index, then record how far everything is on disk."""
        with self.checkpoint_lock:
            with self.lock:
                dispatched = self.commitlog.write_pos
                dirty, self._dirty = self._dirty, set()
            failed: list[QueueFile] = []
            for qf in dirty:
                try:
                    self._io.fsync(qf.fd)
                except OSError as exc:
                    failed.append(qf)
                    err = exc
            if failed:
                # Files of queues deleted or cut meanwhile have nothing left to keep.
                with self.lock:
                    live = {id(f) for cq in self.cqs.values() for f in cq.files}
                    failed = [qf for qf in failed if id(qf) in live]
                    self._dirty.update(failed)
                if failed:
                    log.error("fsync of %d consume-queue file(s) failed (%s, %s); the "
                              "checkpoint stays where it was until it succeeds", len(failed),
                              failed[0].path, err)
            new = [qf for qf in dirty if not qf.named]
            try:
                sync_names(new, self._cq_root, self._root)
            except OSError:
                with self.lock:
                    self._dirty.update(new)
                raise
            index_ok = self.index.flush()
            if clean:
                self._flusher.flush_now()
            flushed = self.commitlog.flushed
            consistent = min(dispatched, flushed)
            held = bool(failed) or not index_ok
            if held:
                # Their entries or keys may not be on disk: recovery must start before them
                # (past them, a power loss lost them for good: recovery never wrote them
                # again).
                last = self._last_cp
                consistent = min(consistent, last.consistent if last is not None
                                 else self.commitlog.min_offset)
            cp = Checkpoint(flushed, consistent, self.clock(), clean and not held)
            self._cp_file.write(cp)
            self._last_cp = cp
            return cp

    def checkpoint_below(self, pos: int) -> None:
        """A checkpoint no further than `pos`, written before the log is cut there (the
        caller holds the checkpoint lock and the store lock)."""
        last = self._last_cp
        consistent = pos if last is None else min(pos, last.consistent)
        cp = Checkpoint(min(self.commitlog.flushed, pos), consistent, self.clock(), False)
        self._cp_file.write(cp)
        self._last_cp = cp

    def _maintain(self) -> None:
        interval = self.config.checkpoint_interval_ms / 1000
        cleanup_every = self.config.cleanup_interval_ms / 1000
        next_cleanup = time.monotonic() + cleanup_every
        while not self._maint_stop.wait(interval):
            try:
                self.checkpoint()
                if time.monotonic() >= next_cleanup:
                    next_cleanup = time.monotonic() + cleanup_every
                    self.retention.run_cleanup()
                else:
                    self.retention.refresh_disk()
            except Exception:
                log.exception("store maintenance failed; retrying")
