"""The timer store: wheel, log and checkpoint together, driven with explicit times (the
service supplies the clock). Timers live only in the files: linking one appends a log entry
whose `prev` is the slot's last entry and points the slot at it, RocketMQ's TimerLog /
TimerWheel layout.

Durability is RocketMQ's TimerFlushService's: `sync` fsyncs the log and the wheel, then writes
and fsyncs the checkpoint of the state they were flushed in; nothing else writes the
checkpoint. Whatever ends a run (a stop, a kill, a power loss), the checkpoint on the disk
names only what is on the disk, so every start takes the same way back to it: the log is cut
at its end, ring positions pointing at or past that end (links made after it, still in the
page cache or written back by the kernel) are rebuilt from the log below it, and the service
links the timer queue again from its offset. Links made after the last sync are made again,
and deliveries made after it may be made again: at least once, up to one flush interval."""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from pathlib import Path

from ...store.files import fsync_dir
from .checkpoint import CheckpointFile
from .codec import ENTRY, LogEntry, Slot, TimerCheckpoint
from .log import TimerLog
from .wheel import TimerWheel

log = logging.getLogger("ferrymq.broker.timer")


@dataclass(frozen=True, slots=True)
class TimerStoreConfig:
    root: Path  # the store directory: timerwheel, timerlog/ and config/timercheck go there
    precision_ms: int = 100
    slots: int = 7 * 24 * 3600
    log_file_size: int = 100 * 1024 * 1024


def wheel_path(root: Path) -> Path:
    return root / "timerwheel"


def log_dir(root: Path) -> Path:
    return root / "timerlog"


def checkpoint_path(root: Path) -> Path:
    return root / "config" / "timercheck"


