"""The pure-Python implementation of the store's per-entry index work (index.py and reads.py
select it or the compiled twin, _cindex.pyx, which must write the same bytes and return the
same results).

- The key index's batch put: a batch of keys travels as KEY_ENTRY records (hash, commit-log
  offset, store time) in one buffer, so the index is entered once per batch instead of once
  per key.
- A pull's walk over consume-queue entries, when nothing filters them."""

from __future__ import annotations

import mmap
from typing import Protocol

from ..common.record.layout import CQ_ENTRY
from .index_layout import ENTRY, ENTRY_SIZE, HEADER, HEADER_SIZE, KEY_ENTRY, MAX_DIFF, SLOT

IMPLEMENTATION = "python"
_INT64_MAX = (1 << 63) - 1  # where the compiled twin's run end would wrap
# What the compiled twin provides too.
INTERFACE = ("put_keys", "scan_run")


class IndexFileState(Protocol):
    """What the batch put reads from an index file and updates in it."""

    mm: mmap.mmap
    slots: int
    max_entries: int
    entries_at: int
    count: int
    begin_ts: int
    end_ts: int
    begin_phys: int
    end_phys: int


def put_keys(f: IndexFileState, entries: bytes | bytearray, start: int, base_phys: int,
             base_ts: int) -> int:
    """Write the key entries of `entries` from the `start`th on into the index file `f`, each
    at commit-log offset base_phys + its offset and time base_ts + its time, until the file is
    full or an entry's time would not fit its time field; then write the header. Returns the
    index of the first entry not written (their number when all were)."""
    mm = f.mm
    slots, max_entries, entries_at = f.slots, f.max_entries, f.entries_at
    count, begin_ts, begin_phys = f.count, f.begin_ts, f.begin_phys
    end_phys, end_ts = f.end_phys, f.end_ts
    n = len(entries) // KEY_ENTRY.size
    if not 0 <= start <= n:
        raise ValueError(f"put_keys: start {start} outside 0..{n}")
    if slots < 1 or count < 1 or entries_at + max_entries * ENTRY_SIZE > len(mm):
        raise ValueError("put_keys: the index file's geometry does not fit its mapping")
    unpack_slot, pack_slot, pack_entry = SLOT.unpack_from, SLOT.pack_into, ENTRY.pack_into
    i = start
    for h, phys, ts in KEY_ENTRY.iter_unpack(memoryview(entries)[start * KEY_ENTRY.size:
                                                                  n * KEY_ENTRY.size]):
        if not 0 <= h <= 0x7FFFFFFF:
            raise ValueError(f"put_keys: key hash {h} out of range")
        if count >= max_entries:
            break
        phys += base_phys
        ts += base_ts
        if count == 1 and begin_ts == 0:
            begin_ts, begin_phys = ts, phys
        # A clock that stepped back must not make a new file per message: clamp to the start.
        diff = max(0, ts - begin_ts)
        if diff > MAX_DIFF:
            break
        slot_at = HEADER_SIZE + (h % slots) * 4
        (prev,) = unpack_slot(mm, slot_at)
        if not 0 < prev < count:
            prev = 0
        pack_entry(mm, entries_at + count * ENTRY_SIZE, h, phys, diff, prev)
        pack_slot(mm, slot_at, count)
        count += 1
        if phys > end_phys:
            end_phys = phys
        if ts > end_ts:
            end_ts = ts
        i += 1
    f.count, f.begin_ts, f.begin_phys, f.end_phys, f.end_ts = (count, begin_ts, begin_phys,
                                                               end_phys, end_ts)
    HEADER.pack_into(mm, 0, begin_ts, end_ts, begin_phys, end_phys, slots, count)
    return i


def scan_run(raw: bytes, max_nums: int, max_bytes: int, min_phys: int
             ) -> tuple[int, int, list[list[int]]] | None:
    """The records an unfiltered pull takes from consume-queue entries `raw`: the first
    `count` entries, up to max_nums of them and max_bytes (the first is taken whatever its
    size). Returns (count, total bytes, runs), a run being a [start, end) of the commit log
    holding records back to back; None when an entry points below min_phys (a segment being
    removed), an entry's size is not positive or its end overflows an int64 (a damaged queue
    entry), or `raw` is not whole entries: the general walk handles those."""
    if not raw or len(raw) % CQ_ENTRY.size:
        return None
    runs: list[list[int]] = []
    count = total = 0
    for phys, size, _tag in CQ_ENTRY.iter_unpack(raw):
        if count and (count >= max_nums or total + size > max_bytes):
            break
        if phys < min_phys or size <= 0 or phys + size > _INT64_MAX:
            return None
        if runs and runs[-1][1] == phys:
            runs[-1][1] = phys + size
        else:
            runs.append([phys, phys + size])
        total += size
        count += 1
    return count, total, runs
