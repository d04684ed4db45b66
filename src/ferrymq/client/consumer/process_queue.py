"""ProcessQueue: one assigned queue's messages that were pulled but are not yet acknowledged,
ordered by queue offset (RocketMQ's ProcessQueue).

The offset to commit is always the smallest offset still held, or the highest offset ever
held plus one when nothing is (the seeds' removeMessage). Above that offset, `acked_ranges`
names what is already consumed, for brokers that keep precise acknowledgements.

Acknowledging costs O(1) per message: held offsets sit in a deque in offset order (pulls
arrive in order), acknowledged ones leave the dict at once and the deque's head is trimmed
past them. The offsets above the head that are not held form runs kept up to date as they
change (two dicts, by start and by end), so reporting the ranges, which the consumer does
within a millisecond of every completion, costs the number of runs, not of held messages.

Every method runs on the consumer's event loop; listener threads only read `dropped`."""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Iterable

from ...common.message import MessageExt, MessageQueue

Ranges = list[tuple[int, int]]


class ProcessQueue:
    def __init__(
        self,
        mq: MessageQueue,
        *,
        max_count: int = 1000,
        max_bytes: int = 100 * 1024 * 1024,
        in_order: bool = False,
        acked_above: Iterable[tuple[int, int]] = (),
    ) -> None:
        self.mq = mq
        self.max_count = max_count
        self.max_bytes = max_bytes
        # in_order: the consumer takes messages one batch after another (orderly, lite pull)
        # instead of having all of them handed to it as they arrive (concurrent).
        self.in_order = in_order
        self._msgs: dict[int, MessageExt] = {}  # held and not acknowledged
        self._order: deque[int] = deque()  # held offsets in order; the head is never acked
        self._pending: deque[int] = deque()  # in_order: held offsets not yet taken
        self._taken: deque[int] = deque()  # in_order: offsets handed out, in order
        # Ranges the broker already had acknowledged when this queue was taken over: messages
        # in them are not consumed again (precise acknowledgement).
        self._skip: deque[tuple[int, int]] = deque(sorted(acked_above))
        # Maximal runs [start, end) of offsets above the head, up to queue_offset_max, that are
        # not held: consumed, or never held (filtered out, skipped as acknowledged already).
        self._run_end: dict[int, int] = {}  # start -> end
        self._run_start: dict[int, int] = {}  # end -> start
        self.bytes = 0
        self.queue_offset_max = -1
        self.dropped = False
        # Orderly consumption: the broker lock and whether a consume task owns the queue.
        self.locked = False
        self.last_lock_time = 0.0
        self.consuming = False
        self.last_pull_time = time.monotonic()
        self.last_consume_time = time.monotonic()
        self.space = asyncio.Event()  # set while below the flow-control thresholds
        self.space.set()

    # --- sizes -------------------------------------------------------------------------------
    @property
    def count(self) -> int:
        return len(self._msgs)

    @property
    def empty(self) -> bool:
        return not self._msgs

    def over_limit(self) -> bool:
        # Messages already handed out (orderly batch, lite pull poll) do not count: the
        # application holds them, and must be able to poll more before committing.
        held = len(self._pending) if self.in_order else len(self._msgs)
        return held >= self.max_count or self.bytes >= self.max_bytes

    def _update_space(self) -> None:
        if self.over_limit():
            self.space.clear()
        else:
            self.space.set()

    def min_offset(self) -> int:
        return self._order[0] if self._order else -1

    def messages(self) -> list[MessageExt]:
        msgs = self._msgs
        return [msgs[o] for o in self._order if o in msgs]

    # --- pulling in --------------------------------------------------------------------------
    def put(self, msgs: Iterable[MessageExt]) -> list[MessageExt]:
        """Hold freshly pulled messages; returns the ones to consume: not seen before (a pull
        repeated after a timeout may bring some again) and not already acknowledged."""
        added: list[MessageExt] = []
        held = self._msgs
        order = self._order
        skip = self._skip
        top = prev = self.queue_offset_max  # prev: the last offset held or accounted for
        size = 0
        for m in msgs:
            off = m.queue_offset
            if off <= top:
                continue
            top = off
            if skip and self._acked_before(off):
                continue
            if off > prev + 1 and prev >= 0:
                self._not_held(prev + 1, off)
            prev = off
            held[off] = m
            order.append(off)
            size += len(m.body)
            added.append(m)
        if top > prev >= 0:
            self._not_held(prev + 1, top + 1)
        self.queue_offset_max = top
        self._drop_run_below(self.commit_offset())
        self.bytes += size
        if self.in_order:
            self._pending.extend(m.queue_offset for m in added)
        self._update_space()
        return added

    def _acked_before(self, off: int) -> bool:
        skip = self._skip
        while skip and skip[0][1] <= off:
            skip.popleft()
        return bool(skip) and skip[0][0] <= off

    # --- acknowledging -----------------------------------------------------------------------
    def remove(self, msgs: Iterable[MessageExt]) -> int:
        """Drop consumed messages; the offset to commit, or -1 when nothing was held."""
        held = self._msgs
        if not held:
            return -1
        size = 0
        for m in msgs:
            off = m.queue_offset
            if held.pop(off, None) is not None:
                size += len(m.body)
                self._not_held(off, off + 1)
        self.bytes -= size
        self._trim()
        self.last_consume_time = time.monotonic()
        self._update_space()
        return self.commit_offset()

    def _trim(self) -> None:
        order, held = self._order, self._msgs
        while order and order[0] not in held:
            order.popleft()
        self._drop_run_below(self.commit_offset())

    def _not_held(self, start: int, end: int) -> None:
        """Offsets [start, end) are not held: one run with the runs next to them."""
        run_end, run_start = self._run_end, self._run_start
        left = run_start.pop(start, None)
        if left is not None:
            del run_end[left]
            start = left
        right = run_end.pop(end, None)
        if right is not None:
            del run_start[right]
            end = right
        run_end[start] = end
        run_start[end] = start

    def _drop_run_below(self, head: int) -> None:
        """The head moved: the offsets below it, all not held, are one run ending there."""
        start = self._run_start.pop(head, None)
        if start is not None:
            del self._run_end[start]

    def commit_offset(self) -> int:
        return self._order[0] if self._order else self.queue_offset_max + 1

    def acked_ranges(self) -> Ranges:
        """[start, end) ranges above the commit offset that are already consumed: the gaps
        between held offsets, the tail after the last held one up to what was pulled, and the
        acknowledged ranges taken over that were not reached yet."""
        # The runs start above the head (the commit offset while anything is held); only the
        # ranges taken over can reach down to the commit offset once nothing is held.
        ranges = sorted(self._run_end.items())
        floor = max(self.commit_offset(), self.queue_offset_max) + 1
        ranges += [(max(a, floor), b) for a, b in self._skip if b > floor]
        return ranges

    # --- in-order consumption ----------------------------------------------------------------
    def take(self, n: int) -> list[MessageExt]:
        """Hand the next n messages in offset order to the listener."""
        pending, taken, held = self._pending, self._taken, self._msgs
        out: list[MessageExt] = []
        while pending and len(out) < n:
            off = pending.popleft()
            taken.append(off)
            out.append(held[off])
        self.last_consume_time = time.monotonic()
        self._update_space()
        return out

    def commit(self) -> int:
        """The taken messages are done: forget them; returns the offset after them (-1: none)."""
        taken = self._taken
        if not taken:
            return -1
        offset = taken[-1] + 1
        held = self._msgs
        size = 0
        for off in taken:
            m = held.pop(off, None)
            if m is not None:
                size += len(m.body)
                self._not_held(off, off + 1)
        taken.clear()
        self.bytes -= size
        self._trim()
        self._update_space()
        return offset

    def reconsume(self, msgs: Iterable[MessageExt]) -> None:
        """Give taken messages back; they are consumed again, still in offset order."""
        back = {m.queue_offset for m in msgs}
        keep = [o for o in self._taken if o not in back]
        again = sorted(o for o in self._taken if o in back)
        self._taken = deque(keep)
        self._pending.extendleft(reversed(again))

    def has_pending(self) -> bool:
        return bool(self._pending)

    def clear(self) -> None:
        self._order.clear()
        self._pending.clear()
        self._taken.clear()
        self._msgs.clear()
        self._run_end.clear()
        self._run_start.clear()
        self.bytes = 0
        self._update_space()
