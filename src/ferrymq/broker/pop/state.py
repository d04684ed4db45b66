"""Pop state of one (group, topic, queue): which offsets are invisible, until when, and which
are acknowledged. No I/O and no clock of its own: every call takes `now` in milliseconds.

- `committed`: every offset below it is acknowledged (the group's consumer offset);
- `acked`: sorted, disjoint [start, end) ranges above `committed` also acknowledged (the
  offset manager keeps them as QueueProgress.acked, so both survive a restart through the
  offset journal);
- `pos`: the next offset never handed out since this state was built; every offset in
  [committed, pos) is either acknowledged or leased;
- `leases`: offsets handed out and not acknowledged, each with its deadline. A lease past its
  deadline is handed out again (its `attempts` counting deliveries); at most `max_inflight`
  leases exist, so memory follows the messages in flight, not the backlog, and so does the
  number of acked ranges (each gap between them is a lease).

After a restart `pos` starts at `committed` and the leases checkpointed in the revive log
(revive.py) are restored: the walk from `pos` passes over them, so a message handed out and
not acknowledged stays invisible until its deadline; acknowledged offsets are skipped."""

from __future__ import annotations

import bisect
from dataclasses import dataclass
from enum import Enum


@dataclass(slots=True)
class Lease:
    offset: int
    pop_time: int
    deadline: int
    attempts: int  # deliveries so far, this one included
    ck: int = -1  # revive-log offset of its latest checkpoint (-1: none written yet)


class AckOutcome(Enum):
    ACKED = "ACKED"  # newly acknowledged
    ALREADY = "ALREADY"  # acknowledged before: nothing changed


class ChangeOutcome(Enum):
    CHANGED = "CHANGED"
    NOT_IN_FLIGHT = "NOT_IN_FLIGHT"  # acknowledged, or never handed out since the last start
    STALE = "STALE"  # handed out again since that receipt handle was issued


@dataclass(frozen=True, slots=True)
class Candidate:
    offset: int
    attempts: int  # deliveries before this one (0: never delivered since the last start)


class QueuePop:
    def __init__(self, committed: int, acked: list[tuple[int, int]] | None = None,
                 max_inflight: int = 1024) -> None:
        if max_inflight < 1:
            raise ValueError("max_inflight must be >= 1")
        self.committed = committed
        self.acked: list[tuple[int, int]] = [(a, b) for a, b in (acked or []) if b > committed]
        self.pos = committed
        self.leases: dict[int, Lease] = {}
        self.max_inflight = max_inflight
        self._settle()

    # --- queries ---------------------------------------------------------------------------------
    def is_acked(self, offset: int) -> bool:
        if offset < self.committed:
            return True
        i = bisect.bisect_right(self.acked, (offset, float("inf"))) - 1
        return i >= 0 and self.acked[i][0] <= offset < self.acked[i][1]

    def locked(self, now: int) -> bool:
        """An orderly pop waits while any message of the queue is invisible."""
        return any(lease.deadline > now for lease in self.leases.values())

    def next_deadline(self) -> int | None:
        return min((lease.deadline for lease in self.leases.values()), default=None)

    def backlog(self, max_offset: int) -> int:
        """Messages never handed out yet (acknowledged ones above `pos` counted too)."""
        return max(0, max_offset - self.pos)

    def candidates(self, now: int, n: int, max_offset: int, *, order: bool) -> list[Candidate]:
        """Offsets to hand out next, lowest first: expired leases, then offsets never handed
        out (acknowledged ones skipped), as long as leases stay within max_inflight. The
        caller hands them out (lease), acknowledges those it filters out, in this order, and
        may stop early."""
        if n <= 0 or (order and self.locked(now)):
            return []
        out = [Candidate(o, self.leases[o].attempts) for o in
               sorted(o for o, lease in self.leases.items() if lease.deadline <= now)][:n]
        room = min(n - len(out), self.max_inflight - len(self.leases))
        offset = self.pos
        i = bisect.bisect_right(self.acked, (offset, float("inf"))) - 1
        i = max(i, 0)
        while room > 0 and offset < max_offset:
            while i < len(self.acked) and self.acked[i][1] <= offset:
                i += 1
            if i < len(self.acked) and self.acked[i][0] <= offset:
                offset = self.acked[i][1]
                continue
            if offset in self.leases:  # restored after a restart, above `pos`
                offset += 1
                continue
            out.append(Candidate(offset, 0))
            offset += 1
            room -= 1
        return out

    # --- changes ---------------------------------------------------------------------------------
    def lease(self, offset: int, now: int, invisible_ms: int) -> Lease:
        """Hand `offset` out (again) until now + invisible_ms."""
        lease = self.leases.get(offset)
        if lease is None:
            lease = self.leases[offset] = Lease(offset, now, now + invisible_ms, 1)
            # Only a new offset moves `pos`: a restored lease handed out again may lie above
            # offsets never handed out yet.
            self.pos = max(self.pos, offset + 1)
        else:
            lease.pop_time, lease.deadline = now, now + invisible_ms
            lease.attempts += 1
        return lease

    def restore(self, lease: Lease) -> bool:
        """A lease checkpointed before a restart, unless acknowledged since; `pos` stays."""
        if self.is_acked(lease.offset):
            return False
        self.leases[lease.offset] = lease
        return True

    def hold(self, offset: int, until: int) -> None:
        """Keep a lease invisible without counting a delivery (a dead-letter copy being
        written)."""
        lease = self.leases.get(offset)
        if lease is not None:
            lease.deadline = until

    def ack(self, offset: int) -> AckOutcome:
        self.leases.pop(offset, None)
        if self.is_acked(offset):
            return AckOutcome.ALREADY
        i = bisect.bisect_left(self.acked, (offset, offset + 1))
        self.acked.insert(i, (offset, offset + 1))
        self._merge_around(i)
        self._settle()
        return AckOutcome.ACKED

    def skip_below(self, offset: int) -> bool:
        """Offsets below `offset` are gone from the store: acknowledged. True if that changed
        anything."""
        if offset <= self.committed:
            return False
        for o in [o for o in self.leases if o < offset]:
            del self.leases[o]
        self.acked = [(max(a, offset), b) for a, b in self.acked if b > offset]
        self.committed = offset
        self._settle()
        return True

    def change(self, offset: int, pop_time: int, now: int, invisible_ms: int) -> ChangeOutcome:
        lease = self.leases.get(offset)
        if lease is None:
            return ChangeOutcome.NOT_IN_FLIGHT
        if lease.pop_time != pop_time:
            return ChangeOutcome.STALE
        lease.pop_time, lease.deadline = now, now + invisible_ms
        return ChangeOutcome.CHANGED

    def _merge_around(self, i: int) -> None:
        a, b = self.acked[i]
        if i + 1 < len(self.acked) and self.acked[i + 1][0] <= b:
            b = max(b, self.acked.pop(i + 1)[1])
        if i > 0 and self.acked[i - 1][1] >= a:
            a = self.acked[i - 1][0]
            b = max(b, self.acked[i - 1][1])
            self.acked.pop(i - 1)
            i -= 1
        self.acked[i] = (a, b)

    def _settle(self) -> None:
        """Move `committed` over acknowledged ranges that start at it."""
        while self.acked and self.acked[0][0] <= self.committed:
            self.committed = max(self.committed, self.acked.pop(0)[1])
        self.pos = max(self.pos, self.committed)
