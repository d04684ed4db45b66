"""The timer checkpoint file: two copies written in turn with pwrite, so a write torn by a
crash leaves the previous copy whole. Written only by the store's sync, after the log and
wheel it describes are on the disk, and fsynced at once: the copy on the disk never names
state a power loss can take."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

from .codec import CHECKPOINT_COPY_SIZE, TimerCheckpoint, encode_checkpoint, newest_checkpoint


class CheckpointFile:
    def __init__(self, path: Path) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        self._fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        self._seq = 0

    def load(self) -> TimerCheckpoint | None:
        cp = newest_checkpoint(os.pread(self._fd, 2 * CHECKPOINT_COPY_SIZE, 0))
        if cp is not None:
            self._seq = cp.seq
        return cp

    def store(self, cp: TimerCheckpoint) -> None:
        """Write `cp` over the older copy and fsync it."""
        self._seq += 1
        data = encode_checkpoint(dataclasses.replace(cp, seq=self._seq))
        os.pwrite(self._fd, data, (self._seq % 2) * CHECKPOINT_COPY_SIZE)
        os.fsync(self._fd)

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
