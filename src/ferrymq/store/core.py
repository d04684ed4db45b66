"""What the store's parts use of its core: the read side (queries.py), the log as a replication
source and target (replica.py) and retention (retention.py) each take the core, MessageStore
(store.py), in their constructor. They are typed against this protocol, so none of them
imports store.py, which builds them."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

from .checkpoint import Checkpoint
from .commitlog import CommitLog
from .config import StoreConfig
from .consumequeue import ConsumeQueue
from .index import Index
from .integrity import ReadGuard
from .prealloc import Preallocator
from .recovery import RecordInfo
from .scrub import Scrubber
from .visibility import Visibility

# A consume queue's entries and key-index entries waiting to be written (StoreCore.dispatch).
Pending = dict[tuple[str, int], list[bytes]]


class StoreCore(Protocol):
    config: StoreConfig
    commitlog: CommitLog
    cqs: dict[tuple[str, int], ConsumeQueue]  # mutated under `lock` only
    index: Index
    lock: threading.Lock  # serialises appends, cuts and queue changes
    checkpoint_lock: threading.Lock  # taken before `lock` when both are
    guard: ReadGuard
    visibility: Visibility
    dead_queues: list[ConsumeQueue]  # deleted, descriptors not yet closed
    preallocator: Preallocator | None
    scrubber: Scrubber | None
    clock: Callable[[], int]

    @property
    def root(self) -> Path: ...

    def checkpoint(self, clean: bool = False) -> Checkpoint: ...

    def checkpoint_below(self, pos: int) -> None:
        """A checkpoint no further than `pos`, written before the log is cut there (the
        caller holds the checkpoint lock and the store lock)."""

    def dispatch(self, infos: list[RecordInfo], pending: Pending, keys: bytearray) -> None:
        """Queue each record's consume-queue entry in `pending` and its key-index entries in
        `keys`, as recovery does; write_pending writes both."""

    def write_pending(self, pending: Pending, keys: bytearray,
                      commit: bool = True) -> list[ConsumeQueue]: ...

    def appended(self, arrivals: list[tuple[str, int, int]]) -> None:
        """Tell the listeners the log grew and which queues readers may see more of."""
