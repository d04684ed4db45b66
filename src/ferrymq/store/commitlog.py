"""The commit log: fixed-size segment files under commitlog/, each named by the 20-digit
physical offset of its first byte, holding records back to back. A segment that cannot fit the
next write (plus 8 spare bytes) is closed with a blank record (TOTALSIZE = bytes left,
BLANK magic) and the write starts the next segment.

pwrite, not mmap. Measured here with 32-record (35 KiB) writes into a 256 MiB sparse segment:
pwrite and slice assignment into a mapping both reach ~2.1 GB/s on warm pages and ~0.4 / 0.24
GB/s on first touch, and pread vs mapping slices read at ~5.3 / 5.6 GB/s. With no speed to win,
error behaviour decides: a write into a mapping of a sparse file on a full disk raises SIGBUS
and kills the process, while pwrite returns ENOSPC, which the store turns into DISK_FULL and
rolls back. Recovery alone maps segments read-only, to CRC records without copying them."""

from __future__ import annotations

import contextlib
import mmap
import os
import re
import threading
import time
from pathlib import Path

from ..common.record import BLANK_MAGIC_CODE, MESSAGE_MAGIC_CODE, MIN_RECORD_SIZE
from ..common.record.layout import SIZE_AND_MAGIC
from .errors import StoreLayoutError, StoreSpaceError
from .files import FileIO, fsync_dir, is_disk_full, release_fd

END_FILE_MIN_BLANK = 8
BLANK_RECORD = SIZE_AND_MAGIC
_READ_AHEAD = 4096  # read_record's first read: most records fit
_NAME = re.compile(r"^\d{20}$")
RETIRE_GRACE_S = 30.0


def segment_name(start: int) -> str:
    return f"{start:020d}"


class Segment:
    __slots__ = ("end", "fd", "path", "start")

    def __init__(self, start: int, size: int, path: Path, fd: int) -> None:
        self.start = start
        self.end = start + size
        self.path = path
        self.fd = fd


