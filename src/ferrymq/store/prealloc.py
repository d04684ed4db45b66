"""Zero-filling the commit log ahead of the writer.

A write into a hole of a sparse segment allocates blocks, and the fsync after it must commit
that allocation too: measured here, fdatasync after a 32 KiB append took 0.36 ms on a sparse
segment and 0.18 ms on one already zero-filled. This thread writes zeros ahead of the write
position (the rest of the current segment, then the next segment, which it also creates) in
large chunks, so the writer's appends and the flusher's fsyncs meet allocated blocks.

The writer is never blocked by it in practice and never overwritten by it: before each write
the writer claims the bytes it is about to write; the filler announces a range before zeroing
it and never starts one below the latest claim. While the filler is ahead of the writer it
goes on from where it stopped, and a fresh log is filled from right behind its first write
(starting `gap` past the writer there left a fresh store's first 4 MiB sparse: its first
60-odd SYNC_FLUSH group commits, each with a slow fdatasync, took twice as long). Once the
writer has overtaken it (the filler was paused), it starts `gap` bytes past the latest
claim. A writer whose claim would reach into the range being zeroed (or end within 8 bytes
of it, where the blank closing a segment may follow) waits for that one chunk: at most ~1 ms
of zeros, and only when it catches up with the filler.

A failed zero-fill (ENOSPC) costs nothing but speed: it is logged once, the filler pauses,
and writes go to the sparse holes as before, where a full disk is the writer's ENOSPC and a
DISK_FULL answer. The filler works only while disk usage is below the clean ratio, so the
space it takes never pushes retention into deleting data; it fills at most one segment past
the current one."""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Iterator

from .commitlog import END_FILE_MIN_BLANK, CommitLog
from .files import FileIO

log = logging.getLogger("ferrymq.store")

CHUNK = 1 << 20
PAUSE_AFTER_ERROR_S = 5.0


