"""Key index under index/: RocketMQ's IndexFile layout, a hash table with chained entries in
one file.

    header (40 bytes): begin_ts i64, end_ts i64, begin_phys i64, end_phys i64,
                       slot_count i32, entry_count i32
    slots: slot_count x i32     the newest entry index for keys hashing there (0 = none)
    entries: max_entries x 20   key hash i32, commit-log offset i64, ms after begin_ts i32,
                                previous entry index i32

Differences from RocketMQ, on purpose: the key hash is CRC32 of "topic#key" (Java's
String.hashCode costs a Python loop per character), the time field is milliseconds (files
roll before it overflows), and files are named by the 20-digit commit-log offset of their
first entry. Files are preallocated so writes through the mapping cannot hit a full disk; on a
short disk a new file is made smaller (`Index.geometry`), each file's own header and length
giving its slots and entries.

Hash collisions and entries left behind by crash recovery are harmless: the store checks every
candidate against the record it points at. A put cut short by a kill (its header, written
last, still holds the count from before it) is undone when the file is loaded
(`IndexFile.restore_heads`), and recovery indexes its keys again.

Keys arrive a batch at a time, as KEY_ENTRY records (hash, offset, time) made by the encoder
for an append or by the dispatch for recovery and a slave, and one `put_keys` call writes them
into the mapping: compiled when built (_cindex.pyx), with its pure-Python twin in
_index_py.py."""

from __future__ import annotations

import contextlib
import logging
import mmap
import os
import re
import struct
import time
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING

from ..common.speedups import choose, interface
from . import _index_py
from .errors import StoreSpaceError
from .files import FileIO, fsync_dir, is_disk_full
from .index_layout import (
    ENTRY,
    ENTRY_SIZE,
    HEADER,
    HEADER_SIZE,
    KEY_ENTRY,
    KEY_ENTRY_SIZE,
    MAX_DIFF,
    SLOT,
    key_hash,
)

log = logging.getLogger("ferrymq.store.index")

# The batch put and a pull's walk over consume-queue entries (used by reads.py), compiled
# when built (FERRYMQ_NO_EXTENSIONS=1 selects the pure twin).
impl: ModuleType = choose("ferrymq.store._cindex", _index_py)
IMPLEMENTATION: str = impl.IMPLEMENTATION
if TYPE_CHECKING:
    from ._index_py import put_keys, scan_run
else:
    globals().update(interface(impl, _index_py))

_NAME = re.compile(r"^\d{20}(-\d+)?$")
RETIRE_GRACE_S = 30.0
FREE_SHARE = 8  # a new file takes at most 1/FREE_SHARE of the free space (see geometry)
MIN_FILE_BYTES = 256 * 1024


class IndexFile:
    def __init__(self, path: Path, fd: int, mm: mmap.mmap, slots: int, max_entries: int) -> None:
        self.path = path
        self.fd = fd
        self.mm = mm
        self.slots = slots
        self.max_entries = max_entries
        self.entries_at = HEADER_SIZE + slots * 4
        header = HEADER.unpack_from(mm, 0)
        self.begin_ts: int = header[0]
        self.end_ts: int = header[1]
        self.begin_phys: int = header[2]
        self.end_phys: int = header[3]
        self.count: int = header[5]
        if self.count < 1:
            self.count = 1  # entry 0 means "no entry", as in RocketMQ
        # False until the directory has been fsynced since the file was created: until then a
        # power loss may take the file, and every key in it, whatever was fsynced into it.
        self.named = True
        # True once fsynced after it stopped being the file written (puts only write the
        # last one): the periodic flush need not sync it again.
        self.sealed = False

    def restore_heads(self) -> int:
        """Undo what a put cut short by a kill left past the header's count; returns how many
        entries it found there. A put writes each entry, then points the key's slot at it, and
        the header (the count) last: entries past the count are the cut put's, and slots may
        point at them. Recovery indexes those keys again, but a slot pointing past the count
        cut its chain: lookups stopped there, and the next key of that slot began a new chain,
        so every older key of it was lost to queries. Each such entry was written before its
        slot, so its own previous-entry field holds the head the slot had before: that goes
        back into the slot, and the cut put's entries are cleared for recovery to write again."""
        mm, count, limit = self.mm, self.count, self.max_entries
        stale = []
        i = count
        while i < limit:
            entry = ENTRY.unpack_from(mm, self.entries_at + i * ENTRY_SIZE)
            if not any(entry):
                break  # never written: files are zero-filled, and puts write in order
            stale.append(entry[0])
            i += 1
        for h in stale:
            slot_at = HEADER_SIZE + (h % self.slots) * 4
            (head,) = SLOT.unpack_from(mm, slot_at)
            while count <= head < limit:
                (_h, _phys, _diff, prev) = ENTRY.unpack_from(mm, self.entries_at + head * ENTRY_SIZE)
                head = prev if prev < head else 0  # chains only go back; anything else is damage
            SLOT.pack_into(mm, slot_at, head)
        if stale:
            mm[self.entries_at + count * ENTRY_SIZE : self.entries_at + i * ENTRY_SIZE] = bytes(
                len(stale) * ENTRY_SIZE)
        return len(stale)

    @staticmethod
    def size_for(slots: int, max_entries: int) -> int:
        return HEADER_SIZE + slots * 4 + max_entries * ENTRY_SIZE

    def room(self) -> int:
        return self.max_entries - self.count

    def write_header(self) -> None:
        HEADER.pack_into(self.mm, 0, self.begin_ts, self.end_ts, self.begin_phys, self.end_phys,
                         self.slots, self.count)

    def lookup(self, h: int, begin_ts: int, end_ts: int, limit: int, out: list[int]) -> None:
        mm = self.mm
        count = self.count
        (idx,) = SLOT.unpack_from(mm, HEADER_SIZE + (h % self.slots) * 4)
        steps = 0
        while 0 < idx < count and len(out) < limit and steps < count:
            eh, phys, diff, prev = ENTRY.unpack_from(mm, self.entries_at + idx * ENTRY_SIZE)
            if eh == h and begin_ts <= self.begin_ts + diff <= end_ts:
                out.append(phys)
            if prev >= idx:  # chains only go back; anything else is damage
                break
            idx = prev
            steps += 1


