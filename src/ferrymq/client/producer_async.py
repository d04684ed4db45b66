"""The producer, async core: queue selection with latency fault tolerance, retries, topic
auto-creation through TBW102, auto-batching; what a message becomes on the wire (validation,
unique id, compression) is outgoing.py's. `Producer` (blocking) and `ferrymq.aio.Producer`
are this class."""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import random
import time
from collections.abc import Awaitable, Callable, Sequence

from ..acl.signing import credentials_from
from ..common import props as P
from ..common.codes import RequestCode, ResponseCode
from ..common.ids import uniq_id_generator
from ..common.message import Message, MessageQueue
from ..common.names import java_string_hash, validate_group
from ..remoting import RemotingCommand, RemotingError
from ..remoting.tls import TlsClientSettings, resolve_client_tls
from .accumulator import Accumulator, AutoBatchConfig
from .errors import (
    BrokerError,
    ClientClosedError,
    NameServerUnreachableError,
    NoRouteError,
    NoWritableMasterError,
    SendError,
    TlsRequiredError,
    broker_error,
)
from .fault import LatencyFaultTolerance
from .instance import ClientInstance, InstanceConfig, abandon, acquire_async, release
from .intake import copy_to
from .lifecycle import Lifecycle, State
from .outgoing import Outgoing, Preparer, entry_outgoing
from .producer_options import PRODUCER_DEFAULTS as _D
from .producer_options import ProducerOptions
from .results import SendResult, SendStatus
from .route import TopicRoute
from .sendbatch import EntryBatch, Lane

log = logging.getLogger("ferrymq.client.producer")

_STATUS: dict[int, SendStatus] = {
    ResponseCode.SUCCESS: SendStatus.SEND_OK,
    ResponseCode.FLUSH_DISK_TIMEOUT: SendStatus.FLUSH_DISK_TIMEOUT,
    ResponseCode.FLUSH_SLAVE_TIMEOUT: SendStatus.FLUSH_SLAVE_TIMEOUT,
    ResponseCode.SLAVE_NOT_AVAILABLE: SendStatus.SLAVE_NOT_AVAILABLE,
}
# How often a topic without a route, or without a writable queue, is looked up again.
NO_ROUTE_RECHECK = 1.0

QueueSelector = Callable[[list[MessageQueue], Message, object], MessageQueue]


def hash_queue_index(key: object, n: int) -> int:
    """RocketMQ's SelectMessageQueueByHash: Java hashCode of the key, modulo, made positive."""
    if isinstance(key, bool):
        h = 1231 if key else 1237
    elif isinstance(key, int):
        h = ((key + 2**31) % 2**32) - 2**31
    else:
        h = java_string_hash(str(key))
    return abs(h) % n


