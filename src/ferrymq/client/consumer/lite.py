"""The lite pull consumer, async core: the application polls. Queues come from a rebalance
(subscribe) or are chosen by the application (assign); background pull loops fill each
queue's ProcessQueue and poll() hands messages out in offset order per queue. commit() (or
auto-commit at poll time) acknowledges everything polled so far. `LitePullConsumer`
(blocking) and `ferrymq.aio.LitePullConsumer` are this class."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterable
from typing import Any

from ...common.errors import FerryMQError
from ...common.message import MessageExt, MessageQueue
from ..errors import ClientStateError
from ..lifecycle import State
from ..loop import wait_event
from .base import ConsumerBase
from .options import ConsumerOptions
from .process_queue import ProcessQueue
from .subscription import MessageSelector, Subscription

log = logging.getLogger("ferrymq.client.lite")

# A paused queue looks again this often whether it was resumed.
PAUSE_RECHECK = 0.05


class AsyncLitePullConsumer(ConsumerBase):
    kind = "LitePullConsumer"
    consume_type = "CONSUME_ACTIVELY"

    def __init__(
        self,
        group: str,
        namesrv: str = "127.0.0.1:9876",
        *,
        auto_commit: bool = True,
        auto_commit_interval: float = 5.0,
        **options: Any,
    ) -> None:
        options.setdefault("persist_interval", auto_commit_interval)
        super().__init__(group, namesrv, ConsumerOptions(**options))
        self.auto_commit = auto_commit
        self._assigned: set[MessageQueue] | None = None  # None: subscribe mode
        self._paused: set[MessageQueue] = set()
        self._available: asyncio.Event | None = None
        self._rr = 0

    # --- configuration -----------------------------------------------------------------------
    def subscribe(self, topic: str, expression: str | MessageSelector = "*") -> None:
        if self._assigned is not None:
            raise ClientStateError(self.kind, "using assign()", "subscribe")
        super().subscribe(topic, expression)

    def effective_subscriptions(self) -> dict[str, Subscription]:
        # No retry topic: a lite pull consumer never sends messages back.
        return dict(self.subscriptions)

    def uses_rebalance(self) -> bool:
        return self._assigned is None

    def not_ready_delay(self) -> float:
        return PAUSE_RECHECK

    async def assign(self, queues: Iterable[MessageQueue]) -> None:
        """Consume exactly these queues, without a rebalance."""
        self.record_assignment(queues)
        if self.state is State.RUNNING:
            await self._apply_assignment()

    def record_assignment(self, queues: Iterable[MessageQueue]) -> None:
        if self.subscriptions and self._assigned is None:
            raise ClientStateError(self.kind, "using subscribe()", "assign")
        self._assigned = set(queues)
        for mq in self._assigned:
            self.subscriptions.setdefault(mq.topic, Subscription.parse(mq.topic, "*"))

    async def _before_first_rebalance(self) -> None:
        self._available = asyncio.Event()
        if self._assigned is not None:
            await self._apply_assignment()

    async def _apply_assignment(self) -> None:
        assert self._assigned is not None
        for topic in {mq.topic for mq in self._assigned} | {mq.topic for mq in self.table}:
            await self.rebalancer.update_table(
                topic, {m for m in self._assigned if m.topic == topic}
            )

    def assignment(self) -> set[MessageQueue]:
        return set(self.table)

    # --- polling -----------------------------------------------------------------------------
    def dispatch(self, pq: ProcessQueue, msgs: list[MessageExt]) -> None:
        if self._available is not None:
            self._available.set()

    async def poll(self, timeout: float = 1.0, max_messages: int | None = None) -> list[MessageExt]:
        """Up to max_messages (default pull_batch_size) messages, waiting at most `timeout`
        seconds for some."""
        self.require_running("poll")
        assert self._available is not None
        if self.auto_commit:
            self._commit_memory()
        deadline = time.monotonic() + timeout
        while True:
            self._available.clear()
            msgs = self._take(max_messages or self.options.pull_batch_size)
            if msgs:
                return msgs
            remaining = deadline - time.monotonic()
            if remaining <= 0 or self.state is not State.RUNNING:
                return []
            if not await wait_event(self._available, remaining):
                return []

    def _take(self, n: int) -> list[MessageExt]:
        pqs = [
            pq for mq, pq in sorted(self.table.items()) if mq not in self._paused and not pq.dropped
        ]
        if not pqs:
            return []
        out: list[MessageExt] = []
        start = self._rr
        self._rr += 1
        for i in range(len(pqs)):
            if len(out) >= n:
                break
            out += pqs[(start + i) % len(pqs)].take(n - len(out))
        return out

    def _commit_memory(self) -> None:
        for pq in self.table.values():
            self.settle_orderly(pq)

    async def commit(self) -> None:
        """Acknowledge everything polled so far and write the offsets out now."""
        self.require_running("commit")
        self._commit_memory()
        await self.persist_all()

    async def committed(self, mq: MessageQueue) -> int:
        """The offset stored for the group (-1: none). A look only: what was polled and not yet
        committed stays where it is."""
        try:
            return await self.offset_store.query_store(mq)
        except FerryMQError:
            return self.offset_store.read_memory(mq)

    async def seek(self, mq: MessageQueue, offset: int) -> None:
        """Poll `mq` from `offset` next; what was held for it is discarded."""
        self.require_running("seek")
        if mq not in self.table:
            raise ClientStateError(self.kind, f"not assigned {mq}", "seek")
        self.drop_queue(mq)
        self.offset_store.update(mq, offset, increase_only=False)
        self.start_queue(mq, self.new_process_queue(mq), offset)

    def pause(self, queues: Iterable[MessageQueue]) -> None:
        self._paused |= set(queues)

    def resume(self, queues: Iterable[MessageQueue]) -> None:
        self._paused -= set(queues)
        if self._available is not None:
            self._available.set()

    def may_pull(self, pq: ProcessQueue) -> bool:
        return pq.mq not in self._paused

    async def _after_stopped(self) -> None:
        return None

    async def shutdown(self) -> bool:
        if self.state is State.RUNNING and self.auto_commit:
            self._commit_memory()
        return await super().shutdown()
