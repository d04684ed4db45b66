"""The timer store: wheel, log and checkpoint together, driven with explicit times (the
service supplies the clock). Timers live only in the files: linking one appends a log entry
whose `prev` is the slot's last entry and points the slot at it, RocketMQ's TimerLog /
TimerWheel layout.

Recovery: the checkpoint names the log's end when it was written; entries written after it
(by a process killed before its next checkpoint) are unlinked from their slots and cleared,
and the timer queue is enqueued again from the checkpoint's offset, so nothing is linked
twice. That holds while the page cache held every write: after a power loss (the checkpoint
was written in an earlier boot) the checkpoint may have reached the disk while the log and
wheel pages it describes did not, so the store goes back to what the last sync made durable
(links made since are made again from the timer queue, deliveries since may repeat)."""

from __future__ import annotations

import logging
import shutil
import threading
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

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


def current_boot_id() -> bytes:
    """This boot's id (Linux: /proc/sys/kernel/random/boot_id), b"" where there is none. A
    checkpoint written in another boot may describe pages that a power loss did not keep."""
    try:
        text = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
        return uuid.UUID(text).bytes
    except (OSError, ValueError):
        return b""


class _Synced(NamedTuple):
    """The store as the last sync left it on disk: what a power loss cannot take."""

    log_end: int
    enqueue_offset: int
    read_time_ms: int
    slot_done: int