class AsyncProducer(Lifecycle, Preparer):
    kind = "Producer"

    def __init__(
        self,
        group: str,
        namesrv: str = "127.0.0.1:9876",
        *,
        send_timeout: float = _D.send_timeout,
        retry_times_when_send_failed: int = _D.retry_times_when_send_failed,
        retry_times_when_send_async_failed: int = _D.retry_times_when_send_async_failed,
        compress_over: int = _D.compress_over,
        max_message_size: int = _D.max_message_size,
        default_topic_queue_nums: int = _D.default_topic_queue_nums,
        create_topic_key: str = _D.create_topic_key,
        latency_fault_enabled: bool = _D.latency_fault_enabled,
        fault_isolation: float | None = _D.fault_isolation,
        route_refresh_interval: float = _D.route_refresh_interval,
        heartbeat_interval: float = _D.heartbeat_interval,
        delay_levels: int = _D.delay_levels,
        auto_batch: bool = _D.auto_batch,
        batch_max_delay_ms: float = _D.batch_max_delay_ms,
        batch_max_bytes: int = _D.batch_max_bytes,
        total_batch_max_bytes: int = _D.total_batch_max_bytes,
        access_key: str | None = _D.access_key,
        secret_key: str | None = _D.secret_key,
        tls: TlsClientSettings | bool | None = _D.tls,
    ) -> None:
        super().__init__()
        validate_group(group)
        self.options = o = ProducerOptions(
            send_timeout=send_timeout, retry_times_when_send_failed=retry_times_when_send_failed,
            retry_times_when_send_async_failed=retry_times_when_send_async_failed,
            compress_over=compress_over, max_message_size=max_message_size,
            default_topic_queue_nums=default_topic_queue_nums, create_topic_key=create_topic_key,
            latency_fault_enabled=latency_fault_enabled, fault_isolation=fault_isolation,
            route_refresh_interval=route_refresh_interval, heartbeat_interval=heartbeat_interval,
            delay_levels=delay_levels, auto_batch=auto_batch, batch_max_delay_ms=batch_max_delay_ms,
            batch_max_bytes=batch_max_bytes, total_batch_max_bytes=total_batch_max_bytes,
            access_key=access_key, secret_key=secret_key, tls=tls,
        )
        self.group = group
        self.namesrv = namesrv
        self.send_timeout = o.send_timeout
        self.retry_times_when_send_failed = o.retry_times_when_send_failed
        self.retry_times_when_send_async_failed = o.retry_times_when_send_async_failed
        Preparer.__init__(self, max_message_size=o.max_message_size, compress_over=o.compress_over,
                          delay_levels=o.delay_levels)
        self.default_topic_queue_nums = o.default_topic_queue_nums
        self.create_topic_key = o.create_topic_key
        self.latency_fault_enabled = o.latency_fault_enabled
        self.fault = LatencyFaultTolerance(isolation_seconds=o.fault_isolation)
        self.instance_config = InstanceConfig(
            namesrv, o.route_refresh_interval, o.heartbeat_interval, o.send_timeout,
            credentials=credentials_from(o.access_key, o.secret_key), tls=resolve_client_tls(o.tls),
        )
        self._inst: ClientInstance | None = None
        self._topics: set[str] = set()
        self._rr: dict[str, int] = {}
        self._queue_cache: dict[str, tuple[TopicRoute, list[MessageQueue]]] = {}
        self._no_route_checked: dict[str, float] = {}
        self.auto_batch = AutoBatchConfig(
            o.auto_batch, o.batch_max_delay_ms, o.batch_max_bytes, o.total_batch_max_bytes
        )
        self._accumulator = Accumulator(self.auto_batch, self._send_accumulated, self._send_entry_async)
        self._lane: Lane | None = None  # the blocking producer's, once it opened one
        self._linger: asyncio.TimerHandle | None = None  # when the lane's open batches go

    # --- lifecycle ---------------------------------------------------------------------------
    async def start(self) -> None:
        self.require_created("start")
        inst = acquire_async(self.instance_config, "P", self.group)
        try:
            await self.attach(inst)
        except BaseException:
            self.state = State.SHUTDOWN
            await abandon(inst, "P", self.group)
            raise

    async def attach(self, inst: ClientInstance) -> None:
        """Start on an instance already reserved for this group (the blocking wrapper's way)."""
        self._inst = inst
        # Bound at start, not at creation: a producer made before a fork starts in the child.
        self._new_id = uniq_id_generator().next_id
        inst.register_producer(self)
        self.state = State.RUNNING
        await inst.heartbeat_now()
        # RocketMQ starts a producer without asking the name server (it may come up later);
        # an unreachable one is still worth saying at once rather than at the first send.
        # The lookup also warms the route that sends to new topics borrow.
        await inst.update_route(self.create_topic_key)
        if isinstance(inst.namesrv_failure, TlsRequiredError):
            log.warning("producer %s started, but name server %s accepts only TLS connections: "
                        "sends will fail (make the producer with tls=True)", self.group, self.namesrv)
        elif inst.namesrv_failure is not None:
            log.warning("producer %s started, but name server %s is unreachable (%s): sends "
                        "will fail until it answers", self.group, self.namesrv, inst.namesrv_failure)

    async def shutdown(self) -> bool:
        """Returns True when the shared instance was closed with it."""
        if self.state is not State.RUNNING or self._inst is None:
            self.state = State.SHUTDOWN
            return False
        # What callers already handed over is sent before the producer stops; nothing new is.
        self._closing = True
        if self._lane is not None:
            # Once closed, a lane refuses every hand-over: what it holds now is all it will.
            self._lane.close(lambda: ClientClosedError(self.kind, "send"))
            self._take_lane_all()
        await self._accumulator.drain()
        self.state = State.SHUTDOWN
        inst = self._inst
        await inst.unregister(producer_group=self.group)
        return await release(inst, "P", self.group)

    async def __aenter__(self) -> AsyncProducer:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.shutdown()

    @property
    def instance(self) -> ClientInstance:
        self.require_running("send")
        assert self._inst is not None
        return self._inst

    def topics(self) -> set[str]:
        return set(self._topics)

    # --- queues ------------------------------------------------------------------------------
    async def message_queues(self, topic: str) -> list[MessageQueue]:
        """Writable queues of the topic; a topic the name server has never routed borrows
        TBW102's (the broker then creates it on the first send). One with a route but no
        writable queue raises NoWritableMasterError (retriable) or NoRouteError."""
        inst = self.instance
        self._topics.add(topic)
        route = inst.routes.get(topic)
        if route is not None:
            cached = self._queue_cache.get(topic)
            if cached is not None and cached[0] is route:
                return cached[1]
        if route is None or not route.write_queues():
            # No route yet, or one whose groups all lost their master: a new master (a
            # controller's election, a restart) shows up in the next lookup.
            now = time.monotonic()
            # A lookup already under way is awaited, never skipped: skipping it would send a
            # burst of first sends to TBW102's queues, which the topic may not have.
            if (inst.route_fetch_pending(topic)
                    or now - self._no_route_checked.get(topic, 0.0) >= NO_ROUTE_RECHECK):
                self._no_route_checked[topic] = now
                route = await inst.update_route(topic)
        if route is not None:
            queues = route.write_queues()
            if queues:
                # Routes are replaced, never mutated, so identity tells when to recompute.
                self._queue_cache[topic] = (route, queues)
                return queues
            # A topic the name server routes is never sent by the auto-create route, as
            # RocketMQ's tryToFindTopicPublishInfo: TBW102's brokers may be another cluster's,
            # which would store the messages and create the topic there.
            raise self._unwritable(topic, route)
        base = await inst.route(self.create_topic_key)
        if base is not None:
            queues = [
                MessageQueue(topic, q.broker_name, i)
                for q in base.queue_datas
                if q.writable and q.broker_name in base.brokers
                for i in range(min(self.default_topic_queue_nums, q.write_queue_nums))
            ]
            if queues:
                return queues
        if isinstance(inst.namesrv_failure, TlsRequiredError):
            raise inst.namesrv_failure
        if inst.namesrv_failure is not None:
            raise NameServerUnreachableError(topic, self.namesrv, inst.namesrv_failure)
        raise NoRouteError(topic, self.namesrv)

    def _unwritable(self, topic: str, route: TopicRoute) -> NoRouteError:
        groups = tuple(q.broker_name for q in route.queue_datas if q.writable)
        if groups:
            return NoWritableMasterError(topic, self.namesrv, groups)
        # The topic's perm, or its brokers taken out of writes: say which command gives them back.
        brokers = ", ".join(sorted({q.broker_name for q in route.queue_datas}))
        return NoRouteError(topic, self.namesrv, (
            f"no queue of the topic is writable on {brokers or 'any broker'}: the topic's perm "
            f"(`ferrymq topic update {topic} --perm rw`) or a broker out of writes (`ferrymq broker "
            "add-write-perm B`)"))

    def _select(self, topic: str, queues: list[MessageQueue], avoid: str | None) -> MessageQueue:
        n = len(queues)
        start = self._rr.get(topic)
        if start is None:
            start = random.randrange(n)
        self._rr[topic] = start + 1
        ok_broker: Callable[[str], bool] = (
            self.fault.is_available if self.latency_fault_enabled else (lambda _b: True)
        )
        for i in range(n):
            mq = queues[(start + i) % n]
            if mq.broker_name != avoid and ok_broker(mq.broker_name):
                return mq
        if self.latency_fault_enabled:
            for i in range(n):  # everyone is marked: any broker but the one that just failed
                mq = queues[(start + i) % n]
                if mq.broker_name != avoid:
                    return mq
        return queues[start % n]

    # --- sending -----------------------------------------------------------------------------
    def _header(self, out: Outgoing, mq: MessageQueue) -> dict[str, str]:
        header = {
            "producerGroup": self.group,
            "topic": out.topic,
            "defaultTopic": self.create_topic_key,
            "defaultTopicQueueNums": str(self.default_topic_queue_nums),
            "queueId": str(mq.queue_id),
            "sysFlag": str(out.sys_flag),
            "bornTimestamp": str(int(time.time() * 1000)),
            "flag": str(out.flag),
            "properties": out.text,
            "reconsumeTimes": str(out.reconsume_times or 0),
            "unitMode": "false",
            "batch": "true" if out.batch else "false",
        }
        if out.max_reconsume_times is not None:
            header["maxReconsumeTimes"] = str(out.max_reconsume_times)
        return header

    async def _send_to(self, out: Outgoing, mq: MessageQueue, timeout: float) -> SendResult:
        inst = self.instance
        addr = await inst.find_broker_addr(mq.broker_name, out.topic)
        if addr is None:
            raise NoRouteError(out.topic, self.namesrv, f"broker {mq.broker_name!r} has no address")
        began = time.monotonic()
        try:
            resp = await inst.api.send(
                addr, self._header(out, mq), out.body, batch=out.batch, timeout=timeout
            )
        except RemotingError as exc:
            self.fault.update(
                mq.broker_name, int((time.monotonic() - began) * 1000), isolation=True
            )
            # A dead master leaves the route at once: the next sends see that without waiting
            # for the periodic refresh.
            await inst.after_failure(out.topic, exc)
            raise
        self.fault.update(mq.broker_name, int((time.monotonic() - began) * 1000), isolation=False)
        return self._result(resp, addr, mq, out)

    def _result(
        self, resp: RemotingCommand, addr: str, mq: MessageQueue, out: Outgoing
    ) -> SendResult:
        status = _STATUS.get(resp.code)
        if status is None:
            code = RequestCode.SEND_BATCH_MESSAGE if out.batch else RequestCode.SEND_MESSAGE_V2
            raise broker_error(addr, code, resp.code, resp.remark)
        e = resp.ext_fields
        return SendResult(
            status=status,
            msg_id=out.uniq_id,
            offset_msg_id=e.get("msgId", ""),
            queue_id=int(e.get("queueId", mq.queue_id)),
            queue_offset=int(e.get("queueOffset", -1)),
            broker=mq.broker_name,
        )

    async def _send_with_retries(
        self, out: Outgoing, attempts: int, *, same_broker: bool, mq: MessageQueue | None = None,
        pinned: bool = False,
    ) -> SendResult:
        deadline = time.monotonic() + self.send_timeout
        queues = await self.message_queues(out.topic) if mq is None else [mq]
        last_error: BaseException | None = None
        avoid: str | None = None
        tried = 0
        chosen = mq
        for _ in range(attempts):
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            if chosen is None or not same_broker:
                chosen = self._select(out.topic, queues, avoid)
            tried += 1
            try:
                return await self._send_to(out, chosen, remaining)
            except (BrokerError, RemotingError, NoRouteError) as exc:
                last_error = exc
                if not exc.retriable:
                    break
                if isinstance(exc, BrokerError):
                    if _queue_gone(exc) and not pinned:
                        # The topic lost queues (or a borrowed TBW102 route guessed too many):
                        # the next attempt picks from a fresh route, on the same broker if
                        # the caller asked for that.
                        await self.instance.update_route(out.topic)
                        queues = await self.message_queues(out.topic)
                        chosen = self._same_broker_queue(out.topic, queues, chosen) if same_broker else None
                        continue
                    self.fault.update(chosen.broker_name, 0, isolation=True)
            log.debug("send to %s failed (attempt %d): %s", chosen, tried, last_error)
            avoid = chosen.broker_name
            if not same_broker and mq is None:
                queues = await self.message_queues(out.topic)
        if last_error is None:
            last_error = TimeoutError(f"send timeout {self.send_timeout}s elapsed")
        raise SendError(out.topic, tried, last_error)

    def _same_broker_queue(self, topic: str, queues: list[MessageQueue], was: MessageQueue) -> MessageQueue:
        mine = [q for q in queues if q.broker_name == was.broker_name]
        return self._select(topic, mine or queues, None)

    async def send(self, msg: Message) -> SendResult:
        """Send and wait for the broker's answer; retried up to retry_times_when_send_failed
        times, each time on another broker when there is one. With auto_batch, concurrent
        sends to one topic may share a request; each still gets its own result."""
        self.require_running("send")
        out = self._prepare(msg)
        return await self._accumulate(out, self._send_sync_path(out))

    def _send_sync_path(self, out: Outgoing) -> Callable[[], Awaitable[SendResult]]:
        return lambda: self._send_with_retries(
            out, 1 + self.retry_times_when_send_failed, same_broker=False
        )

    def _accumulate(
        self, out: Outgoing, alone: Callable[[], Awaitable[SendResult]]
    ) -> asyncio.Future[SendResult]:
        """A future for `out`'s result: through a batch when it may join one, else `alone`."""
        if not (self.auto_batch.enabled and batchable(out)):
            return asyncio.ensure_future(alone())
        future: asyncio.Future[SendResult] = asyncio.get_running_loop().create_future()
        self._accumulator.add(out.topic, out, out.uniq_id, future, alone)
        return future

    async def _send_accumulated(self, batch: EntryBatch) -> SendResult:
        out = Outgoing(batch.topic, batch.body(), 0, 0, "", ",".join(batch.ids), True)
        return await self._send_with_retries(
            out, 1 + self.retry_times_when_send_failed, same_broker=False
        )

    async def send_to_queue(self, msg: Message, mq: MessageQueue) -> SendResult:
        self.require_running("send")
        out = self._prepare(msg)
        self._topics.add(msg.topic)
        return await self._send_with_retries(out, 1, same_broker=True, mq=mq, pinned=True)

    async def send_batch(self, msgs: Sequence[Message]) -> SendResult:
        """Several messages of one topic in one request, stored in one queue consecutively."""
        self.require_running("send")
        out = self._prepare_batch(msgs)
        return await self._send_with_retries(
            out, 1 + self.retry_times_when_send_failed, same_broker=False
        )

    async def send_encoded_batch(self, topic: str, body: bytes, uniq_ids: str) -> SendResult:
        """send_batch of entries already encoded (see Outgoing._prepare_encoded_batch)."""
        self.require_running("send")
        out = self._prepare_encoded_batch(topic, body, uniq_ids)
        return await self._send_with_retries(
            out, 1 + self.retry_times_when_send_failed, same_broker=False
        )

    async def send_orderly(
        self, msg: Message, sharding_key: object, *, selector: QueueSelector | None = None
    ) -> SendResult:
        """Messages with the same sharding key go to the same queue, so an orderly consumer
        sees them in send order. No retry on another queue: that would break the order."""
        self.require_running("send")
        out = self._prepare(msg)
        queues = await self.message_queues(msg.topic)
        if selector is not None:
            mq = selector(list(queues), msg, sharding_key)
        else:
            mq = queues[hash_queue_index(sharding_key, len(queues))]
        try:
            return await self._send_to(out, mq, self.send_timeout)
        except (BrokerError, RemotingError, NoRouteError) as exc:
            raise SendError(msg.topic, 1, exc) from exc

    def send_async(self, msg: Message) -> asyncio.Future[SendResult]:
        """Start a send; retries stay on the broker first chosen (RocketMQ's async rule). With
        auto_batch, sends made in the same loop turn share requests."""
        self.require_running("send")
        out = self._prepare(msg)
        return self._accumulate(out, lambda: self._send_async(out))

    def start_prepared(self, out: Outgoing, result: concurrent.futures.Future[SendResult]) -> None:
        """send_async for the blocking producer, on the loop: `result` (the caller's future,
        running) is settled by the batch the message joins, or by its own send."""
        if self.state is State.SHUTDOWN:
            # Handed over just before shutdown began, but reached the loop after the drain.
            result.set_exception(ClientClosedError(self.kind, "send"))
            return
        if self.auto_batch.enabled and batchable(out):
            # No closure for the path alone: the accumulator's default sender (_send_async)
            # takes the entry itself; fewer objects per message for the collector to visit.
            self._accumulator.add(out.topic, out, out.uniq_id, result)
        else:
            asyncio.ensure_future(self._send_async(out)).add_done_callback(copy_to(result))

    def _send_entry_async(self, topic: str, flag: int, body: bytes, props: bytes,
                          uniq: str) -> Awaitable[SendResult]:
        return self._send_async(entry_outgoing(topic, flag, body, props, uniq))

    def open_lane(self, wake: Callable[[Callable[[], None]], object]) -> Lane | None:
        """A lane for the blocking producer's send_async (see sendbatch), or None where its
        sends must take the loop's accumulator (auto-batching off: each message on its own).
        `wake(f)` has the loop call f soon; the lane asks for that once per burst and, with a
        linger, again when a batch fills."""
        cfg = self.auto_batch
        if not cfg.enabled:
            return None
        take = self._take_lane
        self._lane = Lane(lambda: wake(take), uniq_id_generator(), max_bytes=cfg.max_bytes,
                          max_messages=cfg.max_messages, compress_over=self.compress_over,
                          wake_when_full=cfg.max_delay_ms > 0)
        return self._lane

    def _take_lane(self) -> None:
        """The lane's batches: all of them, or with a linger the full ones now and the open
        ones once the first of them has waited the linger out (Kafka's linger.ms)."""
        lane = self._lane
        if lane is None:
            return
        linger_ms = self.auto_batch.max_delay_ms
        if linger_ms <= 0 or self._closing:
            self._take_lane_all()
            return
        if self._linger is None:
            self._linger = asyncio.get_running_loop().call_later(linger_ms / 1000, self._take_lane_all)
        self._deliver(lane.take(full_only=True))

    def _take_lane_all(self) -> None:
        if self._linger is not None:
            self._linger.cancel()
            self._linger = None
        if self._lane is not None:
            self._deliver(self._lane.take())

    def _deliver(self, batches: list[EntryBatch]) -> None:
        deliver = self._accumulator.deliver
        for batch in batches:
            deliver(batch)

    async def _send_async(self, out: Outgoing) -> SendResult:
        queues = await self.message_queues(out.topic)
        mq = self._select(out.topic, queues, None)
        return await self._send_with_retries(
            out, 1 + self.retry_times_when_send_async_failed, same_broker=True, mq=mq
        )

    async def send_oneway(self, msg: Message) -> None:
        """Fire and forget: no answer, no retry."""
        self.require_running("send")
        out = self._prepare(msg)
        queues = await self.message_queues(out.topic)
        mq = self._select(out.topic, queues, None)
        addr = await self.instance.find_broker_addr(mq.broker_name, out.topic)
        if addr is None:
            raise NoRouteError(out.topic, self.namesrv, f"broker {mq.broker_name!r} has no address")
        try:
            await self.instance.api.send_oneway(addr, self._header(out, mq), out.body)
        except RemotingError as exc:
            raise SendError(out.topic, 1, exc) from exc


def _queue_gone(exc: BrokerError) -> bool:
    """The broker's answer when a send names a queue id the topic does not have."""
    return exc.code == ResponseCode.SYSTEM_ERROR and "is illegal" in (exc.remark or "")


def batchable(out: Outgoing) -> bool:
    """What a SEND_BATCH_MESSAGE may carry: no compression flag (it is per request), no delay,
    no retry-topic counters (they travel in the request header)."""
    return (
        not out.batch
        and out.sys_flag == 0
        and out.reconsume_times is None
        and P.PROPERTY_DELAY_TIME_LEVEL not in out.properties
    )
