"""ProcessQueue: one assigned queue's messages that were pulled but are not yet acknowledged,
ordered by queue offset (RocketMQ's ProcessQueue).

The offset to commit is always the smallest offset still held, or the highest offset ever
held plus one when nothing is (the seeds' removeMessage). Above that offset, `acked_ranges`
names what is already consumed, for brokers that keep precise acknowledgements.

Every method runs on the consumer's event loop; nothing here is shared with listener
threads, so there are no locks."""

from __future__ import annotations

import asyncio
import bisect
import itertools
import time
from collections.abc import Iterable

from ...common import props as P
from ...common.message import MessageExt, MessageQueue


class ProcessQueue:
    def __init__(
        self, mq: MessageQueue, *, max_count: int = 1000, max_bytes: int = 100 * 1024 * 1024
    ) -> None:
        self.mq = mq
        self.max_count = max_count
        self.max_bytes = max_bytes
        self._offsets: list[int] = []  # sorted offsets of held messages not taken for consuming
        self._msgs: dict[int, MessageExt] = {}  # every held message, taken or not
        self._taken: list[int] = []  # orderly: offsets handed to the listener, sorted
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
        return len(self._offsets) >= self.max_count or self.bytes >= self.max_bytes

    def _update_space(self) -> None:
        if self.over_limit():
            self.space.clear()
        else:
            self.space.set()

    def min_offset(self) -> int:
        return min(self._msgs) if self._msgs else -1

    def messages(self) -> list[MessageExt]:
        return [self._msgs[o] for o in sorted(self._msgs)]

    # --- pulling in --------------------------------------------------------------------------
    def put(self, msgs: Iterable[MessageExt]) -> list[MessageExt]:
        """Hold freshly pulled messages; returns the ones that were new (a pull repeated after
        a timeout may bring some again)."""
        added: list[MessageExt] = []
        for m in msgs:
            off = m.queue_offset
            if off in self._msgs or off <= self.queue_offset_max:
                continue
            self._msgs[off] = m
            self._offsets.append(off)  # pulls arrive in offset order
            self.bytes += len(m.body)
            self.queue_offset_max = off
            added.append(m)
        self._update_space()
        return added

    # --- acknowledging -----------------------------------------------------------------------
    def remove(self, msgs: Iterable[MessageExt]) -> int:
        """Drop consumed messages; the offset to commit, or -1 when nothing was held."""
        if not self._msgs:
            return -1
        for m in msgs:
            self._discard(m.queue_offset)
        self.last_consume_time = time.monotonic()
        self._update_space()
        return self.commit_offset()

    def commit_offset(self) -> int:
        heads = [seq[0] for seq in (self._offsets, self._taken) if seq]
        return min(heads) if heads else self.queue_offset_max + 1

    def _discard(self, off: int) -> None:
        m = self._msgs.pop(off, None)
        if m is None:
            return
        self.bytes -= len(m.body)
        for seq in (self._offsets, self._taken):
            i = bisect.bisect_left(seq, off)
            if i < len(seq) and seq[i] == off:
                del seq[i]
                return

    def acked_ranges(self) -> list[tuple[int, int]]:
        """[start, end) ranges above the commit offset that are already consumed: the gaps
        between held offsets, and the tail after the last held one up to what was pulled."""
        if not self._msgs:
            return []
        held = sorted(self._msgs)
        ranges: list[tuple[int, int]] = []
        for a, b in itertools.pairwise(held):
            if b > a + 1:
                ranges.append((a + 1, b))
        if self.queue_offset_max > held[-1]:
            ranges.append((held[-1] + 1, self.queue_offset_max + 1))
        return ranges

    def oldest_started(self, limit: int = 16) -> list[tuple[MessageExt, int]]:
        """The first held messages with the time (ms) their consumption started, if it has."""
        out: list[tuple[MessageExt, int]] = []
        for off in sorted(self._msgs)[:limit]:
            m = self._msgs[off]
            started = m.properties.get(P.PROPERTY_CONSUME_START_TIMESTAMP)
            if started and started.isdigit():
                out.append((m, int(started)))
        return out

    # --- orderly consumption -----------------------------------------------------------------
    def take(self, n: int) -> list[MessageExt]:
        """Hand the next n messages in offset order to the listener."""
        taken = self._offsets[:n]
        del self._offsets[:n]
        for off in taken:
            bisect.insort(self._taken, off)
        self.last_consume_time = time.monotonic()
        self._update_space()
        return [self._msgs[o] for o in taken]

    def commit(self) -> int:
        """The taken messages are done: forget them; returns the offset after them (-1: none)."""
        if not self._taken:
            return -1
        offset = self._taken[-1] + 1
        for off in list(self._taken):
            self._discard(off)
        self._update_space()
        return offset

    def reconsume(self, msgs: Iterable[MessageExt]) -> None:
        """Give taken messages back; they are consumed again, still in offset order."""
        for m in msgs:
            off = m.queue_offset
            i = bisect.bisect_left(self._taken, off)
            if i < len(self._taken) and self._taken[i] == off:
                del self._taken[i]
                bisect.insort(self._offsets, off)

    def has_pending(self) -> bool:
        return bool(self._offsets)

    def clear(self) -> None:
        self._offsets.clear()
        self._taken.clear()
        self._msgs.clear()
        self.bytes = 0
        self._update_space()
