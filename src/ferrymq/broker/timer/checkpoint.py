"""The timer checkpoint file: two copies written in turn with pwrite, so a write torn by a
crash leaves the previous copy whole. Written after every step (a killed process loses
nothing the kernel has), synced to disk by `sync` at the flush interval."""

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
        raw = os.pread(self._fd, 2 * CHECKPOINT_COPY_SIZE, 0)
        cp = newest_checkpoint(raw)
        if cp is not None:
            self._seq = cp.seq
        return cp

    def write(self, cp: TimerCheckpoint) -> None:
        self._seq += 1
        data = encode_checkpoint(dataclasses.replace(cp, seq=self._seq))
        os.pwrite(self._fd, data, (self._seq % 2) * CHECKPOINT_COPY_SIZE)

    def sync(self) -> None:
        os.fsync(self._fd)

    def close(self) -> None:
        if self._fd >= 0:
            os.fsync(self._fd)
            os.close(self._fd)
            self._fd = -1
