"""The checkpoint file: where the store was consistent on disk, and the abort marker.

`consistent` is a commit-log offset below which every record, its consume-queue entry and its
index entries were fsynced before the checkpoint was written; crash recovery verifies records
from there and trusts what lies before. `clean` is set only by an orderly shutdown.

The file holds two 512-byte slots written alternately in place, each with a sequence number
and a CRC; the valid slot with the higher sequence wins. Rewriting allocated bytes needs no
free space, so checkpoints keep working on a full disk, and a torn write spoils one slot only.
"""

from __future__ import annotations

import contextlib
import logging
import os
import struct
import zlib
from dataclasses import dataclass
from pathlib import Path

from .consumequeue import QueueFile
from .files import fsync_dir

log = logging.getLogger("ferrymq.store")

SLOT_SIZE = 512
_SLOT = struct.Struct(">iqqqqb")
_CRC = struct.Struct(">I")
_MAGIC = 0x0FE44C9


@dataclass(frozen=True)
class Checkpoint:
    log_flushed: int
    consistent: int
    timestamp_ms: int
    clean: bool = False


class CheckpointFile:
    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd = -1
        self._seq = 0

    def read(self) -> Checkpoint | None:
        try:
            raw = self.path.read_bytes()
        except FileNotFoundError:
            return None
        best: tuple[int, Checkpoint] | None = None
        for i in range(2):
            slot = raw[i * SLOT_SIZE : i * SLOT_SIZE + _SLOT.size + _CRC.size]
            if len(slot) < _SLOT.size + _CRC.size:
                continue
            (crc,) = _CRC.unpack_from(slot, _SLOT.size)
            if zlib.crc32(slot[: _SLOT.size]) != crc:
                continue
            magic, seq, flushed, consistent, ts, clean = _SLOT.unpack_from(slot)
            if magic != _MAGIC:
                continue
            if best is None or seq > best[0]:
                best = (seq, Checkpoint(flushed, consistent, ts, bool(clean)))
        if best is None:
            log.error("checkpoint %s has no valid slot; recovering from the log's start",
                      self.path)
            return None
        self._seq = best[0]
        return best[1]

    def open(self) -> None:
        existed = self.path.exists()
        self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        if not existed or os.fstat(self._fd).st_size < 2 * SLOT_SIZE:
            os.pwrite(self._fd, bytes(2 * SLOT_SIZE), 0)
            os.fsync(self._fd)
            fsync_dir(self.path.parent)

    def write(self, cp: Checkpoint) -> None:
        self._seq += 1
        body = _SLOT.pack(_MAGIC, self._seq, cp.log_flushed, cp.consistent, cp.timestamp_ms,
                          int(cp.clean))
        os.pwrite(self._fd, body + _CRC.pack(zlib.crc32(body)), (self._seq % 2) * SLOT_SIZE)
        os.fdatasync(self._fd)

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


def create_abort(path: Path) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.write(fd, str(os.getpid()).encode())
        os.fsync(fd)
    finally:
        os.close(fd)
    fsync_dir(path.parent)


def remove_abort(path: Path) -> None:
    try:
        path.unlink()
    except FileNotFoundError:
        return
    fsync_dir(path.parent)


def sync_names(new: list[QueueFile], *dirs: Path) -> None:
    """fsync the directories of queue files created since the last checkpoint (the queue's,
    its topic's, and `dirs`: consumequeue/ and the store's, any of which may be new), so that a
    power loss after the checkpoint cannot take a file whose entries it counts: recovery
    starts past them and would never write them again (a new topic's messages, or a queue's
    next 300,000, were lost to reads). Raises OSError, marking none named; the caller keeps
    them dirty and writes no checkpoint."""
    if not new:
        return
    todo: dict[Path, None] = {}
    for qf in new:
        qdir = qf.path.parent
        for d in (qdir, qdir.parent, *dirs):
            todo[d] = None
    for d in todo:
        with contextlib.suppress(FileNotFoundError):  # a queue deleted meanwhile
            fsync_dir(d)
    for qf in new:
        qf.named = True
