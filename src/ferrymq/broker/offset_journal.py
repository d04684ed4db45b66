"""The consumer-offset journal: every commit is appended to
config/consumerOffset.journal.<generation> and fsynced before it is answered, so an answered
commit survives a broker crash. Appends are grouped (one fsync for whatever arrived while the
previous one ran; one record per queue committed meanwhile, its progress at the write, which
covers every commit of it before) and run off the event loop. consumerOffset.json stays the compacted
snapshot: it records the last journal sequence it covers, a new generation starts with each
snapshot and older generations are deleted once the snapshot is on disk.

A line is `<crc32 hex> <json>\n`, the JSON `[seq, "topic@group", queueId, offset, acked]`;
a torn or damaged line ends the replay of its file."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import threading
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from ..common import jsonx

log = logging.getLogger("ferrymq.broker.offsets")

JOURNAL_PREFIX = "consumerOffset.journal."
_GEN = re.compile(re.escape(JOURNAL_PREFIX) + r"(\d+)$")


@dataclass(frozen=True, slots=True)
class JournalRecord:
    seq: int
    key: str
    queue_id: int
    offset: int
    # None (journals written before records held the whole progress): keep the ranges above
    # the new offset.
    acked: tuple[tuple[int, int], ...] | None


def encode_record(rec: JournalRecord) -> bytes:
    """One line per queue committed since the last write: the C encoder, whose output for
    these plain values is jsonx's (6x faster)."""
    acked = None if rec.acked is None else [[a, b] for a, b in rec.acked]
    body = json.dumps([rec.seq, rec.key, rec.queue_id, rec.offset, acked],
                      separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    return b"%08x %s\n" % (zlib.crc32(body), body)


def decode_record(line: bytes) -> JournalRecord | None:
    """None for a line that is torn or damaged."""
    if len(line) < 10 or line[8:9] != b" " or not line.endswith(b"\n"):
        return None
    body = line[9:-1]
    try:
        if int(line[:8], 16) != zlib.crc32(body):
            return None
        seq, key, qid, offset, acked = jsonx.loads(body)
        ranges = None if acked is None else tuple((int(a), int(b)) for a, b in acked)
        return JournalRecord(int(seq), str(key), int(qid), int(offset), ranges)
    except (ValueError, TypeError):
        return None


class OffsetJournal:
    def __init__(self, config_dir: Path) -> None:
        self._dir = config_dir
        self._fd: int | None = None
        self._fd_gen = -1
        self._file_lock = threading.Lock()

    def generations(self) -> list[int]:
        try:
            names = os.listdir(self._dir)
        except FileNotFoundError:
            return []
        return sorted(int(m.group(1)) for n in names if (m := _GEN.match(n)))

    def path(self, gen: int) -> Path:
        return self._dir / f"{JOURNAL_PREFIX}{gen}"

    def replay(self) -> Iterator[JournalRecord]:
        for gen in self.generations():
            data = self.path(gen).read_bytes()
            for line in data.splitlines(keepends=True):
                rec = decode_record(line)
                if rec is None:
                    log.warning("offset journal %s: damaged or torn record; rest ignored",
                                self.path(gen))
                    break
                yield rec

    def append(self, gen: int, data: bytes) -> None:
        """Write and fsync (blocking: called on a worker thread). On failure (a full disk)
        the file is cut back to its length before: a part of the data left behind would be a
        torn record, where the replay stops, ignoring every record the retry appends."""
        with self._file_lock:
            if self._fd_gen != gen:
                self._close()
                self._dir.mkdir(parents=True, exist_ok=True)
                self._fd = os.open(self.path(gen), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
                _fsync_dir(self._dir)  # the new file's name must survive a crash too
                self._fd_gen = gen  # only now: a failed fsync_dir is done again by the retry
            assert self._fd is not None
            before = os.fstat(self._fd).st_size
            try:
                view = memoryview(data)
                while view:
                    view = view[os.write(self._fd, view):]
                os.fdatasync(self._fd)
            except OSError:
                with contextlib.suppress(OSError):
                    os.ftruncate(self._fd, before)
                raise

    def drop_before(self, gen: int) -> None:
        """Generations older than `gen` are covered by a snapshot on disk."""
        for old in self.generations():
            if old < gen:
                with self._file_lock:
                    if self._fd_gen == old:
                        self._close()
                    self.path(old).unlink(missing_ok=True)

    def _close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
        self._fd = None
        self._fd_gen = -1

    def close(self) -> None:
        with self._file_lock:
            self._close()


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
