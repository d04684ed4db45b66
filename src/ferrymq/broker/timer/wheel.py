"""The timer wheel file: a ring of fixed-size slots, one per `precision_ms` of time, mapped in
memory. Slot i holds the timers due in [t, t + precision) for the t with t // precision ≡ i
(mod slots) that was last linked there; a slot whose stored time is not the asked one is
empty. The file is created sparse: a slot takes disk space once it is written."""

from __future__ import annotations

import mmap
import os
from collections.abc import Iterator
from pathlib import Path

from ...store.files import fsync_file
from .codec import SLOT, Slot, TimerFileError

_EMPTY = Slot(0, -1, -1, 0)


class TimerWheel:
    def __init__(self, path: Path, slots: int, precision_ms: int) -> None:
        self.path = path
        self.slots = slots
        self.precision_ms = precision_ms
        size = slots * SLOT.size
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            have = os.fstat(fd).st_size
            if have not in (0, size):
                raise TimerFileError("wheel", f"{path} is {have} bytes; {slots} slots need {size}")
            if have == 0:
                os.ftruncate(fd, size)
            self._map = mmap.mmap(fd, size)
        finally:
            os.close(fd)

    @property
    def horizon_ms(self) -> int:
        return self.slots * self.precision_ms

    def slot_time(self, time_ms: int) -> int:
        return time_ms - time_ms % self.precision_ms

    def _offset(self, time_ms: int) -> int:
        return (time_ms // self.precision_ms) % self.slots * SLOT.size

    def get(self, time_ms: int) -> Slot:
        """The slot of `time_ms`'s slot time; an empty one when the ring holds another time."""
        slot_ms = self.slot_time(time_ms)
        slot = Slot(*SLOT.unpack_from(self._map, self._offset(slot_ms)))
        return slot if slot.time_ms == slot_ms else _EMPTY._replace(time_ms=slot_ms)

    def put(self, slot: Slot) -> None:
        SLOT.pack_into(self._map, self._offset(slot.time_ms), *slot)

    def clear(self, time_ms: int) -> None:
        SLOT.pack_into(self._map, self._offset(time_ms), 0, -1, -1, 0, 0)

    def clear_ring(self, index: int) -> None:
        """Empty the ring's position `index`, whatever time it holds."""
        SLOT.pack_into(self._map, index * SLOT.size, 0, -1, -1, 0, 0)

    def live_slots(self, from_ms: int) -> Iterator[Slot]:
        """Every slot holding timers at or after `from_ms` (one pass over the file)."""
        start = self.slot_time(from_ms)
        for fields in SLOT.iter_unpack(self._map):
            if fields[0] >= start and fields[3] > 0:
                yield Slot(*fields)

    def next_busy(self, from_ms: int, until_ms: int) -> int | None:
        """The first slot time in [from_ms, until_ms) with timers, None if none."""
        t = self.slot_time(from_ms)
        step = self.precision_ms
        unpack = SLOT.unpack_from
        data = self._map
        while t < until_ms:
            fields = unpack(data, self._offset(t))
            if fields[0] == t and fields[3] > 0:
                return t
            t += step
        return None

    def flush(self) -> None:
        fsync_file(self.path)

    def close(self) -> None:
        if not self._map.closed:
            self._map.flush()
            self._map.close()
