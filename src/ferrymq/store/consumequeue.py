"""Consume queues: per (topic, queue id), files of 20-byte entries (commit-log offset i64,
size i32, tag code i64) under consumequeue/<topic>/<queueId>/, each named by the 20-digit
byte offset of its first entry, as RocketMQ lays them out. The queue offset of an entry is its
index. Files grow by appends instead of being preallocated: a file's length says how many
entries it holds, which makes loading and truncation simple."""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import time
from pathlib import Path

from ..common.record.layout import CQ_ENTRY
from .files import FileIO, release_fd

ENTRY = CQ_ENTRY
ENTRY_SIZE = ENTRY.size  # 20
_NAME = re.compile(r"^\d{20}$")
RETIRE_GRACE_S = 30.0


class QueueFile:
    __slots__ = ("count", "fd", "first", "named", "path")

    def __init__(self, first: int, path: Path, fd: int, count: int, named: bool = True) -> None:
        self.first = first  # queue offset of the first entry
        self.path = path
        self.fd = fd
        self.count = count
        # False for a file created since its directories were last fsynced: a power loss may
        # take its name (and with it every entry) however often its data was fsynced. The
        # checkpoint fsyncs the directories before it counts the entries as on disk.
        self.named = named


class ConsumeQueue:
    def __init__(self, topic: str, queue_id: int, directory: Path, per_file: int,
                 io: FileIO) -> None:
        self.topic = topic
        self.queue_id = queue_id
        self.dir = directory
        self.per_file = per_file
        self.io = io
        self.files: list[QueueFile] = []  # replaced, never mutated (lock-free readers)
        self.min_offset = 0
        self.max_offset = 0
        # While entries wait for replicas (store/visibility.py): the end readers see.
        self.limit: int | None = None
        self.retired: list[tuple[float, QueueFile]] = []

    @property
    def readable_max(self) -> int:
        lim = self.limit
        return self.max_offset if lim is None else lim

    # --- files ------------------------------------------------------------------------------
    def load(self) -> None:
        files: list[QueueFile] = []
        if self.dir.is_dir():
            for path in sorted(p for p in self.dir.iterdir() if _NAME.match(p.name)):
                first = int(path.name) // ENTRY_SIZE
                size = path.stat().st_size
                fd = os.open(path, os.O_RDWR)
                count = min(size // ENTRY_SIZE, self.per_file)
                if size != count * ENTRY_SIZE:
                    # A torn entry at the end: recovery rewrites whatever followed it.
                    self.io.ftruncate(fd, count * ENTRY_SIZE)
                if files and files[-1].first + files[-1].count != first:
                    # Entries missing between files cannot be recovered from here; the gap
                    # is kept and reads across it answer OFFSET_FOUND_NULL.
                    pass
                files.append(QueueFile(first, path, fd, count))
        self.files = files
        if files:
            self.min_offset = files[0].first
            self.max_offset = files[-1].first + files[-1].count

    def _new_file(self, first: int) -> QueueFile:
        self.dir.mkdir(parents=True, exist_ok=True)
        path = self.dir / f"{first * ENTRY_SIZE:020d}"
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        qf = QueueFile(first, path, fd, 0, named=False)
        self.files = [*self.files, qf]
        return qf

    def close(self) -> None:
        for qf in self.files:
            with contextlib.suppress(OSError):
                os.close(qf.fd)
        self.files = []
        self.close_retired(force=True)

    def destroy(self) -> None:
        for qf in self.files:
            release_fd(qf.fd)
            self.retired.append((time.monotonic(), qf))
        self.files = []
        shutil.rmtree(self.dir, ignore_errors=True)

    # --- writes (serialised by the store) -------------------------------------------------------
    def append(self, packed: bytes, touched: set[QueueFile]) -> list[tuple[QueueFile, int]]:
        """Write entries at max_offset, rolling files as needed. Returns (file, old count)
        undo records; max_offset is advanced by commit(), after every write of the batch."""
        undo: list[tuple[QueueFile, int]] = []
        pos = self.max_offset
        view = memoryview(packed)
        try:
            while view:
                qf = self.files[-1] if self.files else None
                if qf is None or qf.count >= self.per_file:
                    qf = self._new_file(pos)
                room = self.per_file - qf.count
                take = min(room * ENTRY_SIZE, len(view))
                undo.append((qf, qf.count))
                self.io.write_fully(qf.fd, view[:take], qf.count * ENTRY_SIZE)
                qf.count += take // ENTRY_SIZE
                touched.add(qf)
                pos += take // ENTRY_SIZE
                view = view[take:]
        except OSError:
            self.rollback(undo)
            raise
        return undo

    def overwrite(self, offset: int, packed: bytes, touched: set[QueueFile]) -> None:
        """Write entries over those from `offset` on (all below max_offset): a range rebuilt
        from the commit log."""
        view = memoryview(packed)
        while view:
            qf = self._file_for(offset)
            if qf is None:
                raise ValueError(f"queue {self.topic}/{self.queue_id} has no entry {offset}")
            n = min(len(view) // ENTRY_SIZE, qf.first + qf.count - offset)
            self.io.write_fully(qf.fd, view[: n * ENTRY_SIZE], (offset - qf.first) * ENTRY_SIZE)
            touched.add(qf)
            offset += n
            view = view[n * ENTRY_SIZE :]

    def rollback(self, undo: list[tuple[QueueFile, int]]) -> None:
        for qf, count in reversed(undo):
            qf.count = count
            with contextlib.suppress(OSError):
                self.io.ftruncate(qf.fd, count * ENTRY_SIZE)

    def commit(self) -> None:
        last = self.files[-1]
        self.max_offset = last.first + last.count

    # --- reads ---------------------------------------------------------------------------------
    def _file_for(self, offset: int) -> QueueFile | None:
        files = self.files
        if not files:
            return None
        i = (offset - files[0].first) // self.per_file
        if 0 <= i < len(files):
            qf = files[i]
            if qf.first <= offset < qf.first + qf.count:
                return qf
        for qf in files:  # only after a gap left by a lost file
            if qf.first <= offset < qf.first + qf.count:
                return qf
        return None

    def read_raw(self, offset: int, n: int) -> bytes | None:
        """Up to n raw entries from `offset`, never past the end of the file holding it (as
        RocketMQ's getIndexBuffer); None when no file holds `offset`."""
        qf = self._file_for(offset)
        if qf is None:
            return None
        avail = min(n, qf.first + qf.count - offset, self.max_offset - offset)
        if avail <= 0:
            return None
        try:
            return os.pread(qf.fd, avail * ENTRY_SIZE, (offset - qf.first) * ENTRY_SIZE)
        except OSError:
            return None

    def entry(self, offset: int) -> tuple[int, int, int] | None:
        raw = self.read_raw(offset, 1)
        if not raw or len(raw) < ENTRY_SIZE:
            return None
        phys, size, tag = ENTRY.unpack(raw)
        return phys, size, tag

    def roll_next(self, offset: int) -> int:
        return offset + self.per_file - offset % self.per_file

    # --- bounds -------------------------------------------------------------------------------
    def first_offset_at_or_above(self, phys_floor: int, lo: int, hi: int) -> int:
        """Smallest queue offset in [lo, hi) whose entry points at or above phys_floor (entries
        are in commit-log order), hi when none does."""
        while lo < hi:
            mid = (lo + hi) // 2
            e = self.entry(mid)
            if e is None or e[0] < phys_floor:
                lo = mid + 1
            else:
                hi = mid
        return lo

    def correct_min(self, min_phys: int) -> None:
        """Move min_offset past entries whose records were deleted, and delete files whose
        entries all point below min_phys (the last file stays: it carries max_offset)."""
        lo = max(self.min_offset, self.files[0].first if self.files else 0)
        self.min_offset = self.first_offset_at_or_above(min_phys, lo, self.max_offset)
        files = self.files
        drop = 0
        while drop < len(files) - 1 and files[drop].first + files[drop].count <= self.min_offset:
            drop += 1
        if drop:
            gone, self.files = files[:drop], files[drop:]
            now = time.monotonic()
            for qf in gone:
                with contextlib.suppress(FileNotFoundError):
                    qf.path.unlink()
                release_fd(qf.fd)
                self.retired.append((now, qf))

    def truncate_phys(self, phys: int) -> None:
        """Drop entries pointing at or beyond `phys` (recovery: the log ends there or will
        be re-dispatched from there)."""
        if not self.files:
            return
        cut = self.first_offset_at_or_above(phys, self.files[0].first, self.max_offset)
        if cut >= self.max_offset:
            return
        keep: list[QueueFile] = []
        for qf in self.files:
            if qf.first >= cut and qf is not self.files[0]:
                os.close(qf.fd)
                qf.path.unlink()
                continue
            if qf.first + qf.count > cut:
                qf.count = cut - qf.first
                self.io.ftruncate(qf.fd, qf.count * ENTRY_SIZE)
            keep.append(qf)
        self.files = keep
        self.max_offset = cut
        self.min_offset = min(self.min_offset, cut)

    def close_retired(self, force: bool = False) -> None:
        now = time.monotonic()
        keep: list[tuple[float, QueueFile]] = []
        for when, qf in self.retired:
            if force or now - when > RETIRE_GRACE_S:
                with contextlib.suppress(OSError):
                    os.close(qf.fd)
            else:
                keep.append((when, qf))
        self.retired = keep