class TimerStore:
    def __init__(self, cfg: TimerStoreConfig, now_ms: int, first_enqueue_offset: int = 0,
                 commit_end: int | None = None) -> None:
        """`commit_end`: where the commit log ends now (its records past it are gone), to
        find the links a power loss left without their record."""
        self.cfg = cfg
        self._names_synced = False  # the files' names, made or found here, not fsynced yet
        # Held by sync (a worker thread) and close: a stop that cancelled the timer's task
        # while its sync ran must not close the files under it (the sync's checkpoint write
        # could then land in whatever file reused the descriptor).
        self._sync_lock = threading.Lock()
        self._cp = CheckpointFile(checkpoint_path(cfg.root))
        cp = self._cp.load()
        if cp is None:
            # Files without a checkpoint were never synced with one: start empty.
            wheel_path(cfg.root).unlink(missing_ok=True)
            precision, slots, log_end = cfg.precision_ms, cfg.slots, 0
        else:
            precision, slots, log_end = cp.precision_ms, cp.slots, cp.log_end
            if (precision, slots) != (cfg.precision_ms, cfg.slots):
                log.warning("timer wheel keeps its geometry (%d ms x %d slots) over the configured "
                            "%d ms x %d slots: its files hold pending timers", precision, slots,
                            cfg.precision_ms, cfg.slots)
        self.wheel = TimerWheel(wheel_path(cfg.root), slots, precision)
        self.log = TimerLog(log_dir(cfg.root), cfg.log_file_size, log_end)
        if cp is None:
            self.read_time_ms = self.wheel.slot_time(now_ms)
            self.slot_done = 0
            self.enqueue_offset = first_enqueue_offset
        else:
            self.read_time_ms = cp.read_time_ms
            self.slot_done = cp.slot_done
            self.enqueue_offset = cp.enqueue_offset
            self._recover(commit_end)
        # Before anything new is written: a lost link's flag must be on the disk before the
        # commit log stores another record at its offset (no later start could tell them
        # apart), and a new store gets its first checkpoint.
        self.sync()

    @property
    def precision_ms(self) -> int:
        return self.wheel.precision_ms

    @property
    def horizon_ms(self) -> int:
        return self.wheel.horizon_ms

    def _recover(self, commit_end: int | None) -> None:
        """The wheel brought back to the checkpoint (the log was cut at its end on opening).
        Links whose record the commit log lost are flagged (FLAG_LOST) and never delivered:
        another message may be written at that offset later."""
        rebuilt = self._rebuild_slots_past(self.log.end)
        lost = self._flag_lost_links(commit_end) if commit_end is not None else 0
        if rebuilt or lost:
            log.warning("timer: back to its last sync (read time %d, timer queue offset %d, log "
                        "end %d): %d slot(s) linked after it rebuilt, %d link(s) to records the "
                        "commit log lost dropped; timers linked after the sync are linked again "
                        "and those delivered after it may be delivered again", self.read_time_ms,
                        self.enqueue_offset, self.log.end, rebuilt, lost)

    def _rebuild_slots_past(self, end: int) -> int:
        """Ring positions whose slot points at or past `end` (linked after the checkpoint:
        every link points its slot at its new entry) rebuilt as the entries below it left them;
        returns how many. Replayed in log order by ring position, as linking wrote them: the
        slot may show a later lap's time at a position whose checkpointed slot still holds
        timers."""
        slots = self.wheel.slots
        precision = self.wheel.precision_ms
        stale = {s.time_ms // precision % slots for s in self.wheel.live_slots(0)
                 if s.last_pos >= end}
        if not stale:
            return 0
        rebuilt: dict[int, Slot] = {}
        for pos, link_ms in self.log.links_below(end):
            slot_ms = link_ms - link_ms % precision
            ring = slot_ms // precision % slots
            if ring not in stale:
                continue
            slot = rebuilt.get(ring)
            if slot is None or slot.time_ms != slot_ms:  # a new lap's chain starts here
                rebuilt[ring] = Slot(slot_ms, pos, pos, 1)
            else:
                rebuilt[ring] = Slot(slot_ms, slot.first_pos, pos, slot.num + 1)
        for ring in stale:
            slot = rebuilt.get(ring)
            if slot is not None:
                self.wheel.put(slot)
            else:
                self.wheel.clear_ring(ring)
        return len(stale)

    def _flag_lost_links(self, commit_end: int) -> int:
        """Flag the entries naming records past `commit_end`, newest first: entries are
        written in the order their records were stored, so the walk stops at the first whose
        record is still there (past a slave's cut, the deliver-time check of the service
        catches a stale link)."""
        flagged = 0
        pos = self.log.end - ENTRY.size
        while pos >= self.log.min_pos:
            entry = self.log.read(pos)
            if entry is None or entry.phys_offset + entry.size <= commit_end:
                break
            if not entry.lost:
                self.log.mark_lost(pos)
                flagged += 1
            pos -= ENTRY.size
        return flagged

    # --- linking -------------------------------------------------------------------------
    def link(self, deliver_ms: int, phys_offset: int, size: int, *, delete: bool = False) -> bool:
        """Link a timer due at `deliver_ms` (not before the read time); True when it is beyond
        the wheel's reach and was linked as a roll at the wheel's last slot instead. `delete`:
        the message is a delete marker (FLAG_DELETE)."""
        link_ms = max(deliver_ms, self.read_time_ms)
        roll = deliver_ms >= self.read_time_ms + self.horizon_ms
        if roll:
            link_ms = self.read_time_ms + self.horizon_ms - self.precision_ms
        slot = self.wheel.get(link_ms)
        has = slot.num > 0
        pos = self.log.append(slot.last_pos if has else -1, deliver_ms, link_ms, phys_offset, size,
                              self.read_time_ms, roll, delete)
        self.wheel.put(Slot(slot.time_ms, slot.first_pos if has else pos, pos, slot.num + 1, 0))
        return roll

    def slot_entries(self, slot_ms: int) -> list[LogEntry]:
        """The entries of a slot in firing order (link time, then position); the order is the
        same every time, so `slot_done` counts a prefix of it."""
        slot = self.wheel.get(slot_ms)
        out: list[LogEntry] = []
        pos = slot.last_pos if slot.num > 0 else -1
        while pos >= 0 and len(out) < slot.num:
            entry = self.log.read(pos)
            if entry is None:
                log.error("timer slot %d: entry at %d is gone; %d timer(s) of it lost", slot_ms,
                          pos, slot.num - len(out))
                break
            out.append(entry)
            pos = entry.prev_pos
        out.sort(key=lambda e: (e.link_ms, e.pos))
        return out

    def slot_busy(self, slot_ms: int) -> bool:
        return self.wheel.get(slot_ms).num > 0

    def advance(self) -> None:
        self.read_time_ms += self.precision_ms
        self.slot_done = 0

    def jump(self, time_ms: int) -> None:
        self.read_time_ms = max(self.read_time_ms, self.wheel.slot_time(time_ms))
        self.slot_done = 0

    def pending(self) -> int:
        """Timers linked and not yet delivered, counted in the wheel file."""
        total = sum(s.num for s in self.wheel.live_slots(self.read_time_ms))
        return max(0, total - self.slot_done)

    # --- durability ----------------------------------------------------------------------
    def checkpoint(self) -> TimerCheckpoint:
        return TimerCheckpoint(self.precision_ms, self.wheel.slots, self.read_time_ms,
                               self.slot_done, self.enqueue_offset, self.log.end)

    def sync(self) -> None:
        """Everything written so far to disk, then the checkpoint saying so (may run in a
        worker thread while the store is not changed): the files, their names (the wheel's,
        the log's directory and the checkpoint's, made by this store), then the checkpoint.
        Without the names a power loss could keep the checkpoint (its directory, config/, is
        fsynced by others: every offset snapshot) and take the wheel or a log segment: the
        timers it names were lost, their queue offsets passed."""
        with self._sync_lock:
            self._sync()

    def _sync(self) -> None:
        cp = self.checkpoint()
        self.log.flush()
        self.wheel.flush()
        if not self._names_synced:
            for d in (log_dir(self.cfg.root), checkpoint_path(self.cfg.root).parent,
                      self.cfg.root):
                fsync_dir(d)
            self._names_synced = True
        self._cp.store(cp)

    def drop_expired(self) -> int:
        return self.log.drop_expired(self.read_time_ms, self.horizon_ms)

    def close(self) -> None:
        with self._sync_lock:
            try:
                self._sync()  # the names too: a stop after a new segment left it unnamed on disk
            finally:
                self.log.close()
                self.wheel.close()
                self._cp.close()
