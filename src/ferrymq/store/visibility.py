"""Which stored messages readers may see.

In controller mode a message that not every replica the controller may elect has can still be
cut: if this master is replaced, its successor's log does not have it and this broker
truncates it when it rejoins (a SYNC_MASTER has not answered its send yet; an ASYNC_MASTER
has). A consumer that had read it would hold a queue offset the new master gives to the next
message sent there, and would pull past that message: an acknowledged message never
delivered. So, as RocketMQ dispatches its consume queues only up to the confirm offset
(`readUnCommitted` false), entries whose record ends past the confirmed commit-log offset are
held back from every read (pulls, pops, max offsets, the broker's own scans) until the
replicas have them.

The gate costs nothing when it is open (`confirm is None`: a standalone broker, static roles,
`read_uncommitted`, a master waiting for no replica). While it is closed each append records
one (commit-log end, queue end) pair per queue it touched, and an advance walks only the
queues holding such pairs."""

from __future__ import annotations

from collections import deque

from .consumequeue import ConsumeQueue


class Visibility:
    """Kept under the store's lock."""

    __slots__ = ("_pending", "confirm")

    def __init__(self) -> None:
        # Commit-log offset below which records are readable; None: every record is.
        self.confirm: int | None = None
        self._pending: dict[ConsumeQueue, deque[tuple[int, int]]] = {}

    def appended(self, cq: ConsumeQueue, before: int, end: int) -> bool:
        """`cq` grew from `before` to its max_offset by records ending at commit-log offset
        `end`. True when readers may see them at once."""
        confirm = self.confirm
        if confirm is None:
            return True
        q = self._pending.get(cq)
        if q is None:
            if end <= confirm:
                return True
            q = self._pending[cq] = deque()
            cq.limit = before
        q.append((end, cq.max_offset))
        return False

    def advance(self, confirm: int | None) -> list[ConsumeQueue]:
        """Records up to `confirm` are on every replica waited for (None: readers may see
        everything from now on). The confirm offset only grows while the gate is closed, so
        nothing a reader saw is hidden again. Returns the queues whose readable end moved."""
        if confirm is None:
            grown = list(self._pending)
            for cq in grown:
                cq.limit = None
            self._pending.clear()
            self.confirm = None
            return grown
        if self.confirm is not None and confirm <= self.confirm:
            return []
        self.confirm = confirm
        grown = []
        for cq, q in list(self._pending.items()):
            if q[0][0] > confirm:
                continue
            limit = cq.max_offset
            while q and q[0][0] <= confirm:
                limit = q.popleft()[1]
            if q:
                cq.limit = limit
            else:
                cq.limit = None
                del self._pending[cq]
            grown.append(cq)
        return grown

    def forget(self, cq: ConsumeQueue) -> None:
        """The queue was deleted."""
        self._pending.pop(cq, None)
        cq.limit = None
