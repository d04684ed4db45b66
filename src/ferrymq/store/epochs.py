"""The epoch file: which master epoch wrote which part of the commit log.

Each entry is (epoch, first offset): the master of `epoch` wrote from that offset until the
next entry's. Two replicas agree on their logs up to the end of the last epoch both lists
hold with the same start; past it, a returning old master may hold bytes the new master never
had, and must cut them (docs/replication.md, "Epochs")."""

from __future__ import annotations

import json
import threading
from collections.abc import Sequence
from pathlib import Path

from ..common.errors import FerryMQError
from .files import atomic_write

Epoch = tuple[int, int]


class EpochFileError(FerryMQError, ValueError):
    def __init__(self, path: Path, reason: str) -> None:
        super().__init__(f"epoch file {path}: {reason}")
        self.path = path
        self.reason = reason


def _check(entries: Sequence[Sequence[int]]) -> list[Epoch]:
    out: list[Epoch] = []
    for item in entries:
        if len(item) != 2:
            raise ValueError(f"an epoch entry is [epoch, startOffset], not {list(item)!r}")
        epoch, start = int(item[0]), int(item[1])
        if out and (epoch <= out[-1][0] or start < out[-1][1]):
            raise ValueError(f"epochs must grow with their offsets: {out[-1]} then {(epoch, start)}")
        out.append((epoch, start))
    return out


def agreed_end(mine: Sequence[Epoch], my_end: int, theirs: Sequence[Epoch], their_end: int) -> int:
    """Where two logs stop being known to agree: the end of the last epoch both hold with the
    same start, as the smaller of the two ends of that epoch. 0 when they share none."""
    starts = {e: s for e, s in theirs}
    for i in range(len(mine) - 1, -1, -1):
        epoch, start = mine[i]
        if starts.get(epoch) != start:
            continue
        j = next(k for k, (e, _) in enumerate(theirs) if e == epoch)
        end_mine = mine[i + 1][1] if i + 1 < len(mine) else my_end
        end_theirs = theirs[j + 1][1] if j + 1 < len(theirs) else their_end
        return min(end_mine, end_theirs)
    return 0


class EpochFile:
    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._entries: list[Epoch] = []

    def load(self) -> None:
        if not self.path.exists():
            return
        try:
            raw = json.loads(self.path.read_bytes())
            self._entries = _check(raw["epochs"])
        except (ValueError, KeyError, TypeError) as exc:
            raise EpochFileError(self.path, str(exc)) from None

    def entries(self) -> list[Epoch]:
        with self._lock:
            return list(self._entries)

    @property
    def last_epoch(self) -> int:
        with self._lock:
            return self._entries[-1][0] if self._entries else 0

    def begin(self, epoch: int, start: int) -> None:
        """A master of `epoch` starts writing at `start`; a repeated begin is a no-op."""
        with self._lock:
            if self._entries and self._entries[-1][0] == epoch:
                return
            self._entries = _check([*self._entries, (epoch, start)])
            self._write()

    def replace(self, entries: Sequence[Sequence[int]], end: int) -> None:
        """Adopt a master's list, as far as this log reaches (`end`)."""
        checked = [e for e in _check(entries) if e[1] <= end]
        with self._lock:
            if checked != self._entries:
                self._entries = checked
                self._write()

    def _write(self) -> None:
        atomic_write(self.path, json.dumps({"epochs": self._entries}).encode())
