"""What the push and lite pull consumers share: subscriptions, the client instance, the
process-queue table with one pull task per assigned queue, the offset store, the periodic
rebalance and offset persistence, and the one place where acknowledgements change state."""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from ...acl.signing import credentials_from
from ...common import props as P
from ...common.message import MessageExt, MessageQueue
from ...common.names import is_retry_topic, retry_topic, validate_group, validate_topic
from ...remoting.tls import resolve_client_tls
from ..errors import BrokerError, ClientError
from ..instance import ClientInstance, InstanceConfig, abandon, acquire_async, release
from ..lifecycle import Lifecycle, State
from ..loop import wait_event
from .consume_stats import ConsumeStats
from .offset_store import LocalOffsetStore, OffsetStore, RemoteOffsetStore
from .options import ConsumerOptions
from .process_queue import ProcessQueue
from .pull import pull_loop
from .rebalance import Rebalancer
from .subscription import MessageSelector, Subscription
from .types import MessageModel

log = logging.getLogger("ferrymq.client.consumer")


class ConsumerBase(Lifecycle):
    kind = "consumer"
    consume_type = "CONSUME_PASSIVELY"

    def __init__(self, group: str, namesrv: str, options: ConsumerOptions) -> None:
        super().__init__()
        validate_group(group)
        self.group = group
        self.namesrv = namesrv
        self.options = options.validate()
        self.instance_config = InstanceConfig(
            namesrv,
            options.route_refresh_interval,
            options.heartbeat_interval,
            options.request_timeout,
            credentials=credentials_from(options.access_key, options.secret_key),
            tls=resolve_client_tls(options.tls),
        )
        self.subscriptions: dict[str, Subscription] = {}
        self._retry_sub: Subscription | None = None
        self.table: dict[MessageQueue, ProcessQueue] = {}
        self.read_from: dict[MessageQueue, int] = {}
        self.consume_stats = ConsumeStats()
        self.pull_refusal: BrokerError | None = None
        self.pull_tasks: dict[MessageQueue, asyncio.Task[None]] = {}
        self._inst: ClientInstance | None = None
        self._store: OffsetStore | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._wakeup: asyncio.Event | None = None
        self._commit_soon: asyncio.Event | None = None
        self.start_timestamp_ms = 0
        self.rebalancer = Rebalancer(self)

    # --- configuration -----------------------------------------------------------------------
    @property
    def clustering(self) -> bool:
        return self.options.message_model is MessageModel.CLUSTERING

    @property
    def orderly(self) -> bool:
        return False

    @property
    def inst(self) -> ClientInstance:
        if self._inst is None:
            raise ClientError(f"{self.kind} {self.group} is not started")
        return self._inst

    @property
    def client_id(self) -> str:
        return self.inst.client_id

    @property
    def offset_store(self) -> OffsetStore:
        assert self._store is not None
        return self._store

    def subscribe(self, topic: str, expression: str | MessageSelector = "*") -> None:
        """`expression`: a tag expression ('*', 'TagA || TagB') or a MessageSelector
        (by_tag, by_sql). An invalid one raises here."""
        validate_topic(topic)
        self.subscriptions[topic] = Subscription.parse(topic, expression)
        if self.state is State.RUNNING:
            self._after_subscription_change()

    def unsubscribe(self, topic: str) -> None:
        self.subscriptions.pop(topic, None)
        if self.state is State.RUNNING:
            self._after_subscription_change()

    def _after_subscription_change(self) -> None:
        self._spawn(self.inst.heartbeat_now(), "heartbeat")
        self.trigger_rebalance()

    def effective_subscriptions(self) -> dict[str, Subscription]:
        """Clustering members also consume their group's retry topic."""
        subs = dict(self.subscriptions)
        if self.clustering and subs:
            if self._retry_sub is None:  # one version for the member's life, as RocketMQ's
                self._retry_sub = Subscription.parse(retry_topic(self.group), "*")
            subs.setdefault(self._retry_sub.topic, self._retry_sub)
        return subs

    def topics(self) -> set[str]:
        return set(self.effective_subscriptions())

    def heartbeat_data(self) -> dict[str, Any]:
        return {
            "consumeFromWhere": self.options.consume_from_where.value,
            "consumeType": self.consume_type,
            "groupName": self.group,
            "messageModel": self.options.message_model.value,
            "subscriptionDataSet": [s.to_json() for s in self.effective_subscriptions().values()],
            "unitMode": False,
            # ferrymq brokers let a new owner of a queue wait for our release (RELEASED).
            "releasesQueues": True,
        }

    # --- lifecycle ---------------------------------------------------------------------------
    async def start(self) -> None:
        self.require_created("start")
        inst = acquire_async(self.instance_config, "C", self.group)
        try:
            await self.attach(inst)
        except BaseException:
            self.state = State.SHUTDOWN
            await abandon(inst, "C", self.group)
            raise

    async def attach(self, inst: ClientInstance) -> None:
        """Start on an instance reserved for this group: routes, heartbeat, first rebalance."""
        self._inst = inst
        self.start_timestamp_ms = self.options.start_timestamp_ms()
        if self.clustering:
            self._store = RemoteOffsetStore(
                inst, self.group, precise_ack=self.options.precise_ack, read_from=self.read_from
            )
        else:
            self._store = LocalOffsetStore(self.options.offsets_dir() / f"{self.group}.json")
        await self._store.load()
        self._wakeup = asyncio.Event()
        self._commit_soon = asyncio.Event()
        self._store.on_dirty = self._commit_soon.set
        self.state = State.RUNNING
        inst.register_consumer(self)
        await asyncio.gather(*(inst.update_route(topic) for topic in sorted(self.topics())))
        await inst.heartbeat_now()
        await self._before_first_rebalance()
        if self.uses_rebalance():
            await self.rebalancer.rebalance()
            self._spawn(self._rebalance_loop(), "rebalance")
        self._spawn(self._persist_loop(), "persist")
        if self.clustering:
            self._spawn(self._commit_loop(), "commit")

    async def __aenter__(self) -> ConsumerBase:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.shutdown()

    async def _before_first_rebalance(self) -> None:
        return None

    def uses_rebalance(self) -> bool:
        return True

    def _spawn(self, coro: Any, name: str) -> None:
        self._tasks.append(asyncio.create_task(coro, name=f"ferrymq-{name}-{self.group}"))

    async def shutdown(self) -> bool:
        """Stop pulling, let batches in flight finish (bounded), persist offsets, leave the
        group. True when the shared client instance closed too."""
        if self.state is not State.RUNNING:
            self.state = State.SHUTDOWN
            return False
        self.state = State.SHUTDOWN
        for task in self._tasks:
            task.cancel()
        await _wait_cancelled(self._tasks)
        self._tasks = []
        await self._stop_pulling()
        try:
            async with asyncio.timeout(self.options.shutdown_timeout):
                await self._drain()
        except TimeoutError:
            log.warning(
                "%s: batches still running after %.1fs; their offsets stay uncommitted",
                self.group,
                self.options.shutdown_timeout,
            )
        await self.persist_all()
        await self._after_stopped()
        inst = self.inst
        await inst.unregister(consumer_group=self.group)
        return await release(inst, "C", self.group)

    async def _stop_pulling(self) -> None:
        tasks = list(self.pull_tasks.values())
        for task in tasks:
            task.cancel()
        await _wait_cancelled(tasks)
        self.pull_tasks.clear()

    async def _drain(self) -> None:
        return None

    async def _after_stopped(self) -> None:
        return None

    # --- periodic work -----------------------------------------------------------------------
    def trigger_rebalance(self) -> None:
        if self._wakeup is not None:
            self._wakeup.set()

    async def _rebalance_loop(self) -> None:
        assert self._wakeup is not None
        while self.state is State.RUNNING:
            await wait_event(self._wakeup, self.options.rebalance_interval)
            self._wakeup.clear()
            try:
                await self.rebalancer.rebalance()
            except Exception:
                log.exception("%s: rebalance failed", self.group)

    async def _persist_loop(self) -> None:
        while self.state is State.RUNNING:
            await asyncio.sleep(self.options.persist_interval)
            try:
                await self.persist_all()
            except Exception:
                log.exception("%s: persisting offsets failed", self.group)

    async def _commit_loop(self) -> None:
        """Acknowledgements leave for the broker within commit_delay of a completion, in
        oneway rounds that wait for no answer (RemoteOffsetStore.commit), coalesced: one
        request per broker per round, whatever finished meanwhile. So a kill -9 of the
        consumer leaves little more than what was inside the listener to be consumed again."""
        assert self._commit_soon is not None
        while self.state is State.RUNNING:
            await self._commit_soon.wait()
            self._commit_soon.clear()
            if self.options.commit_delay > 0:
                await asyncio.sleep(self.options.commit_delay)
            mqs = self.offset_store.take_dirty() & set(self.table)
            if not mqs:
                continue
            try:
                await self.offset_store.commit(mqs)
            except Exception:
                log.exception("%s: committing offsets failed", self.group)

    async def persist_all(self) -> None:
        if self._store is not None:
            await self._store.persist(set(self.table))

    # --- queues ------------------------------------------------------------------------------
    def takes_in_order(self) -> bool:
        """True when the consumer takes held messages batch after batch (orderly, lite pull)
        instead of having each handed over as it arrives."""
        return True

    def new_process_queue(
        self, mq: MessageQueue, acked_above: list[tuple[int, int]] | None = None
    ) -> ProcessQueue:
        return ProcessQueue(
            mq,
            max_count=self.options.pull_threshold_for_queue,
            max_bytes=self.options.pull_threshold_size_for_queue * 1024 * 1024,
            in_order=self.takes_in_order(),
            acked_above=acked_above or (),
        )

    def start_queue(self, mq: MessageQueue, pq: ProcessQueue, offset: int) -> None:
        self.table[mq] = pq
        if self.clustering and self.options.precise_ack and not self.orderly:
            self.offset_store.track(mq, pq.acked_ranges)
        self.pull_tasks[mq] = asyncio.create_task(
            pull_loop(self, pq, offset), name=f"ferrymq-pull-{mq}"
        )

    def drop_queue(self, mq: MessageQueue) -> ProcessQueue | None:
        pq = self.table.pop(mq, None)
        if pq is not None:
            pq.dropped = True
        task = self.pull_tasks.pop(mq, None)
        if task is not None and task is not asyncio.current_task():
            task.cancel()
        return pq

    async def lock_queue(self, mq: MessageQueue) -> bool:
        """Orderly consumers lock a queue on the broker before taking it."""
        return True

    async def release_queue(self, mq: MessageQueue, pq: ProcessQueue) -> None:
        """A queue this member no longer owns: its offset goes to the broker first."""
        if self.clustering:
            # Failures are logged; the new owner's wait for the release then runs out.
            await self.offset_store.persist({mq}, release=True)
        self.offset_store.remove(mq)

    def may_pull(self, pq: ProcessQueue) -> bool:
        return True

    def not_ready_delay(self) -> float:
        """How long a queue that may not pull (unlocked, paused) waits before looking again."""
        return self.options.lock_retry_delay

    def dispatch(self, pq: ProcessQueue, msgs: list[MessageExt]) -> None:
        raise NotImplementedError

    # --- acknowledgement: every change of a message's state in this client happens here -------
    def settle(self, pq: ProcessQueue, consumed: list[MessageExt], *, closing: bool = False) -> None:
        """Concurrent consumption: the consumed (or sent back) messages leave the process
        queue; the committed offset becomes the smallest offset still held (the ranges above
        it are read from the process queue when the offset goes out). `closing`: the queue is
        being handed over and its last offset is about to be persisted."""
        offset = pq.remove(consumed)
        if offset >= 0 and (closing or not pq.dropped):
            self.offset_store.update(pq.mq, offset, increase_only=True)

    def settle_orderly(self, pq: ProcessQueue, *, closing: bool = False) -> None:
        """Orderly consumption: the taken batch is done; the offset moves past it exactly."""
        offset = pq.commit()
        if offset >= 0 and (closing or not pq.dropped):
            self.offset_store.update(pq.mq, offset, increase_only=False)

    def reset_retry_topic(self, msgs: list[MessageExt]) -> None:
        """Messages re-delivered through %RETRY%<group> show the topic they were sent to."""
        rt = retry_topic(self.group)
        for m in msgs:
            origin = m.properties.get(P.PROPERTY_RETRY_TOPIC)
            if origin and m.topic == rt:
                m.topic = origin

    # --- broker requests ---------------------------------------------------------------------
    async def reset_offsets(self, topic: str, offsets: dict[MessageQueue, int]) -> None:
        """RESET_CONSUMER_CLIENT_OFFSET: forget what is held for those queues and start again
        from the given offsets (the broker has committed them already)."""
        for mq, offset in offsets.items():
            if mq.topic != topic:
                continue
            self.drop_queue(mq)
            self.offset_store.track(mq, None)
            self.offset_store.update(mq, offset, increase_only=False)
        log.info("%s: offsets of %s reset by the broker", self.group, topic)
        self.trigger_rebalance()

    def running_info(self) -> dict[str, Any]:
        """RocketMQ's ConsumerRunningInfo: properties, subscriptions, each queue held
        (ProcessQueueInfo) and the figures per topic (ConsumeStatus)."""
        from ...common.jsonx import FrozenKey

        # The process queues keep monotonic times; the running info carries wall-clock ms.
        to_wall = time.time() - time.monotonic()
        mq_table = {}
        for mq, pq in sorted(self.table.items()):
            held = pq.messages()
            mq_table[FrozenKey(
                (("brokerName", mq.broker_name), ("queueId", mq.queue_id), ("topic", mq.topic))
            )] = {
                "cachedMsgCount": pq.count,
                "cachedMsgSizeInMiB": pq.bytes // (1024 * 1024),
                "cachedMsgMinOffset": held[0].queue_offset if held else 0,
                "cachedMsgMaxOffset": held[-1].queue_offset if held else 0,
                "commitOffset": self.offset_store.read_memory(mq),
                "droped": pq.dropped,
                "locked": pq.locked,
                "lastLockTimestamp": int((pq.last_lock_time + to_wall) * 1000) if pq.last_lock_time else 0,
                "lastPullTimestamp": int((pq.last_pull_time + to_wall) * 1000),
                "lastConsumeTimestamp": int((pq.last_consume_time + to_wall) * 1000),
            }
        return {
            "properties": {
                "consumeType": self.consume_type,
                "messageModel": self.options.message_model.value,
                "consumeFromWhere": self.options.consume_from_where.value,
                "consumeThreads": str(self.options.consume_threads),
                "consumeOrderly": str(self.orderly).lower(),
                # RocketMQ's ConsumerRunningInfo.PROP_* keys, as its console reads them.
                "PROP_NAMESERVER_ADDR": self.namesrv,
                "PROP_CONSUME_TYPE": self.consume_type,
                "PROP_CONSUMEORDERLY": str(self.orderly).lower(),
                "PROP_THREADPOOL_CORE_SIZE": str(self.options.consume_threads),
                "PROP_CONSUMER_START_TIMESTAMP": str(self.start_timestamp_ms),
            },
            "subscriptionSet": [s.to_json() for s in self.effective_subscriptions().values()],
            "mqTable": mq_table,
            "statusTable": self.consume_stats.status_table(),
        }

    async def consume_directly(self, msg: MessageExt, broker: str) -> dict[str, Any]:
        return {
            "order": False,
            "autoCommit": True,
            "consumeResult": "CR_THROW_EXCEPTION",
            "remark": "this consumer cannot consume directly",
            "spentTimeMills": 0,
        }

    def is_retry(self, mq: MessageQueue) -> bool:
        return is_retry_topic(mq.topic)


async def _wait_cancelled(tasks: list[asyncio.Task[None]], timeout: float = 10.0) -> None:
    """Wait for cancelled tasks to unwind; one that refuses is abandoned, not waited for."""
    pending = [t for t in tasks if not t.done()]
    if pending:
        _, stuck = await asyncio.wait(pending, timeout=timeout)
        for task in stuck:
            log.warning("task %s did not stop when cancelled", task.get_name())
    for task in tasks:
        if task.done() and not task.cancelled():
            task.exception()  # retrieved, so asyncio does not log it as never retrieved