class Index:
    def __init__(self, directory: Path, slots: int, max_entries: int, io: FileIO) -> None:
        self.dir = directory
        self.slots = slots
        self.max_entries = max_entries
        self.io = io
        self.files: list[IndexFile] = []
        self._retired: list[tuple[float, IndexFile]] = []

    def load(self) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        for path in sorted(p for p in self.dir.iterdir() if _NAME.match(p.name)):
            if path.stat().st_size < HEADER_SIZE:
                # Killed between creating the file and sizing it: it holds no entry.
                log.warning("index file %s was never filled in (%d bytes); removing it", path,
                            path.stat().st_size)
                path.unlink()
                continue
            fd = os.open(path, os.O_RDWR)
            mm = mmap.mmap(fd, 0)
            _, _, _, _, slots, _ = HEADER.unpack_from(mm, 0)
            if slots <= 0 or HEADER_SIZE + slots * 4 > len(mm):
                log.error("index file %s has a bad header; ignoring it", path)
                mm.close()
                os.close(fd)
                continue
            max_entries = (len(mm) - HEADER_SIZE - slots * 4) // ENTRY_SIZE
            f = IndexFile(path, fd, mm, slots, max_entries)
            if f.restore_heads():
                log.warning("index file %s: a put cut short by a crash left entries past its "
                            "count; the chains they cut are restored", path)
            self.files.append(f)

    def geometry(self) -> tuple[int, int]:
        """(slots, entries) of the next file. The configured size (42 MB by default) while
        it takes at most an eighth of the free space; on a short disk, both scaled down (in
        the configured ratio) to that eighth, so the data keeps the rest: a file of the full
        size refused every keyed put while half a small disk was free. A file that fills rolls
        to the next, sized again to what is free then. Never below MIN_FILE_BYTES: smaller
        files would roll every few keys, each holding a descriptor and a mapping."""
        full = IndexFile.size_for(self.slots, self.max_entries)
        share = self.io.free_bytes(self.dir) // FREE_SHARE
        if full <= share:
            return self.slots, self.max_entries
        scale = (max(share, MIN_FILE_BYTES) - HEADER_SIZE) / (full - HEADER_SIZE)
        if scale >= 1:
            return self.slots, self.max_entries
        return max(1, int(self.slots * scale)), max(2, int(self.max_entries * scale))

    def _create(self, first_phys: int) -> IndexFile:
        path = self.dir / f"{first_phys:020d}"
        n = 1
        while path.exists():
            path = self.dir / f"{first_phys:020d}-{n}"
            n += 1
        slots, max_entries = self.geometry()
        size = IndexFile.size_for(slots, max_entries)
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            self.io.fallocate(fd, 0, size)
        except OSError as exc:
            os.close(fd)
            path.unlink()
            if is_disk_full(exc):
                raise StoreSpaceError(path, size, "key-index file", exc) from exc
            raise
        mm = mmap.mmap(fd, size)
        HEADER.pack_into(mm, 0, 0, 0, 0, 0, slots, 1)
        f = IndexFile(path, fd, mm, slots, max_entries)
        if max_entries < self.max_entries:
            log.warning("index file %s holds %d keys, not %d: the disk of %s is short of space",
                        path, max_entries - 1, self.max_entries - 1, self.dir)
        f.named = False
        self.files = [*self.files, f]
        return f

    @property
    def end_phys(self) -> int:
        return self.files[-1].end_phys if self.files else -1

    def ensure_room(self, n: int, first_phys: int, ts: int) -> None:
        """Make sure the current file takes `n` more entries: called before a batch writes
        anything, so a full disk at file creation refuses the batch instead of losing keys."""
        if n == 0:
            return
        cur = self.files[-1] if self.files else None
        if (cur is None or cur.room() < n
                or (cur.count > 1 and ts - cur.begin_ts > MAX_DIFF // 2)):
            if cur is not None:
                cur.write_header()
            self._create(first_phys)

    def put_entries(self, entries: bytes | bytearray, base_phys: int, base_ts: int) -> None:
        """Index a batch of KEY_ENTRY records (offsets and times relative to `base_phys` and
        `base_ts`), rolling to a new file where the current one fills. The header is written
        at the end, so no finish_batch is needed."""
        n = len(entries) // KEY_ENTRY_SIZE
        if not n:
            return
        cur = self.files[-1]
        done = put_keys(cur, entries, 0, base_phys, base_ts)
        while done < n:
            _h, phys, _ts = KEY_ENTRY.unpack_from(entries, done * KEY_ENTRY_SIZE)
            cur = self._create(base_phys + phys)
            now = put_keys(cur, entries, done, base_phys, base_ts)
            if now == done:
                raise RuntimeError("a new index file took no key")
            done = now

    def cut(self, pos: int) -> None:
        """The commit log was cut at `pos`: no file holds keys of a record at or past it any
        more (the entries there are stale, and harmless). end_phys says how far records are
        indexed, and the dispatch of replicated records and recovery index only records past
        it: left past the cut, the keys of the records written there next were never
        indexed. The header is written at once, so a kill does not bring the old end back."""
        for f in self.files:
            if f.end_phys >= pos:
                f.end_phys = pos - 1
                f.sealed = False
                with contextlib.suppress(ValueError):
                    f.write_header()

    def finish_batch(self) -> None:
        if self.files:
            self.files[-1].write_header()

    def query(self, topic: str, key: str, limit: int, begin_ts: int, end_ts: int) -> list[int]:
        h = key_hash(topic, key)
        out: list[int] = []
        for f in reversed(self.files):
            if len(out) >= limit:
                break
            if f.count <= 1 or f.begin_ts > end_ts or f.end_ts < begin_ts:
                continue
            try:
                f.lookup(h, begin_ts, end_ts, limit, out)
            except (ValueError, struct.error):  # a retired file closed under us
                continue
        return out

    def flush(self) -> bool:
        """The maintenance thread's periodic flush; False when an fsync failed (the checkpoint
        must not then count the keys as on disk). An fsync of the file, not mmap.flush():
        msync runs holding the interpreter lock (CPython's mmap does not release it), so the
        broker's event loop stood still for as long as the disk took to write the pages the
        keys dirtied since the last flush (tens of ms each second under trace records or any
        keyed puts). The pages written through the mapping are the file's page cache, which
        fsync writes out the same way, with the lock released."""
        ok = True
        files = self.files
        # Every file written since its last sync, not only the last two: several may fill
        # between two checkpoints, and the keys of one left unsynced were lost to a power
        # loss (the checkpoint counted them; recovery never indexed them again).
        for f in files:
            if f.sealed:
                continue
            last = f is files[-1]
            try:
                f.write_header()
                os.fsync(f.fd)
            except ValueError:  # retired and closed meanwhile
                pass
            except OSError as exc:
                log.error("fsync of index file %s failed: %s", f.path, exc)
                ok = False
            else:
                f.sealed = not last
        # Files created since the last flush: their names must be on disk before the
        # checkpoint counts their keys, or a power loss takes them with every key they hold
        # (recovery starts past those records and never indexes them again). A failure
        # raises: the checkpoint is not written, and the next flush tries again.
        new = [f for f in self.files if not f.named]
        if new:
            fsync_dir(self.dir)
            for f in new:
                f.named = True
        return ok

    def delete_below(self, min_phys: int) -> None:
        files = self.files
        drop = 0
        while drop < len(files) - 1 and files[drop].end_phys < min_phys:
            drop += 1
        if drop:
            gone, self.files = files[:drop], files[drop:]
            now = time.monotonic()
            for f in gone:
                with contextlib.suppress(FileNotFoundError):
                    f.path.unlink()
                self._retired.append((now, f))

    def close_retired(self, force: bool = False) -> None:
        now = time.monotonic()
        keep: list[tuple[float, IndexFile]] = []
        for when, f in self._retired:
            if force or now - when > RETIRE_GRACE_S:
                with contextlib.suppress(OSError, ValueError):
                    f.mm.close()
                    os.close(f.fd)
            else:
                keep.append((when, f))
        self._retired = keep

    def close(self) -> None:
        for f in self.files:
            with contextlib.suppress(OSError, ValueError):
                f.write_header()
                f.mm.flush()
                f.mm.close()
                os.close(f.fd)
        self.files = []
        self.close_retired(force=True)


__all__ = ["ENTRY", "ENTRY_SIZE", "HEADER", "HEADER_SIZE", "IMPLEMENTATION", "KEY_ENTRY",
           "KEY_ENTRY_SIZE", "MAX_DIFF", "SLOT", "Index", "IndexFile", "impl", "key_hash",
           "put_keys", "scan_run"]