class CommitLog:
    def __init__(self, directory: Path, segment_size: int, io: FileIO) -> None:
        self.dir = directory
        self.segment_size = segment_size
        self.io = io
        # Replaced, never mutated, so readers can index a snapshot without a lock.
        self.segments: list[Segment] = []
        self.write_pos = 0
        self.flushed = 0
        # Each segment file's length as found by load(), before it is extended: a file shorter
        # than a segment was cut, and the tail check compares this with the checkpoint.
        self.loaded_sizes: dict[int, int] = {}
        self._create_lock = threading.Lock()
        # Deleted segments keep their descriptor number for a while (pointing at /dev/null): a
        # reader that picked the segment just before deletion must not pread a reused number.
        self._retired: list[tuple[float, Segment]] = []

    # --- files ------------------------------------------------------------------------------
    def load(self) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        names = sorted(p for p in self.dir.iterdir() if _NAME.match(p.name))
        segs: list[Segment] = []
        for path in names:
            start = int(path.name)
            if start % self.segment_size:
                raise StoreLayoutError(path, f"start is not a multiple of {self.segment_size}")
            if segs and start != segs[-1].end:
                raise StoreLayoutError(path, f"gap after segment ending at {segs[-1].end}")
            size = path.stat().st_size
            if size > self.segment_size:
                raise StoreLayoutError(path, f"{size} bytes, larger than the segment size")
            fd = os.open(path, os.O_RDWR)
            self.loaded_sizes[start] = size
            if size < self.segment_size:
                self.io.ftruncate(fd, self.segment_size)
            segs.append(Segment(start, self.segment_size, path, fd))
        self.segments = segs

    def create(self, start: int) -> Segment:
        """The segment starting at `start`, created when it does not exist yet. The writer
        and the preallocation thread both create segments, so this is serialised."""
        with self._create_lock:
            seg = self.segment_for(start)
            if seg is not None and seg.start == start:
                return seg
            return self._create(start)

    def create_next(self, start: int) -> Segment | None:
        """The segment starting at `start` when it is the one after the last (the filler's
        creation ahead of the writer); None when the log has changed under the caller (a cut
        removed segments since it looked: creating it would leave a gap). The segment
        itself when the writer created it meanwhile."""
        with self._create_lock:
            seg = self.segment_for(start)
            if seg is not None and seg.start == start:
                return seg
            segs = self.segments
            if not segs or segs[-1].end != start:
                return None
            return self._create(start)

    def _create(self, start: int) -> Segment:
        path = self.dir / segment_name(start)
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            # Sparse: space is taken by writes, where a full disk is an ENOSPC we can handle.
            self.io.ftruncate(fd, self.segment_size)
            fsync_dir(self.dir)
        except OSError:
            os.close(fd)
            with contextlib.suppress(OSError):
                path.unlink()
            raise
        seg = Segment(start, self.segment_size, path, fd)
        self.segments = [*self.segments, seg]
        return seg

    def close(self) -> None:
        for seg in self.segments:
            with contextlib.suppress(OSError):
                os.close(seg.fd)
        self.segments = []
        self.close_retired(force=True)

    # --- positions --------------------------------------------------------------------------
    @property
    def min_offset(self) -> int:
        segs = self.segments
        return segs[0].start if segs else self.write_pos

    def segment_for(self, pos: int) -> Segment | None:
        segs = self.segments
        if not segs:
            return None
        i = (pos - segs[0].start) // self.segment_size
        if 0 <= i < len(segs):
            return segs[i]
        return None

    def roll_next(self, pos: int) -> int:
        return pos - pos % self.segment_size + self.segment_size

    # --- writes (the caller serialises them) ----------------------------------------------------
    def prepare(self, n: int) -> int:
        """Where `n` contiguous bytes will go: closes the current segment with a blank record
        and opens the next one when they do not fit. May raise OSError (disk full)."""
        pos = self.write_pos
        seg = self.segment_for(pos)
        if seg is None:
            seg = self.create(pos - pos % self.segment_size)
        remaining = seg.end - pos
        if n + END_FILE_MIN_BLANK <= remaining:
            return pos
        nxt = self.segment_for(seg.end) or self.create(seg.end)
        blank = BLANK_RECORD.pack(remaining, BLANK_MAGIC_CODE)
        try:
            self.io.write_fully(seg.fd, blank, pos - seg.start)
        except OSError as exc:
            if is_disk_full(exc):
                raise StoreSpaceError(seg.path, len(blank), "commit-log segment", exc) from exc
            raise
        self.write_pos = nxt.start
        return nxt.start

    def write(self, pos: int, data: bytes | bytearray) -> None:
        """One write of `data` at `pos` (from prepare). On failure the bytes that did land are
        zeroed again, so nothing beyond write_pos can later pass for a record."""
        seg = self.segment_for(pos)
        assert seg is not None and pos + len(data) <= seg.end
        try:
            self.io.write_fully(seg.fd, data, pos - seg.start)
        except OSError as exc:
            written = getattr(exc, "written", 0)
            if written:
                with contextlib.suppress(OSError):
                    os.pwrite(seg.fd, bytes(written), pos - seg.start)
            if is_disk_full(exc):
                raise StoreSpaceError(seg.path, len(data), "commit-log segment", exc) from exc
            raise

    def unwrite(self, pos: int, n: int) -> None:
        """Zero bytes written at `pos` by a batch that failed after its log write."""
        seg = self.segment_for(pos)
        if seg is not None:
            with contextlib.suppress(OSError):
                os.pwrite(seg.fd, bytes(n), pos - seg.start)

    def flush(self, target: int) -> None:
        """fsync every segment holding bytes in [flushed, target)."""
        pos = self.flushed
        if target <= pos:
            return
        segs = self.segments
        if not segs:
            return
        first = max(0, (pos - segs[0].start) // self.segment_size)
        last = (target - 1 - segs[0].start) // self.segment_size
        for seg in segs[first : last + 1]:
            self.io.fsync(seg.fd)
        self.flushed = target

    # --- reads ----------------------------------------------------------------------------------
    def read(self, pos: int, n: int) -> bytes | None:
        seg = self.segment_for(pos)
        if seg is None or n <= 0 or pos + n > seg.end or pos + n > self.write_pos:
            return None
        try:
            data = os.pread(seg.fd, n, pos - seg.start)
        except OSError:
            return None
        return data if len(data) == n else None

    def read_record(self, pos: int) -> bytes | None:
        """The record starting at `pos`, as long as its own TOTALSIZE says (one read of a
        few KiB covers most records), or None when no message record starts there. Its
        fields and CRC are not checked."""
        if pos < self.min_offset or pos + MIN_RECORD_SIZE > self.write_pos:
            return None
        seg = self.segment_for(pos)
        if seg is None:
            return None
        head = self.read(pos, min(_READ_AHEAD, self.write_pos - pos, seg.end - pos))
        if head is None:
            return None
        total, magic = SIZE_AND_MAGIC.unpack_from(head)
        if magic != MESSAGE_MAGIC_CODE or total < MIN_RECORD_SIZE:
            return None
        if total <= len(head):
            return head[:total]
        return self.read(pos, total)

    def map_segment(self, seg: Segment) -> mmap.mmap:
        return mmap.mmap(seg.fd, self.segment_size, prot=mmap.PROT_READ)

    # --- truncation and deletion --------------------------------------------------------------
    def truncate(self, pos: int) -> None:
        """Drop everything from `pos` on: later segments are removed, the rest of pos's
        segment becomes a hole (truncate down, then back up) so no old bytes remain. Under the
        creation lock: a segment created meanwhile would be appended to the list this replaces
        (left out of the log, or left in one past a removed one)."""
        with self._create_lock:
            self._truncate(pos)

    def _truncate(self, pos: int) -> None:
        keep: list[Segment] = []
        for seg in self.segments:
            if seg.start >= pos:
                os.close(seg.fd)
                seg.path.unlink()
                continue
            keep.append(seg)
            if seg.start <= pos < seg.end:
                self.io.ftruncate(seg.fd, pos - seg.start)
                self.io.ftruncate(seg.fd, self.segment_size)
                self.io.fsync(seg.fd)
        self.segments = keep
        fsync_dir(self.dir)
        self.write_pos = pos
        self.flushed = min(self.flushed, pos)

    def delete_head(self, count: int) -> list[Segment]:
        """Delete the `count` oldest segments, never the one being written. Under the
        creation lock, like a cut: the list replaced must hold a segment created meanwhile."""
        with self._create_lock:
            return self._delete_head(count)

    def _delete_head(self, count: int) -> list[Segment]:
        segs = self.segments
        # Never the segment being written, nor one preallocated after it.
        count = min(count, (self.write_pos - segs[0].start) // self.segment_size if segs else 0)
        if count <= 0:
            return []
        gone, self.segments = segs[:count], segs[count:]
        now = time.monotonic()
        for seg in gone:
            with contextlib.suppress(FileNotFoundError):
                seg.path.unlink()
            release_fd(seg.fd)
            self._retired.append((now, seg))
        return gone

    def close_retired(self, force: bool = False) -> None:
        now = time.monotonic()
        keep: list[tuple[float, Segment]] = []
        for when, seg in self._retired:
            if force or now - when > RETIRE_GRACE_S:
                with contextlib.suppress(OSError):
                    os.close(seg.fd)
            else:
                keep.append((when, seg))
        self._retired = keep
