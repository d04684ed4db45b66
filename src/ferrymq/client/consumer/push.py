"""The push consumer, async core: the shared consumer machinery plus a listener, driven by
the concurrent or the orderly consume service. `PushConsumer` (blocking) and
`ferrymq.aio.PushConsumer` are this class."""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import logging
import time
from collections import defaultdict
from collections.abc import Callable
from typing import Any

from ...common import props as P
from ...common.errors import FerryMQError
from ...common.message import MessageExt, MessageQueue
from ...common.paths import StrPath
from ...remoting.tls import TlsClientSettings
from ..errors import ClientError, ClientStateError
from .allocate import AllocateStrategy
from .base import ConsumerBase
from .concurrent import ConcurrentService, concurrent_status
from .options import CONSUMER_DEFAULTS as _D
from .options import ConsumerOptions
from .orderly import OrderlyService, orderly_succeeded
from .process_queue import ProcessQueue
from .runner import ListenerRunner
from .types import ConsumeConcurrentlyContext, ConsumeFromWhere, ConsumeOrderlyContext, ConsumeStatus, MessageModel

log = logging.getLogger("ferrymq.client.consumer")

# A push consumer's default pull size. RocketMQ's is 32; ferrymq's broker serves up to 1024
# messages (4 MiB) a pull, and through a backlog every pull costs each side a request's work
# (over 100 us of broker CPU), so larger pulls cut that per message by four. A caught-up
# consumer's pulls bring what has arrived, whatever this is, so it adds no latency; flow
# control (pull_threshold_for_queue) still bounds what a queue holds.
PUSH_PULL_BATCH_SIZE = 128


