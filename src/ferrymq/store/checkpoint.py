"""The checkpoint file: where the store was consistent on disk, and the abort marker.

`consistent` is a commit-log offset below which every record, its consume-queue entry and its
index entries were fsynced before the checkpoint was written; crash recovery verifies records
from there and trusts what lies before. `clean` is set only by an orderly shutdown."""

from __future__ import annotations

import json
import logging
import os
from dataclasses import asdict, dataclass
from pathlib import Path

from .files import atomic_write, fsync_dir, read_json_file

log = logging.getLogger("ferrymq.store")


@dataclass(frozen=True)
class Checkpoint:
    log_flushed: int
    consistent: int
    timestamp_ms: int
    clean: bool = False


def read_checkpoint(path: Path) -> Checkpoint | None:
    data = read_json_file(path, None)
    if not isinstance(data, dict):
        return None
    try:
        return Checkpoint(int(data["log_flushed"]), int(data["consistent"]),
                          int(data["timestamp_ms"]), bool(data.get("clean", False)))
    except (KeyError, TypeError, ValueError) as exc:
        log.error("checkpoint %s is unreadable (%s); recovering from the log's start", path, exc)
        return None


def write_checkpoint(path: Path, cp: Checkpoint) -> None:
    atomic_write(path, json.dumps(asdict(cp)).encode())


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
