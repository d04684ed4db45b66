"""The timer checkpoint file: two copies written in turn with pwrite, so a write torn by a
crash leaves the previous copy whole. Written after every step (a killed process loses
nothing the kernel has), synced to disk by `sync` at the flush interval.

The copies lie past the first layout's two (the first 128 bytes, still read when no copy of
this layout is there yet): an upgraded broker's first write cannot tear the copy it started
from."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

from .codec import (
    CHECKPOINT_COPY_SIZE,
    CHECKPOINT_COPY_SIZE_V1,
    TimerCheckpoint,
    encode_checkpoint,
    newest_checkpoint,
)

COPIES_AT = 2 * CHECKPOINT_COPY_SIZE_V1


class CheckpointFile:
    def __init__(self, path: Path) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        self._fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        self._seq = 0

    def load(self) -> TimerCheckpoint | None:
        raw = os.pread(self._fd, COPIES_AT + 2 * CHECKPOINT_COPY_SIZE, 0)
        cp = newest_checkpoint(raw[COPIES_AT:])
        if cp is None:
            cp = newest_checkpoint(raw[:COPIES_AT], CHECKPOINT_COPY_SIZE_V1)
        if cp is not None:
            self._seq = cp.seq
        return cp

    def write(self, cp: TimerCheckpoint) -> None:
        self._seq += 1
        data = encode_checkpoint(dataclasses.replace(cp, seq=self._seq))
        os.pwrite(self._fd, data, COPIES_AT + (self._seq % 2) * CHECKPOINT_COPY_SIZE)

    def sync(self) -> None:
        os.fsync(self._fd)

    def close(self) -> None:
        if self._fd >= 0:
            os.fsync(self._fd)
            os.close(self._fd)
            self._fd = -1