class AsyncPushConsumer(ConsumerBase):
    kind = "PushConsumer"
    consume_type = "CONSUME_PASSIVELY"

    def __init__(
        self,
        group: str,
        namesrv: str = "127.0.0.1:9876",
        *,
        message_model: MessageModel = _D.message_model,
        consume_from_where: ConsumeFromWhere = _D.consume_from_where,
        consume_timestamp: int | dt.datetime | None = _D.consume_timestamp,
        consume_threads: int = _D.consume_threads,
        consume_message_batch_max_size: int = _D.consume_message_batch_max_size,
        pull_batch_size: int = PUSH_PULL_BATCH_SIZE,
        max_reconsume_times: int | None = _D.max_reconsume_times,
        pull_threshold_for_queue: int = _D.pull_threshold_for_queue,
        pull_threshold_size_for_queue: int = _D.pull_threshold_size_for_queue,
        pull_suspend_timeout: float = _D.pull_suspend_timeout,
        pull_interval: float = _D.pull_interval,
        pull_delay_on_error: float = _D.pull_delay_on_error,
        rebalance_interval: float = _D.rebalance_interval,
        persist_interval: float = _D.persist_interval,
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
            persist_interval=persist_interval, commit_delay=commit_delay,
            local_retry_delay=local_retry_delay, consume_timeout=consume_timeout,
            suspend_current_queue_time=suspend_current_queue_time, lock_interval=lock_interval,
            lock_max_live=lock_max_live, lock_retry_delay=lock_retry_delay,
            shutdown_timeout=shutdown_timeout, release_wait=release_wait,
            allocate_strategy=allocate_strategy, offset_store_dir=offset_store_dir,
            precise_ack=precise_ack, route_refresh_interval=route_refresh_interval,
            heartbeat_interval=heartbeat_interval, request_timeout=request_timeout,
            access_key=access_key, secret_key=secret_key, tls=tls,
        ))
        self._runner: ListenerRunner | None = None
        self._orderly = False
        self._concurrent: ConcurrentService | None = None
        self._ordered: OrderlyService | None = None
        self._releasing: set[MessageQueue] = set()
        self._free_tasks: set[asyncio.Task[None]] = set()
        self._concurrent_releases: set[asyncio.Task[None]] = set()

    # --- configuration -----------------------------------------------------------------------
    def register_listener(self, fn: Callable[..., Any], *, orderly: bool = False,
                          blocking: bool = True) -> None:
        """fn(msgs, ctx) -> ConsumeStatus (ConsumeOrderlyStatus when orderly); a coroutine
        function is awaited on the event loop instead of running on the thread pool.
        `blocking=False`: a plain function that never waits (no I/O, no sleep, no lock held
        by others, quick work) runs on the event loop too, with no thread hop; while it runs,
        this client's pulls, acknowledgements and heartbeats wait."""
        self.require_created("register a listener")
        self._runner = ListenerRunner(
            fn, self.options.consume_threads, f"ferrymq-consume-{self.group}", blocking=blocking
        )
        self._orderly = orderly

    @property
    def orderly(self) -> bool:
        return self._orderly

    def takes_in_order(self) -> bool:
        return self._orderly

    async def attach(self, inst: Any) -> None:
        if self._runner is None:
            raise ClientStateError(self.kind, "without a listener", "start")
        if not self.subscriptions:
            raise ClientStateError(self.kind, "without a subscription", "start")
        if self._orderly:
            self._ordered = OrderlyService(self, self._runner)
        else:
            self._concurrent = ConcurrentService(self, self._runner)
        await super().attach(inst)
        if self._concurrent is not None:
            self._spawn(self._clean_loop(), "consume-timeout")
        if self._ordered is not None and self.clustering:
            self._spawn(self._lock_loop(), "lock")

    # --- consuming ---------------------------------------------------------------------------
    def dispatch(self, pq: ProcessQueue, msgs: list[MessageExt]) -> None:
        if self._ordered is not None:
            self._ordered.submit(pq)
        elif self._concurrent is not None:
            self._concurrent.submit(pq, msgs)

    async def send_back(self, msg: MessageExt, delay_level: int) -> bool:
        """CONSUMER_SEND_MSG_BACK: the broker re-delivers through %RETRY%<group> after the
        delay level (0: it picks 3 + reconsume times; -1: straight to %DLQ%<group>)."""
        try:
            addr = await self.inst.find_broker_addr(msg.broker, msg.topic)
            if addr is None:
                raise ClientError(f"broker {msg.broker} has no known address")
            await self.inst.api.consumer_send_back(
                addr,
                commit_log_offset=msg.commit_log_offset,
                group=self.group,
                delay_level=delay_level,
                origin_msg_id=msg.msg_id,
                origin_topic=msg.topic,
                max_reconsume_times=self.options.max_reconsume_times,
            )
            return True
        except FerryMQError as exc:
            log.warning("%s: sending %s back failed: %s", self.group, msg.msg_id, exc)
            return False

    async def dead_letter(self, msg: MessageExt) -> bool:
        """Orderly consumption gives up on a message (RocketMQ's ConsumeMessageOrderlyService
        .sendMessageBack): it is sent to %RETRY%<group> with its reconsume times, which count
        attempts made here, not sends back, and the broker stores it in %DLQ%<group> with
        that count. CONSUMER_SEND_MSG_BACK would store the broker's copy's count + 1."""
        props = dict(msg.properties)
        props.setdefault(P.PROPERTY_ORIGIN_MESSAGE_ID, msg.msg_id)
        props[P.PROPERTY_RETRY_TOPIC] = msg.topic
        props[P.PROPERTY_DELAY_TIME_LEVEL] = str(3 + msg.reconsume_times)
        for name in (P.PROPERTY_TRANSACTION_PREPARED, P.PROPERTY_RECONSUME_TIME,
                     P.PROPERTY_MAX_RECONSUME_TIMES):
            props.pop(name, None)
        try:
            addr = await self.inst.find_broker_addr(msg.broker, msg.topic)
            if addr is None:
                raise ClientError(f"broker {msg.broker} has no known address")
            await self.inst.api.send_to_retry_topic(
                addr,
                group=self.group,
                body=msg.body,
                flag=msg.flag,
                properties=P.properties_to_string(props),
                reconsume_times=msg.reconsume_times,
                max_reconsume_times=self.options.orderly_max_reconsume_times,
            )
            return True
        except FerryMQError as exc:
            log.warning("%s: dead-lettering %s failed: %s", self.group, msg.msg_id, exc)
            return False

    async def _clean_loop(self) -> None:
        assert self._concurrent is not None
        interval = max(self.options.consume_timeout / 4, 0.05)
        while True:
            await asyncio.sleep(interval)
            try:
                await self._concurrent.clean_expired()
            except Exception:
                log.exception("%s: consume-timeout scan failed", self.group)

    async def _drain(self) -> None:
        if self._concurrent is not None:
            await self._concurrent.drain()
        if self._ordered is not None:
            await self._ordered.drain()
        # Queues given up just before: their releases carry progress that persist_all, which
        # covers only the queues still held, would not (bounded by the shutdown timeout too).
        while self._concurrent_releases:
            await asyncio.gather(*list(self._concurrent_releases), return_exceptions=True)

    async def _after_stopped(self) -> None:
        for task in [*self._free_tasks, *self._concurrent_releases]:
            task.cancel()
        for task in [*self._free_tasks, *self._concurrent_releases]:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        if self._ordered is not None and self.clustering:
            await self._unlock(sorted(set(self.table) | self._releasing))
        if self._runner is not None:
            self._runner.shutdown()

    # --- orderly: broker locks ---------------------------------------------------------------
    def may_pull(self, pq: ProcessQueue) -> bool:
        return not (self._orderly and self.clustering) or pq.locked

    def lock_expired(self, pq: ProcessQueue) -> bool:
        return time.monotonic() - pq.last_lock_time > self.options.lock_max_live

    async def lock_queue(self, mq: MessageQueue) -> bool:
        if not (self._orderly and self.clustering):
            return True
        if mq in self._releasing:
            return False  # our own previous batch on it is still finishing
        try:
            addr = await self.inst.find_broker_addr(mq.broker_name, mq.topic)
            if addr is None:
                return False
            locked = mq in await self.inst.api.lock_batch(addr, self.group, self.client_id, [mq])
        except FerryMQError as exc:
            log.warning("%s: locking %s failed: %s", self.group, mq, exc)
            return False
        pq = self.table.get(mq)
        if pq is not None:
            pq.locked = locked
            if locked:
                pq.last_lock_time = time.monotonic()
        return locked

    def lock_later(self, pq: ProcessQueue) -> None:
        async def again() -> None:
            await asyncio.sleep(self.options.lock_retry_delay)
            if pq.dropped:
                pq.consuming = False
                return
            await self.lock_queue(pq.mq)
            assert self._ordered is not None
            self._ordered._start(pq)

        self._spawn_free(again())

    def _spawn_free(self, coro: Any) -> None:
        """A one-off task (delayed lock attempt, queue release) kept referenced until done."""
        task = asyncio.create_task(coro)
        self._free_tasks.add(task)
        task.add_done_callback(self._free_tasks.discard)

    async def _lock_loop(self) -> None:
        while True:
            await asyncio.sleep(self.options.lock_interval)
            try:
                await self.lock_all()
            except Exception:
                log.exception("%s: renewing queue locks failed", self.group)

    async def lock_all(self) -> None:
        """Renew every held queue's lease; a queue whose lock was lost stops consuming."""
        by_broker: dict[str, list[ProcessQueue]] = defaultdict(list)
        for pq in self.table.values():
            by_broker[pq.mq.broker_name].append(pq)
        for broker, pqs in by_broker.items():
            try:
                addr = await self.inst.find_broker_addr(broker, pqs[0].mq.topic)
                if addr is None:
                    continue
                locked = await self.inst.api.lock_batch(
                    addr, self.group, self.client_id, [p.mq for p in pqs]
                )
            except FerryMQError as exc:
                log.warning("%s: renewing locks on %s failed: %s", self.group, broker, exc)
                continue
            now = time.monotonic()
            assert self._ordered is not None
            for pq in pqs:
                was = pq.locked
                pq.locked = pq.mq in locked
                if pq.locked:
                    pq.last_lock_time = now
                    if not was:
                        self._ordered.submit(pq)
                elif was:
                    log.warning("%s: lost the lock of %s", self.group, pq.mq)

    async def _unlock(self, mqs: list[MessageQueue]) -> None:
        by_broker: dict[str, list[MessageQueue]] = defaultdict(list)
        for mq in mqs:
            by_broker[mq.broker_name].append(mq)
        for broker, group_mqs in by_broker.items():
            addr = await self.inst.find_broker_addr(broker, group_mqs[0].topic)
            if addr is None:
                continue
            with contextlib.suppress(FerryMQError):
                await self.inst.api.unlock_batch(addr, self.group, self.client_id, group_mqs)

    async def release_queue(self, mq: MessageQueue, pq: ProcessQueue) -> None:
        concurrent = self._concurrent
        if concurrent is not None and self.clustering:
            # The listener calls still running on the queue are waited for (briefly, off the
            # rebalance path), so their messages are acknowledged in our release and the next
            # owner, which waits for that release, does not deliver them again.
            concurrent.begin_close(pq)  # before the loop runs anything else

            async def finish_concurrent() -> None:
                await concurrent.finish_queue(pq, self.options.release_wait)
                if mq not in self.table:  # not taken back meanwhile
                    await super(AsyncPushConsumer, self).release_queue(mq, pq)

            task = asyncio.create_task(finish_concurrent())
            self._concurrent_releases.add(task)
            task.add_done_callback(self._concurrent_releases.discard)
            return
        if not (self._orderly and self.clustering):
            if concurrent is not None:
                concurrent.close_queue(pq)
            await super().release_queue(mq, pq)
            return
        # The queue's lock may only be given up once our batch on it has finished, or two
        # members would consume it at once. That wait happens off the rebalance path.
        self._releasing.add(mq)

        async def finish() -> None:
            try:
                assert self._ordered is not None
                await self._ordered.wait_queue_idle(pq, self.options.lock_max_live)
                await super(AsyncPushConsumer, self).release_queue(mq, pq)
                await self._unlock([mq])
            finally:
                self._releasing.discard(mq)

        self._spawn_free(finish())

    # --- broker requests ---------------------------------------------------------------------
    async def consume_directly(self, msg: MessageExt, broker: str) -> dict[str, Any]:
        if self._runner is None:
            return await super().consume_directly(msg, broker)
        began = time.monotonic()
        mq = MessageQueue(msg.topic, broker or msg.broker, msg.queue_id)
        self.reset_retry_topic([msg])
        if self._orderly:
            ok = orderly_succeeded(await self._runner.call([msg], ConsumeOrderlyContext(mq)))
        else:
            result = await self._runner.call([msg], ConsumeConcurrentlyContext(mq))
            ok = concurrent_status(result) is ConsumeStatus.CONSUME_SUCCESS
        return {
            "order": self._orderly,
            "autoCommit": True,
            "consumeResult": "CR_SUCCESS" if ok else "CR_LATER",
            "remark": "",
            "spentTimeMills": int((time.monotonic() - began) * 1000),
        }
