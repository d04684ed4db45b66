"""The timer service (RocketMQ 5's TimerMessageStore enqueue / dequeue), on a master only.

One task does both jobs, so the wheel never changes under a slot being delivered:
- dequeue: when the clock reaches the read time, the slot there is read from the log, sorted by
  time, and each timer is written to its real topic at its own time (a roll goes back into the
  timer topic instead); the read time moves on when the slot is done.
- enqueue: new entries of the timer topic's queue are linked into the wheel (or delivered at
  once when already due).
Every flush interval (and at a stop) the store syncs its files and then its checkpoint: the
read time, how much of the slot is delivered, the next queue offset and the log's end. A
clean restart repeats nothing; after a kill or a power loss the store goes back to its last
sync, so the deliveries made since are made again (at least once, up to one flush
interval)."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from ...common import props as P
from ...common.message import MessageExt
from ...common.names import TIMER_TOPIC
from ...common.record import MessageDecodeError, decode_record
from ...store import MessageStore, PutResult, StoreMessage
from .codec import LogEntry
from .message import TIMER_QUEUE_ID, deliver_ms_of, from_timer, is_delete_marker, rolled, timer_key
from .state import TimerStore, TimerStoreConfig

if TYPE_CHECKING:
    from ..core import BrokerCore

log = logging.getLogger("ferrymq.broker.timer")

ENQUEUE_BATCH = 256
DELIVER_BATCH = 64
# Empty slots stepped over in one go before the loop gives others a turn.
MAX_EMPTY_STEPS = 4096
# How far ahead an idle wheel looks for its next busy slot (in slots).
LOOKAHEAD_SLOTS = 1024
# After a failed write the service waits this long before trying again.
RETRY_MS = 200
# How long a stop waits for the step under way before cancelling it.
STOP_GRACE_S = 5.0


class TimerService:
    def __init__(self, broker: BrokerCore, cfg: TimerStoreConfig, *, flush_interval_ms: int,
                 clock: Callable[[], int] | None = None) -> None:
        self.broker = broker
        self.cfg = cfg
        self.flush_interval_ms = flush_interval_ms
        self.now_ms = clock or broker.now_ms
        self.state: TimerStore | None = None
        self._task: asyncio.Task[None] | None = None
        self._wake = asyncio.Event()
        self._open: list[LogEntry] | None = None
        self._hold_until = 0
        self._sweep_end = 0
        self._last_flush = 0.0
        self._retry_at = 0
        self._stored_to = 0  # the commit log's end after the last delivery
        self.delivered = 0
        self.rolled = 0
        self.cancelled = 0  # timers dropped by a delete marker of their slot
        # The delete keys of the open slot's markers (read when it opens).
        self._deleted: frozenset[str] = frozenset()
        # Set on a slave: the master's (read time, enqueue offset) as last copied, or None
        # before the first copy. A follower delivers nothing; it links the timers its master
        # has linked and drops the slots its master has delivered, so that when it is promoted
        # it goes on from where its master was (at most one slot is delivered twice).
        self._follow: Callable[[], tuple[int, int] | None] | None = None
        # Set by stop: the loop ends after the step under way (a delivery waiting for its
        # flush is then counted as delivered before the files are closed).
        self._stopping = False

    @property
    def store(self) -> MessageStore:
        store = self.broker.store
        assert store is not None
        return store

    # --- lifecycle -------------------------------------------------------------------------
    def start(self) -> None:
        if self._task is not None:
            return
        store = self.store
        first = store.reads.get_min_offset(TIMER_TOPIC, TIMER_QUEUE_ID)
        self.state = TimerStore(self.cfg, self.now_ms(), first, store.max_phy_offset)
        self._last_flush = time.monotonic()  # the store synced on opening
        self._queue_start(self.state)
        self._open = None
        self._stopping = False
        self._task = asyncio.create_task(self._run(), name="ferrymq-timer")

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            # The step under way ends first: cancelled inside a delivery's wait for its flush
            # (or its replica), the delivery was stored but not counted, and a clean restart
            # delivered it again. A step stuck past the grace (a hung disk) is cancelled.
            self._stopping = True
            self._wake.set()
            await asyncio.wait({task}, timeout=STOP_GRACE_S)
            task.cancel()
            try:
                await task
            except asyncio.CancelledError:
                pass
            except Exception:  # the files are still closed below
                log.exception("timer task failed")
        state, self.state = self.state, None
        if state is not None:
            try:
                if not await self._deliveries_on_disk():
                    raise OSError("the commit log was not flushed past the deliveries")
                state.close()
            except OSError as exc:  # the broker's stop goes on (the next start recovers)
                log.error("timer files could not be closed cleanly: %s", exc)

    def poke(self) -> None:
        self._wake.set()

    def follow(self, leader: Callable[[], tuple[int, int] | None]) -> None:
        self._follow = leader
        self._open = None
        self._wake.set()

    def lead(self) -> None:
        self._follow = None
        self._wake.set()

    @property
    def following(self) -> bool:
        return self._follow is not None

    def caught_up(self, time_ms: int) -> bool:
        """Every timer linked and due at or before `time_ms` has been delivered."""
        state = self.state
        if state is None:
            return False
        if self._open is not None:
            done = state.slot_done
            return done < len(self._open) and self._open[done].link_ms > time_ms
        return state.read_time_ms > time_ms

    def pending(self) -> int:
        return self.state.pending() if self.state is not None else 0

    # --- the loop --------------------------------------------------------------------------
    async def _run(self) -> None:
        state = self.state
        assert state is not None
        while not self._stopping:
            # Cleared before the work, not after it: a poke (a new timer message) or a stop
            # arriving during the step or the sync then ends the wait below at once.
            self._wake.clear()
            try:
                progressed = await self._step(state)
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("timer step failed; retrying")
                self._retry_at = self.now_ms() + RETRY_MS
                progressed = False
            if self._stopping:
                return  # close syncs
            if time.monotonic() - self._last_flush >= self.flush_interval_ms / 1000:
                self._last_flush = time.monotonic()
                try:
                    if await self._deliveries_on_disk():
                        await asyncio.to_thread(state.sync)
                        state.drop_expired()
                except OSError as exc:  # the next flush interval tries again
                    log.error("timer files could not be synced: %s; retrying", exc)
            if progressed or self._stopping:
                await asyncio.sleep(0)
                continue
            delay = max(0, self._next_wake(state) - self.now_ms())
            delay = min(delay, self.flush_interval_ms)
            if delay > 0:
                try:
                    await asyncio.wait_for(self._wake.wait(), delay / 1000)
                except TimeoutError:
                    pass

    def _next_wake(self, state: TimerStore) -> int:
        now = self.now_ms()
        if self._follow is not None:
            return now + self.flush_interval_ms
        if self._retry_at > now:
            return self._retry_at
        if self._open is not None:
            due = self._open[state.slot_done].link_ms if state.slot_done < len(self._open) else now
        else:
            until = state.read_time_ms + LOOKAHEAD_SLOTS * state.precision_ms
            busy = state.wheel.next_busy(state.read_time_ms, until)
            due = busy if busy is not None else until
        if self._hold_until > now:
            # Past it, the held timer waits for the open slot to finish (its next entry's
            # time, above): woken now, the loop only held it again, a busy loop on the
            # event loop's thread until then.
            due = min(due, self._hold_until)
        return due

    async def _step(self, state: TimerStore) -> bool:
        if self._follow is not None:
            return self._step_following(state, self._follow())
        now = self.now_ms()
        if now < self._retry_at:
            return False
        if self._open is not None:
            if await self._deliver_open(state, now):
                return True
        elif now >= state.read_time_ms and self._open_or_skip(state, now):
            return True
        if self._sweep_end:
            return False
        return await self._enqueue(state, now)

    def _open_or_skip(self, state: TimerStore, now: int) -> bool:
        """Open the slot at the read time, or step over empty ones; True if anything moved."""
        if not self._sweep_end and now - state.read_time_ms >= state.horizon_ms:
            # Far behind (the broker was down): every timer lies within one horizon of the
            # read time, so after one sweep of the ring the read time can jump to now.
            self._sweep_end = state.read_time_ms + state.horizon_ms
        moved = False
        for _ in range(MAX_EMPTY_STEPS):
            if self._sweep_end and state.read_time_ms >= self._sweep_end:
                self._sweep_end = 0
                state.jump(now)
                moved = True
            if now < state.read_time_ms:
                break
            if state.slot_busy(state.read_time_ms):
                entries = state.slot_entries(state.read_time_ms)
                if state.slot_done >= len(entries):
                    state.advance()
                    moved = True
                    continue
                self._open = entries
                self._deleted = self._delete_keys(entries)
                return True
            state.advance()
            moved = True
        return moved

    async def _deliver_open(self, state: TimerStore, now: int) -> bool:
        entries = self._open
        assert entries is not None
        start = state.slot_done
        end = start
        while end < len(entries) and end - start < DELIVER_BATCH and entries[end].link_ms <= now:
            end += 1
        if end > start:
            if not await self._deliver(entries[start:end]):
                return False
            state.slot_done = end
        if state.slot_done >= len(entries):
            self._open = None
            state.advance()
        return end > start or self._open is None

    def _queue_start(self, state: TimerStore) -> int:
        """The timer queue offset to link from: the checkpoint's, within the queue. Below its
        start, retention removed entries. Past its end, the queue lost entries the timer had
        linked (a power loss took the commit log's tail, or a slave's log was cut to its new
        master's): the next messages take those offsets again and must be linked."""
        store = self.store
        offset = max(state.enqueue_offset, store.reads.get_min_offset(TIMER_TOPIC, TIMER_QUEUE_ID))
        end = store.reads.get_max_offset(TIMER_TOPIC, TIMER_QUEUE_ID)
        if offset > end:
            log.warning("timer queue ends at %d, below the %d the timer had linked: its "
                        "entries from %d were lost with the commit log's tail; linking from there",
                        end, offset, end)
            offset = end
        state.enqueue_offset = offset
        return offset

    async def _enqueue(self, state: TimerStore, now: int) -> bool:
        store = self.store
        self._hold_until = 0
        offset = self._queue_start(state)
        entries = store.reads.read_queue_entries(TIMER_TOPIC, TIMER_QUEUE_ID, offset, ENQUEUE_BATCH)
        if not entries:
            return False
        done = 0
        # A link names the record read, not the entry: an entry found wrong is rebuilt from the
        # log by the read, and the record returned is the one the queue holds (its position is
        # checked against its PHYSICALOFFSET).
        for qe in entries:
            raw = store.reads.read_queue_record(TIMER_TOPIC, TIMER_QUEUE_ID, qe)
            msg = _decode(raw, qe.phys_offset)
            if msg is not None:
                deliver = deliver_ms_of(msg.properties)
                if deliver < state.read_time_ms:
                    # Due already; a delete marker this late finds its slot delivered.
                    if not is_delete_marker(msg.properties) and not await self._put([_restored(msg, roll=False)]):
                        break
                elif self._open is not None and deliver < state.read_time_ms + state.precision_ms:
                    # The slot being delivered is read already: this one waits its turn here.
                    self._hold_until = deliver
                    break
                elif state.link(deliver, msg.commit_log_offset, msg.store_size,
                                delete=is_delete_marker(msg.properties)):
                    self.rolled += 1
            state.enqueue_offset = qe.queue_offset + 1
            done += 1
        return done > 0 and not self._hold_until

    def _step_following(self, state: TimerStore, leader: tuple[int, int] | None) -> bool:
        if leader is None:
            return False
        read_to, enqueue_to = leader
        if read_to > state.read_time_ms:
            state.jump(read_to)  # the slots between were delivered by the master
        store = self.store
        offset = self._queue_start(state)
        n = min(ENQUEUE_BATCH, enqueue_to - offset)
        entries = store.reads.read_queue_entries(TIMER_TOPIC, TIMER_QUEUE_ID, offset, n) if n > 0 else []
        for qe in entries:
            msg = _decode(store.reads.read_queue_record(TIMER_TOPIC, TIMER_QUEUE_ID, qe), qe.phys_offset)
            if msg is not None:
                deliver = deliver_ms_of(msg.properties)
                # Already due when the master linked it: the master delivered it then.
                if deliver >= state.read_time_ms and state.link(
                        deliver, msg.commit_log_offset, msg.store_size,
                        delete=is_delete_marker(msg.properties)):
                    self.rolled += 1
            state.enqueue_offset = qe.queue_offset + 1
        return bool(entries)

    def _delete_keys(self, entries: list[LogEntry]) -> frozenset[str]:
        """What the slot's delete markers cancel (markers linked as rolls cancel nothing yet)."""
        keys: set[str] = set()
        for e in entries:
            if e.delete and not e.roll and not e.lost:
                msg = _decode(self.store.reads.read_sound_record(e.phys_offset, e.size), e.phys_offset)
                if msg is not None:
                    keys.add(msg.properties.get(P.PROPERTY_TIMER_DEL_UNIQKEY, ""))
        return frozenset(keys)

    async def _deliver(self, entries: list[LogEntry]) -> bool:
        out: list[StoreMessage] = []
        for e in entries:
            if e.delete and not e.roll:
                continue  # a delete marker is never delivered
            if e.lost:
                log.error("timer message at %d (due %d) was lost with the commit log's tail; "
                          "its link is dropped", e.phys_offset, e.deliver_ms)
                continue
            # Stored again under a new CRC: damage at rest must stop here.
            msg = _decode(self.store.reads.read_sound_record(e.phys_offset, e.size), e.phys_offset)
            if msg is not None and (msg.topic != TIMER_TOPIC
                                    or deliver_ms_of(msg.properties) != e.deliver_ms):
                # Not the timer message linked there (its log was cut under the link): the
                # message now at that offset is delivered by its own link, at its own time.
                log.error("the record at %d is not the timer message linked there (due %d); "
                          "the link is dropped", e.phys_offset, e.deliver_ms)
                continue
            if msg is not None and not e.roll and self._deleted and timer_key(msg.properties) in self._deleted:
                self.cancelled += 1
                continue
            if msg is not None:
                restored = _restored(msg, roll=e.roll)
                if restored is not None:
                    out.append(restored)
        return await self._put(out)

    async def _deliveries_on_disk(self) -> bool:
        """Wait until the commit log holds every delivery made so far on disk. A checkpoint
        counts deliveries as done: written before their copies were flushed (ASYNC_FLUSH), a
        power loss kept the count and lost the copies, and those timers were never delivered."""
        store = self.broker.store
        if store is None or store.flushed_offset >= self._stored_to:
            return True
        return await asyncio.to_thread(store.wait_flushed, self._stored_to,
                                       self.flush_interval_ms / 1000)

    async def _put(self, msgs: Sequence[StoreMessage | None]) -> bool:
        batch = [m for m in msgs if m is not None]
        if not batch:
            return True
        result: PutResult = await self.broker.put(batch, allow_delay=False)
        if not result.status.stored:
            log.warning("timer delivery of %d message(s) failed (%s); will retry", len(batch),
                        result.status.name)
            self._retry_at = self.now_ms() + RETRY_MS
            return False
        self.delivered += len(batch)
        self._stored_to = max(self._stored_to, result.end_offset)
        return True


def _decode(raw: bytes | None, phys_offset: int) -> MessageExt | None:
    if raw is None:
        log.error("timer message at %d is no longer in the commit log; skipped", phys_offset)
        return None
    try:
        return decode_record(raw, decompress=False)
    except MessageDecodeError as exc:
        log.error("timer message at %d is unreadable (%s); skipped", phys_offset, exc)
        return None


def _restored(msg: MessageExt, *, roll: bool) -> StoreMessage | None:
    if roll:
        return rolled(msg)
    out = from_timer(msg)
    if out is None:
        log.error("timer message %s has no REAL_TOPIC; skipped", msg.offset_msg_id)
    return out