class TimerStore:
    def __init__(self, cfg: TimerStoreConfig, now_ms: int, first_enqueue_offset: int = 0,
                 commit_end: int | None = None) -> None:
        """`commit_end`: where the commit log ends now (its records past it are gone), to
        find the links a power loss left without their record."""
        self.cfg = cfg
        self._boot_id = current_boot_id()
        self._names_synced = False  # the files' names, made or found here, not fsynced yet
        # Held by sync (a worker thread) and close: a stop that cancelled the timer's task
        # while its sync ran must not close the files under it (the sync's checkpoint write
        # could then land in whatever file reused the descriptor).
        self._sync_lock = threading.Lock()
        self._cp = CheckpointFile(checkpoint_path(cfg.root))
        cp = self._cp.load()
        if cp is None:
            # Files without a checkpoint were never consistent with one: start empty.
            wheel_path(cfg.root).unlink(missing_ok=True)
            shutil.rmtree(log_dir(cfg.root), ignore_errors=True)
            precision, slots = cfg.precision_ms, cfg.slots
        else:
            precision, slots = cp.precision_ms, cp.slots
            if (precision, slots) != (cfg.precision_ms, cfg.slots):
                log.warning("timer wheel keeps its geometry (%d ms x %d slots) over the configured "
                            "%d ms x %d slots: its files hold pending timers", precision, slots,
                            cfg.precision_ms, cfg.slots)
        self.wheel = TimerWheel(wheel_path(cfg.root), slots, precision)
        self.log = TimerLog(log_dir(cfg.root), cfg.log_file_size)
        if cp is None:
            self.read_time_ms = self.wheel.slot_time(now_ms)
            self.slot_done = 0
            self.enqueue_offset = first_enqueue_offset
            self.log.truncate(0)
            self._synced = _Synced(0, first_enqueue_offset, self.read_time_ms, 0)
        elif cp.boot_id and cp.boot_id != self._boot_id:
            # Written in another boot: the machine restarted, cleanly or not.
            self._recover_power_loss(cp, commit_end)
        else:
            self.read_time_ms = cp.read_time_ms
            self.slot_done = cp.slot_done
            self.enqueue_offset = cp.enqueue_offset
            self._recover(cp.log_end)
            # Not synced by this start: what the checkpoint says was synced stays the floor.
            self._synced = _Synced(cp.synced_log_end, cp.synced_enqueue_offset,
                                   cp.synced_read_time_ms, cp.synced_slot_done)
        self.save()

    @property
    def precision_ms(self) -> int:
        return self.wheel.precision_ms

    @property
    def horizon_ms(self) -> int:
        return self.wheel.horizon_ms

    def _recover(self, log_end: int) -> None:
        tail = list(self.log.written_after(log_end))
        for entry in reversed(tail):
            slot = self.wheel.get(entry.link_ms)
            if slot.num > 0 and slot.last_pos == entry.pos:
                if entry.prev_pos < 0 or slot.num == 1:
                    self.wheel.clear(slot.time_ms)
                else:
                    self.wheel.put(slot._replace(last_pos=entry.prev_pos, num=slot.num - 1))
        if tail:
            log.warning("timer log: %d entries written after the last checkpoint are linked "
                        "again from the timer queue", len(tail))
        self.log.truncate(log_end)

    def _recover_power_loss(self, cp: TimerCheckpoint, commit_end: int | None) -> None:
        """Back to the last sync, whatever the kernel wrote back since (after a clean stop
        that is where the store stood): log entries written after it are cleared, slots that
        point at any of them are rebuilt from the log below it, and the read time, the slot's
        delivered count and the timer-queue offset are the sync's, so timers linked since are
        linked again and those delivered since may be delivered again (at least once). Links
        whose record the commit log lost are flagged (FLAG_LOST) and never delivered: another
        message may be written at that offset later."""
        synced = _Synced(cp.synced_log_end, cp.synced_enqueue_offset, cp.synced_read_time_ms,
                         cp.synced_slot_done)
        self.read_time_ms, self.slot_done = synced.read_time_ms, synced.slot_done
        self.enqueue_offset = synced.enqueue_offset
        self._synced = synced
        end = synced.log_end
        rebuilt = self._rebuild_slots_past(end)
        self.log.truncate(end, written_to=max(cp.log_end, end))
        lost = self._flag_lost_links(commit_end) if commit_end is not None else 0
        if (cp.log_end, cp.enqueue_offset, cp.read_time_ms, cp.slot_done) != synced or rebuilt \
                or lost:
            log.warning("timer: started after a restart of the machine, back to the last sync: "
                        "log end %d (the checkpoint had %d), timer queue offset %d (had %d), "
                        "read time %d (had %d); %d slot(s) rebuilt, %d link(s) to records the "
                        "commit log lost dropped; timers delivered after the sync may be "
                        "delivered again", end, cp.log_end, synced.enqueue_offset,
                        cp.enqueue_offset, synced.read_time_ms, cp.read_time_ms, rebuilt, lost)

    def _rebuild_slots_past(self, end: int) -> int:
        """Ring positions pointing at log positions at or past `end` (written back without
        their entries, or with entries being cleared) rebuilt as the entries below it left
        them; returns how many. Replayed in log order by ring position, as linking wrote them:
        the page may show a later lap's time at a position whose synced slot still holds
        timers (the chain's own links and the slot's time may both be lost)."""
        slots = self.wheel.slots
        precision = self.wheel.precision_ms
        stale = {s.time_ms // precision % slots for s in self.wheel.live_slots(0)
                 if s.last_pos >= end or s.first_pos >= end}
        if not stale:
            return 0
        rebuilt: dict[int, Slot] = {}
        for pos in range(self.log.min_pos, end, ENTRY.size):
            entry = self.log.read(pos)
            if entry is None:
                continue
            slot_ms = entry.link_ms - entry.link_ms % precision
            ring = slot_ms // precision % slots
            if ring not in stale:
                continue
            slot = rebuilt.get(ring)
            if slot is None or slot.time_ms != slot_ms:  # a new lap's chain starts here
                rebuilt[ring] = Slot(slot_ms, entry.pos, entry.pos, 1)
            else:
                rebuilt[ring] = Slot(slot_ms, slot.first_pos, entry.pos, slot.num + 1)
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
    def link(self, deliver_ms: int, phys_offset: int, size: int) -> bool:
        """Link a timer due at `deliver_ms` (not before the read time); True when it is beyond
        the wheel's reach and was linked as a roll at the wheel's last slot instead."""
        link_ms = max(deliver_ms, self.read_time_ms)
        roll = deliver_ms >= self.read_time_ms + self.horizon_ms
        if roll:
            link_ms = self.read_time_ms + self.horizon_ms - self.precision_ms
        slot = self.wheel.get(link_ms)
        has = slot.num > 0
        pos = self.log.append(slot.last_pos if has else -1, deliver_ms, link_ms, phys_offset, size,
                              self.read_time_ms, roll)
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
        synced = self._synced
        return TimerCheckpoint(self.precision_ms, self.wheel.slots, self.read_time_ms,
                               self.slot_done, self.enqueue_offset, self.log.end,
                               synced_log_end=synced.log_end,
                               synced_enqueue_offset=synced.enqueue_offset,
                               synced_read_time_ms=synced.read_time_ms,
                               synced_slot_done=synced.slot_done, boot_id=self._boot_id)

    def save(self) -> None:
        self._cp.write(self.checkpoint())

    def sync(self) -> None:
        """Everything written so far to disk (may run in a worker thread): the files, their
        names (the wheel's, the log's directory and the checkpoint's, made by this store),
        then the checkpoint. Without the names a power loss could keep the checkpoint (its
        directory, config/, is fsynced by others: every offset snapshot) and take the wheel
        or a log segment: the timers it names were lost, their queue offsets passed. The
        checkpoint written last then says what this sync made durable, which is where the
        store goes back to if a power loss keeps a later checkpoint but not its pages."""
        with self._sync_lock:
            self._sync()

    def _sync(self) -> None:
        durable = _Synced(self.log.end, self.enqueue_offset, self.read_time_ms, self.slot_done)
        self.log.flush()
        self.wheel.flush()
        if not self._names_synced:
            for d in (log_dir(self.cfg.root), checkpoint_path(self.cfg.root).parent,
                      self.cfg.root):
                fsync_dir(d)
            self._names_synced = True
        self._synced = durable
        self.save()
        self._cp.sync()

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