class Preallocator:
    def __init__(self, clog: CommitLog, io: FileIO, ahead: int,
                 may_fill: Callable[[], bool], chunk: int = CHUNK) -> None:
        self.log = clog
        self.io = io
        self.ahead = ahead
        self.chunk = min(chunk, clog.segment_size // 16)
        self.gap = 4 * self.chunk
        self._may_fill = may_fill
        self._cond = threading.Condition()
        self._claim = clog.write_pos
        self._zeroing: tuple[int, int] | None = None
        self.filled = clog.write_pos  # zeros written up to here, once ahead of the writer
        self._origin = self.filled
        self._wake_at = 0
        self._wake = threading.Event()
        self._stop = False
        self._thread: threading.Thread | None = None
        self._failed_errno = 0
        self.zeroed_bytes = 0
        self.wakes = 0  # looks at what to fill (tests wait for the first)
        self.claim_waits = 0  # claims that waited for a range being zeroed
        self._cuts = 0  # truncations under way (`cutting`)

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="ferrymq-store-prealloc",
                                        daemon=True)
        self._thread.start()
        self._wake.set()  # a reopened log is filled ahead before its first write

    def stop(self) -> None:
        self._stop = True
        self._wake.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    # --- the writer (under the store's lock) ----------------------------------------------------
    def claim(self, end: int) -> None:
        """The writer is about to write bytes ending at `end`. It waits for a range being
        zeroed that starts less than END_FILE_MIN_BLANK past `end`: if the next record does
        not fit this segment, the blank that closes it goes at `end`, unclaimed, and the zeros
        still in flight would land on it (recovery reads them as the end of the log)."""
        with self._cond:
            while self._zeroing is not None and self._zeroing[0] < end + END_FILE_MIN_BLANK:
                self.claim_waits += 1
                self._cond.wait()
            if end > self._claim:
                self._claim = end
        if end >= self._wake_at:
            self._wake.set()

    @contextlib.contextmanager
    def cutting(self) -> Iterator[None]:
        """Around a truncation of the log: waits for the range being zeroed (the segments
        cut are closed, and a write to a closed descriptor could land in whatever file reuses
        its number), keeps the filler off the log meanwhile, then starts it again from the new
        write position (the cut left holes behind it)."""
        with self._cond:
            while self._zeroing is not None:
                self._cond.wait()
            self._cuts += 1
        try:
            yield
        finally:
            with self._cond:
                self._cuts -= 1
                pos = self.log.write_pos
                self._claim = self.filled = self._origin = pos
            self._wake.set()

    # --- the thread -----------------------------------------------------------------------------
    def _run(self) -> None:
        while not self._stop:
            self._wake.wait(1.0)
            self._wake.clear()
            self.wakes += 1
            try:
                self._fill()
            except Exception:
                log.exception("commit-log preallocation failed; retrying")
                self._pause()

    def _pause(self) -> None:
        deadline = time.monotonic() + PAUSE_AFTER_ERROR_S
        while not self._stop and time.monotonic() < deadline:
            time.sleep(0.1)

    def _target(self) -> int:
        """How far to fill: `ahead` past the writer, not beyond the segment after its own."""
        pos = self.log.write_pos
        seg_size = self.log.segment_size
        next_end = pos - pos % seg_size + 2 * seg_size
        return min(pos + self.ahead, next_end)

    def _next_start(self) -> int:
        """Where the next range starts (under `_cond`). Never within END_FILE_MIN_BLANK of
        the latest claim: rolling to the next segment, the writer writes the blank record that
        closes the current one there before it claims anything (zeros over it would read as
        the end of the log)."""
        behind = self._claim + END_FILE_MIN_BLANK
        if self.filled >= behind:
            return self.filled
        if self.filled >= self._claim or self.filled == self._origin:
            # Caught up with the writer, or nothing filled yet while the writer already wrote
            # (a fresh log's first segment is created by its first write): right behind it.
            return behind
        return self._claim + self.gap

    def _fill(self) -> None:
        clog = self.log
        while not self._stop:
            target = self._target()
            with self._cond:
                start = self._next_start()
            if start >= target or not self._may_fill():
                self._wake_at = max(clog.write_pos, self.filled - self.ahead // 2)
                return
            seg = clog.segment_for(start)
            if seg is None:
                # In the segment after the last one: create it here, off the writer's path. A
                # fresh log's first segment is the writer's to create: a slave's empty log may
                # yet be moved to start at its master's first offset (restart_at). Only right
                # after the last segment, checked under the log's creation lock: a slave's cut
                # may have removed segments since this look.
                try:
                    seg = clog.create_next(start - start % clog.segment_size)
                except OSError as exc:
                    self._failed(exc)
                    return
                if seg is None:
                    return
            end = min(seg.end, start - start % self.chunk + self.chunk)
            with self._cond:
                if self._cuts:
                    return  # woken again when the cut is done
                if self._next_start() != start or seg not in self.log.segments:
                    continue  # the writer moved on, or the log was cut, meanwhile: pick again
                self._zeroing = (start, end)
            failure: OSError | None = None
            try:
                self.io.zero_fill(seg.fd, start - seg.start, end - start)
                # Clean the zeros here: left dirty, the flusher's next fdatasync of this file
                # would have to write them, on the writer's clock.
                self.io.fsync(seg.fd)
            except OSError as exc:
                failure = exc
            finally:
                with self._cond:
                    self._zeroing = None
                    self._cond.notify_all()
            if failure is not None:
                self._failed(failure)  # pauses: the range is released first, or a writer
                return                 # reaching into it would wait out the pause
            with self._cond:
                self.filled = max(self.filled, end)
            self.zeroed_bytes += end - start
            if self._failed_errno:
                log.info("commit-log preallocation works again")
                self._failed_errno = 0

    def _failed(self, exc: OSError) -> None:
        if exc.errno != self._failed_errno:
            log.warning("cannot preallocate the commit log ahead of the writer (%s); writes go "
                        "to unallocated space until it works again", exc)
            self._failed_errno = exc.errno or -1
        self._pause()
