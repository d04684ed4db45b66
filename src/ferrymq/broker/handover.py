"""Queue hand-over between members of a consumer group: release before take.

When a member joins, the queues it is given were being consumed by another member a moment
ago. The new owner asks the broker where to start (QUERY_CONSUMER_OFFSET) as soon as its own
rebalance runs, which is about when the old owner hears of the change: the old owner's last
progress (what it consumed since its last commit) is usually not committed yet, so the new
owner reads it all again. RocketMQ has the same race; it costs a pull's worth of duplicates
per queue moved.

Here the broker keeps, per (group, topic, queue), the connection that pulled it last (its
owner). A member asking for a queue's offset while another live member still owns it waits
until that owner releases the queue (its last commit, marked as a release), leaves the group,
or `handover_wait_ms` passes; then it is answered with the offset and acknowledged ranges the
old owner committed last. Kafka's eager rebalance gets the same from revoking before
assigning.

Only owners that announce releases are waited for: ferrymq's clients say so in their
heartbeat (`releasesQueues`). A client that does not (ali-ons, the Java and C++ clients) is
never waited for, so mixed groups hand over as they do on RocketMQ. Only askers that say how
long they may wait (`handoverWaitMs`, which ferrymq's clients add to their own timeout) are
held, so no client times out on an answer it did not expect to wait for (docs/protocol.md)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable

log = logging.getLogger("ferrymq.broker")

Key = tuple[str, str, int]  # group, topic, queue id


class Handover:
    def __init__(self, wait_ms: int, releases_queues: Callable[[str, object, object], bool]) -> None:
        """`releases_queues(group, conn, asker)`: whether `conn` is a live member of `group`
        whose client releases the queues it gives up, and another client than `asker`'s."""
        self.wait_s = wait_ms / 1000
        self._releases_queues = releases_queues
        self._owner: dict[Key, object] = {}
        # The keys each connection owns: a closing connection (producers' too) costs its own
        # keys, not a scan of every queue's owner.
        self._owned: dict[int, set[Key]] = {}
        self._waiting: dict[Key, set[asyncio.Event]] = {}
        # Figures for the runtime table and tests.
        self.waits = 0
        self.waited_out = 0

    @property
    def owned(self) -> int:
        """Queues with a known owner."""
        return len(self._owner)

    @property
    def waiting(self) -> int:
        return sum(len(events) for events in self._waiting.values())

    def pulled(self, group: str, topic: str, queue_id: int, conn: object) -> None:
        key = (group, topic, queue_id)
        previous = self._owner.get(key)
        if previous is not conn:
            if previous is not None:
                self._disown(previous, key)
            self._owner[key] = conn
            self._owned.setdefault(id(conn), set()).add(key)

    def _disown(self, conn: object, key: Key) -> None:
        keys = self._owned.get(id(conn))
        if keys is not None:
            keys.discard(key)
            if not keys:
                del self._owned[id(conn)]

    def released(self, group: str, topic: str, queue_id: int, conn: object) -> None:
        key = (group, topic, queue_id)
        if self._owner.get(key) is conn:
            del self._owner[key]
            self._disown(conn, key)
            for event in self._waiting.get(key, ()):
                event.set()

    def members_changed(self, group: str) -> None:
        """Someone joined or left: a waiter whose owner left need not wait any longer."""
        for key, events in self._waiting.items():
            if key[0] == group:
                for event in events:
                    event.set()

    def close(self) -> None:
        """The broker stops: nobody is held for a release any longer (answered with what is
        committed, instead of holding the stop until each wait ends)."""
        self.wait_s = 0.0
        self._owner.clear()
        self._owned.clear()
        for events in self._waiting.values():
            for event in events:
                event.set()

    def connection_closed(self, conn: object) -> None:
        for key in self._owned.pop(id(conn), ()):
            if self._owner.get(key) is conn:
                del self._owner[key]

    def _holder(self, key: Key, asker: object) -> object | None:
        owner = self._owner.get(key)
        if owner is None or owner is asker or not self._releases_queues(key[0], owner, asker):
            return None
        return owner

    async def wait_released(self, group: str, topic: str, queue_id: int, asker: object,
                            limit_s: float) -> None:
        """Returns once no other live member owns the queue, or after the wait limit (the
        broker's, or the asker's own `limit_s` if shorter)."""
        key = (group, topic, queue_id)
        wait_s = min(self.wait_s, limit_s)
        if wait_s <= 0 or self._holder(key, asker) is None:
            return
        event = asyncio.Event()
        self._waiting.setdefault(key, set()).add(event)
        self.waits += 1
        loop = asyncio.get_running_loop()
        deadline = loop.time() + wait_s
        try:
            while self._holder(key, asker) is not None:
                left = deadline - loop.time()
                if left <= 0:
                    self.waited_out += 1
                    log.info("%s: %s queue %d was not released by its owner within %d ms; "
                             "handed over anyway", group, topic, queue_id, int(wait_s * 1000))
                    return
                event.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(event.wait(), left)
        finally:
            events = self._waiting[key]
            events.discard(event)
            if not events:
                del self._waiting[key]
