"""The lite pull consumer, async core: the application polls. Queues come from a rebalance
(subscribe) or are chosen by the application (assign); background pull loops fill each
queue's ProcessQueue and poll() hands messages out in offset order per queue. commit() (or
auto-commit at poll time) acknowledges everything polled so far. `LitePullConsumer`
(blocking) and `ferrymq.aio.LitePullConsumer` are this class."""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
import time
from collections.abc import Iterable

from ...common.errors import FerryMQError
from ...common.message import MessageExt, MessageQueue
from ...common.paths import StrPath
from ...remoting.tls import TlsClientSettings
from ..errors import ClientStateError
from ..lifecycle import State
from ..loop import wait_event
from .allocate import AllocateStrategy
from .base import ConsumerBase
from .options import CONSUMER_DEFAULTS as _D
from .options import ConsumerOptions
from .process_queue import ProcessQueue
from .subscription import MessageSelector, Subscription
from .types import ConsumeFromWhere, MessageModel

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
        message_model: MessageModel = _D.message_model,
        consume_from_where: ConsumeFromWhere = _D.consume_from_where,
        consume_timestamp: int | dt.datetime | None = _D.consume_timestamp,
        consume_threads: int = _D.consume_threads,
        consume_message_batch_max_size: int = _D.consume_message_batch_max_size,
        pull_batch_size: int = _D.pull_batch_size,
        max_reconsume_times: int | None = _D.max_reconsume_times,
        pull_threshold_for_queue: int = _D.pull_threshold_for_queue,
        pull_threshold_size_for_queue: int = _D.pull_threshold_size_for_queue,
        pull_suspend_timeout: float = _D.pull_suspend_timeout,
        pull_interval: float = _D.pull_interval,
        pull_delay_on_error: float = _D.pull_delay_on_error,
        rebalance_interval: float = _D.rebalance_interval,
        persist_interval: float | None = None,  # None: auto_commit_interval
        commit_delay: float = _D.commit_delay,
        local_retry_delay: float = _D.local_retry_delay,
        consume_timeout: float = _D.consume_timeout,
        suspend_current_queue_time: float = _D.suspend_current_queue_time,
        lock_interval: float = _D.lock_interval,
        lock_max_live: float = _D.lock_max_live,
        lock_retry_delay: float = _D.lock_retry_delay,
        shutdown_timeout: float = _D.shutdown_timeout,
        release_wait: float = _D.release_wait,
        allocate_strategy: str | AllocateStrategy = _D.allocate_strategy,
        offset_store_dir: StrPath | None = _D.offset_store_dir,
        precise_ack: bool = _D.precise_ack,
        route_refresh_interval: float = _D.route_refresh_interval,
        heartbeat_interval: float = _D.heartbeat_interval,
        request_timeout: float = _D.request_timeout,
        access_key: str | None = _D.access_key,
        secret_key: str | None = _D.secret_key,
        tls: TlsClientSettings | bool | None = _D.tls,
    ) -> None:
        super().__init__(group, namesrv, ConsumerOptions(
            message_model=message_model, consume_from_where=consume_from_where,
            consume_timestamp=consume_timestamp, consume_threads=consume_threads,
            consume_message_batch_max_size=consume_message_batch_max_size,
            pull_batch_size=pull_batch_size, max_reconsume_times=max_reconsume_times,
            pull_threshold_for_queue=pull_threshold_for_queue,
            pull_threshold_size_for_queue=pull_threshold_size_for_queue,
            pull_suspend_timeout=pull_suspend_timeout, pull_interval=pull_interval,
            pull_delay_on_error=pull_delay_on_error, rebalance_interval=rebalance_interval,
            persist_interval=auto_commit_interval if persist_interval is None else persist_interval,
            commit_delay=commit_delay, local_retry_delay=local_retry_delay,
            consume_timeout=consume_timeout, suspend_current_queue_time=suspend_current_queue_time,
            lock_interval=lock_interval, lock_max_live=lock_max_live,
            lock_retry_delay=lock_retry_delay, shutdown_timeout=shutdown_timeout,
            release_wait=release_wait, allocate_strategy=allocate_strategy,
            offset_store_dir=offset_store_dir, precise_ack=precise_ack,
            route_refresh_interval=route_refresh_interval, heartbeat_interval=heartbeat_interval,
            request_timeout=request_timeout, access_key=access_key, secret_key=secret_key, tls=tls,
        ))
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
