"""The timer log: append-only fixed-size entries in segment files named by their first
position (20 digits, as the commit log's), mapped in memory. Positions are global byte
offsets. An entry is needed until the wheel's read time passes its slot; since an entry is
always linked less than one wheel horizon after it was written, a whole segment is dropped once
the read time is a horizon past the write time of its last entry."""

from __future__ import annotations

import contextlib
import logging
import mmap
import os
import struct
from collections.abc import Iterator
from pathlib import Path

from ...store.files import fsync_dir, fsync_file
from .codec import ENTRY, FLAG_LOST, LogEntry, TimerFileError, decode_entry, encode_entry

log = logging.getLogger("ferrymq.broker.timer")
_MAGIC_WORD = struct.Struct(">I")


class TimerLog:
    def __init__(self, directory: Path, file_size: int, end: int) -> None:
        """Open the log whose entries end at `end` (the checkpoint's): whatever lies past it
        (entries of a process that died before its next sync, pages the kernel wrote back in
        any order, bytes that are no entry) is cut off unread."""
        self.dir = directory
        self.file_size = file_size - file_size % ENTRY.size
        directory.mkdir(parents=True, exist_ok=True)
        self._segments: dict[int, mmap.mmap] = {}
        # A segment created since the directory was last fsynced: until it is, a power loss
        # may take the file (and every timer linked into it) whatever flush() wrote into it.
        self._new_names = True
        names = sorted(n for n in os.listdir(directory) if n.isdigit() and len(n) == 20)
        if names:
            # The segments' own size wins over a changed configuration while they exist, as
            # the wheel's geometry does: mapped at another size, a segment was cut short
            # (its timers lost) or did not start at a multiple of it (no start).
            have = os.stat(directory / names[0]).st_size
            if have != self.file_size and have > 0 and have % ENTRY.size == 0:
                log.warning("timer log keeps its segment size %d over the configured %d: its "
                            "segments hold pending timers", have, self.file_size)
                self.file_size = have
        for name in names:
            start = int(name)
            if start % self.file_size:
                raise TimerFileError("log", f"segment {name} does not start at a multiple of "
                                     f"the segment size {self.file_size}")
            if start >= end:
                self._path(start).unlink()
                continue
            if start + self.file_size > end:
                # Shrunk and grown again: the tail reads as zeros (unwritten) and stays
                # sparse, where writing zeros over it would allocate the whole segment.
                os.truncate(self._path(start), end - start)
                os.truncate(self._path(start), self.file_size)
            self._segments[start] = self._map(start, create=False)
        self.end = end

    @property
    def min_pos(self) -> int:
        return min(self._segments) if self._segments else self.end

    def _path(self, start: int) -> Path:
        return self.dir / f"{start:020d}"

    def _map(self, start: int, *, create: bool) -> mmap.mmap:
        path = self._path(start)
        fd = os.open(path, os.O_RDWR | (os.O_CREAT if create else 0), 0o644)
        try:
            if os.fstat(fd).st_size != self.file_size:
                os.ftruncate(fd, self.file_size)
            return mmap.mmap(fd, self.file_size)
        finally:
            os.close(fd)

    def _segment(self, pos: int, *, create: bool = False) -> tuple[mmap.mmap, int] | None:
        start = pos - pos % self.file_size
        seg = self._segments.get(start)
        if seg is None:
            if not create:
                return None
            seg = self._segments[start] = self._map(start, create=True)
            self._new_names = True
        return seg, pos - start

    def append(self, prev_pos: int, deliver_ms: int, link_ms: int, phys_offset: int, size: int,
               write_ms: int, roll: bool, delete: bool = False) -> int:
        pos = self.end
        found = self._segment(pos, create=True)
        assert found is not None
        seg, off = found
        seg[off: off + ENTRY.size] = encode_entry(prev_pos, deliver_ms, link_ms, phys_offset, size,
                                                  write_ms, roll, delete)
        self.end = pos + ENTRY.size
        return pos

    def read(self, pos: int) -> LogEntry | None:
        """The entry at `pos`; None when its segment is gone or the space is unwritten."""
        found = self._segment(pos)
        if found is None:
            return None
        seg, off = found
        return decode_entry(seg, off, pos)

    def links_below(self, end: int) -> Iterator[tuple[int, int]]:
        """(position, link time) of every entry below `end`, in log order."""
        for start in sorted(self._segments):
            if start >= end:
                break
            limit = min(self.file_size, end - start)
            with memoryview(self._segments[start])[: limit - limit % ENTRY.size] as view:
                for i, fields in enumerate(ENTRY.iter_unpack(view)):
                    if fields[6]:  # the magic word: zero is unwritten space
                        yield start + i * ENTRY.size, fields[2]

    def mark_lost(self, pos: int) -> None:
        """Flag the entry at `pos` as naming a record the commit log lost (FLAG_LOST)."""
        found = self._segment(pos)
        assert found is not None
        seg, off = found
        at = off + ENTRY.size - 4  # the magic word, last in the entry
        (magic,) = _MAGIC_WORD.unpack_from(seg, at)
        _MAGIC_WORD.pack_into(seg, at, magic | FLAG_LOST)

    def drop_expired(self, read_time_ms: int, horizon_ms: int) -> int:
        """Delete whole segments whose entries can no longer be needed; returns how many."""
        dropped = 0
        for start in sorted(self._segments):
            if start + self.file_size > self.end:
                break
            last = self.read(start + self.file_size - ENTRY.size)
            if last is not None and last.write_ms + horizon_ms >= read_time_ms:
                break
            seg = self._segments.pop(start)
            seg.close()
            self._path(start).unlink(missing_ok=True)
            dropped += 1
        if dropped:
            log.info("timer log: dropped %d segment(s) no longer needed", dropped)
        return dropped

    def segment_count(self) -> int:
        return len(self._segments)

    def flush(self) -> None:
        for start in list(self._segments):
            with contextlib.suppress(FileNotFoundError):  # dropped meanwhile
                fsync_file(self._path(start))
        if self._new_names:
            self._new_names = False  # before: a segment created during the fsync sets it again
            try:
                fsync_dir(self.dir)
            except OSError:
                self._new_names = True
                raise

    def close(self) -> None:
        for seg in self._segments.values():
            if not seg.closed:
                seg.flush()
                seg.close()
        self._segments.clear()
