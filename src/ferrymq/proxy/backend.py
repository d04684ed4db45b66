"""The Backend of `ferrymq proxy` (RocketMQ 5's cluster mode): every broker group a topic's
route lists, reached over remoting through one client instance (its route cache, connections,
heartbeats and the brokers' requests back).

Nothing is kept here that a restart would lose: a receipt handle carries the broker group that
issued it (RocketMQ's ReceiptHandle: the pop's extraInfo, whose fields name the broker), so an
acknowledgement reaches that broker through any proxy; a transaction id carries the group and
the half message's position."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Coroutine, Mapping
from typing import Any, TypeVar

from ..broker.clients import ClientRegistry, Subscription
from ..client import pop_api
from ..client.errors import BrokerError, NameServerUnreachableError
from ..client.fault import LatencyFaultTolerance
from ..client.instance import ClientInstance
from ..client.route import TopicRoute
from ..common import props as P
from ..common import topic_types
from ..common.codes import RequestCode, ResponseCode
from ..common.errors import FerryMQError
from ..common.headers import fields
from ..common.ids import MessageIdError, decode_offset_msg_id
from ..common.message import MessageExt
from ..common.popinfo import PROPERTY_FIRST_POP_TIME, PROPERTY_POP_CK, ExtraInfo, ExtraInfoError, parse_extra_info
from ..common.record import encode_batch
from ..grpc.backend import Delivery, Limits, PutAnswer, TopicGroup
from ..grpc.budget import Deadline
from ..grpc.convert import outgoing
from ..grpc.pb import definition_pb2 as pb
from ..grpc.pb import service_pb2 as spb
from ..grpc.settings import ServerSettings
from ..grpc.status import Code, GrpcStatusError, response_code
from ..remoting import RemotingError
from ..store import StoreMessage
from .brokers import BrokerSettings
from .defaults import ROUTE_REFRESH_S, SEND_ISOLATION_S
from .queues import ClusterQueues

log = logging.getLogger("ferrymq.proxy")
T = TypeVar("T")
Kinds = dict[str, tuple[bool, str | None]]  # (order topic, message type) by broker group

_HANDLE_VERSION = "p1"
_TXID_VERSION = "pt1"
# ConsumeInitMode.MAX, as the broker's own endpoint pops (a young queue starts at 0).
_INIT_MAX = 1
# MessageSysFlag: a half message, and END_TRANSACTION's commit / rollback types.
_TRANSACTION_PREPARED = 0x4
_COMMIT, _ROLLBACK = 0x8, 0xC

def encode_handle(commit_log_offset: int, extra_info: str) -> str:
    return f"{_HANDLE_VERSION} {commit_log_offset} {extra_info}"


def _decode_handle(text: str) -> tuple[int, str]:
    parts = text.split(" ", 2)
    if len(parts) != 3 or parts[0] != _HANDLE_VERSION:
        raise GrpcStatusError(Code.INVALID_RECEIPT_HANDLE, f"receipt handle {text!r} is not one a proxy issued")
    try:
        return int(parts[1]), parts[2]
    except ValueError:
        raise GrpcStatusError(Code.INVALID_RECEIPT_HANDLE, f"receipt handle {text!r} is malformed") from None


def encode_transaction_id(broker_name: str, half_offset: int, commit_log_offset: int, msg_id: str) -> str:
    return f"{_TXID_VERSION} {broker_name} {half_offset} {commit_log_offset} {msg_id}"


def _decode_transaction_id(text: str) -> tuple[str, int, int, str]:
    parts = text.split(" ")
    if len(parts) != 5 or parts[0] != _TXID_VERSION:
        raise GrpcStatusError(Code.INVALID_TRANSACTION_ID, f"transaction id {text!r} is not one a proxy issued")
    try:
        return parts[1], int(parts[2]), int(parts[3]), parts[4]
    except ValueError:
        raise GrpcStatusError(Code.INVALID_TRANSACTION_ID, f"transaction id {text!r} is malformed") from None


def _refused(exc: FerryMQError) -> GrpcStatusError:
    """A broker's refusal, or a broker out of reach, as the status the SDK sees."""
    if isinstance(exc, BrokerError):
        return GrpcStatusError(response_code(exc.code), exc.remark or str(exc))
    return GrpcStatusError(Code.PROXY_TIMEOUT, str(exc))


class _TopicProducer:
    """The proxy's member of producer group <topic> (a gRPC producer's group is its topic, as
    RocketMQ's proxy sets it): heartbeats make the brokers send it their transaction checks,
    which go to a producer of the topic with an open telemetry stream."""

    def __init__(self, topic: str, backend: ClusterBackend) -> None:
        self.group = topic
        self._backend = backend

    def topics(self) -> set[str]:
        return {self.group}

    def check_transaction_state(self, broker_addr: str, msg: MessageExt, header: Mapping[str, str]) -> None:
        self._backend.transaction_check(self.group, broker_addr, msg, header)


class _Registry(ClientRegistry):
    """The proxy's gRPC clients by group; a producer's topic makes the proxy a member of the
    topic's producer group on the brokers."""

    def __init__(self, backend: ClusterBackend, channel_expired_ms: int) -> None:
        super().__init__(channel_expired_ms=channel_expired_ms)
        self._backend = backend

    def register_producer(self, group: str, channel: Any) -> None:
        super().register_producer(group, channel)
        self._backend.join_producer_group(group)


class ClusterBackend(ClusterQueues):
    def __init__(self, instance: ClientInstance, *, channel_expired_ms: int = 120_000,
                 send_isolation_s: float = SEND_ISOLATION_S, route_ttl_s: float = ROUTE_REFRESH_S) -> None:
        self._inst = instance
        self._faults = LatencyFaultTolerance(isolation_seconds=send_isolation_s)
        self._ttl_s = route_ttl_s
        # The brokers' own settings, learned from their masters (brokers.py).
        self.brokers = BrokerSettings(instance, route_ttl_s)
        self._registry = _Registry(self, channel_expired_ms)
        self._fetched: dict[str, float] = {}
        self._tasks: set[asyncio.Task[Any]] = set()  # background lookups
        self._groups: dict[str, tuple[float, TopicRoute, list[TopicGroup]]] = {}
        self._joins: set[asyncio.Task[bool]] = set()
        self._kind_cache: dict[str, tuple[float, Kinds]] = {}
        self._kind_refresh: dict[str, asyncio.Task[Kinds]] = {}
        self.counts = {"sent": 0, "received": 0, "acked": 0}
        self.send_failures: dict[str, int] = {}  # by broker group

    @property
    def limits(self) -> Limits:
        return self.brokers.limits

    @property
    def settings(self) -> ServerSettings:
        """What clients are told on their telemetry stream, from the brokers' settings."""
        return self.brokers.settings

    @property
    def registry(self) -> ClientRegistry:
        return self._registry

    @property
    def translate(self) -> Callable[[Any], spb.TelemetryCommand | None]:
        # The brokers' notices reach the client instance, not the sessions (transaction_check).
        return lambda _req: None

    def now_ms(self) -> int:
        return int(time.time() * 1000)

    # --- routes ----------------------------------------------------------------------------
    # A route and its groups' configs are kept and fetched again in the background once their
    # time-to-live has passed, the ones in hand serving meanwhile, as RocketMQ's proxy
    # refreshes its route cache: a request waits on the name server or a master only for a
    # topic's first route and configs, or a group's master after a failover, and then no
    # longer than the client's deadline. A slow or frozen name server holds nothing else up.
    def _spawn(self, work: Coroutine[Any, Any, T]) -> asyncio.Task[T]:
        """Background work the proxy keeps a hold of until it ends (close() cancels it); a
        failure is logged, not left unretrieved."""
        task = asyncio.get_running_loop().create_task(work)
        self._tasks.add(task)
        task.add_done_callback(self._reap)
        return task

    def _reap(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.warning("a route or config lookup failed: %r", task.exception())

    async def close(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*list(self._tasks), return_exceptions=True)

    def _refresh_if_stale(self, topic: str) -> None:
        now = time.monotonic()
        if now - self._fetched.get(topic, -1e9) < self._ttl_s or self._inst.route_fetch_pending(topic):
            return
        self._fetched[topic] = now
        self._spawn(self._inst.update_route(topic))

    async def _within(self, work: Coroutine[Any, Any, T] | asyncio.Task[T], timeout_s: float | None,
                      what: str) -> T:
        """A lookup a request waits on, held to the client's deadline (None: none). The lookup
        itself goes on whatever the deadline (a task of its own): it serves the next request."""
        if timeout_s is None:
            return await work
        task = work if isinstance(work, asyncio.Task) else self._spawn(work)
        try:
            return await asyncio.wait_for(asyncio.shield(task), self._timeout(timeout_s, what))
        except TimeoutError:
            raise GrpcStatusError(Code.PROXY_TIMEOUT, f"the client's deadline passed waiting for {what}") from None

    async def topic(self, name: str, *, timeout_s: float | None = None) -> list[TopicGroup]:
        # Every send, receive and ack asks: the groups are kept for the time-to-live while the
        # client instance holds the same route (a refresh or a failure's refetch replaces it).
        now = time.monotonic()
        cached = self._groups.get(name)
        route = self._inst.routes.get(name)
        if route is not None:
            self._refresh_if_stale(name)
            if cached is not None and route is cached[1] and now - cached[0] < self._ttl_s:
                return cached[2]
        self.brokers.refresh()
        deadline = Deadline(timeout_s)  # the route's lookup, then the configs', share it
        if route is None:
            self._fetched[name] = now
            route = await self._within(self._inst.update_route(name), deadline.left(), f"the route of {name}")
        if route is None:
            self._groups.pop(name, None)
            failure = self._inst.namesrv_failure
            if failure is not None:
                # No route because no name server answered: saying TOPIC_NOT_FOUND would send
                # the user looking for a topic that may well exist.
                raise GrpcStatusError(Code.PROXY_TIMEOUT,
                                      str(NameServerUnreachableError(name, self._inst.config.namesrv, failure)))
            return []
        masters = route.brokers
        kinds = await self._kinds(name, masters, deadline.left())
        groups = [TopicGroup(name, q.broker_name, q.perm, q.read_queue_nums, q.write_queue_nums,
                             *kinds.get(q.broker_name, (False, None)))
                  for q in route.queue_datas if q.broker_name in masters]
        self._groups[name] = (time.monotonic(), route, groups)
        return groups

    async def _kinds(self, topic: str, masters: Mapping[str, str], timeout_s: float | None) -> Kinds:
        """Each group's (order topic, message type) of the topic: a route says neither, so the
        groups' masters are asked (GET_TOPIC_CONFIG, as RocketMQ's proxy reads a topic's
        config). A topic's first request waits for the answers; after that they are asked
        again in the background (once the time-to-live has passed, or the route names a group
        they did not cover, which meanwhile is taken to be of the other groups' kind)."""
        cached = self._kind_cache.get(topic)
        if cached is None:
            return await self._within(self._refresh_kinds(topic, masters), timeout_s, f"the configs of {topic}")
        stamp, kinds = cached
        if kinds.keys() != masters.keys() or time.monotonic() - stamp >= self._ttl_s:
            self._refresh_kinds(topic, masters)
        if kinds.keys() >= masters.keys():
            return kinds
        guess = next(iter(kinds.values()), (False, None))
        return {n: kinds.get(n, guess) for n in masters}

    def _refresh_kinds(self, topic: str, masters: Mapping[str, str]) -> asyncio.Task[Kinds]:
        """The fetch in flight for the topic, else a new one (concurrent requests share it)."""
        task = self._kind_refresh.get(topic)
        if task is None:
            self._kind_refresh[topic] = task = self._spawn(self._fetch_kinds(topic, dict(masters)))
            task.add_done_callback(lambda _t: self._kind_refresh.pop(topic, None))
        return task

    async def _fetch_kinds(self, topic: str, masters: Mapping[str, str]) -> Kinds:
        now = time.monotonic()
        before = self._kind_cache.get(topic, (now, {}))[1]
        names = sorted(masters)
        answers = await asyncio.gather(*(self._inst.api.topic_config(masters[n], topic) for n in names),
                                       return_exceptions=True)
        kinds: Kinds = {}
        for n, a in zip(names, answers, strict=True):
            if isinstance(a, dict):
                order = bool(a.get("order"))
                kinds[n] = (order, topic_types.topic_type(a.get("attributes") or {}, order))
            else:
                # Not answered: what it said last, else left to its broker (type None).
                kinds[n] = before.get(n, (False, None))
        self._kind_cache[topic] = (now, kinds)
        return kinds

    async def _master(self, broker_name: str, topic: str, timeout_s: float | None = None) -> str:
        addr = self._inst.master_addr(broker_name)
        if addr is None:
            await self._within(self._inst.update_route(topic), timeout_s, f"the route of {topic}")
            addr = self._inst.master_addr(broker_name)
        if addr is None:
            raise GrpcStatusError(Code.PROXY_TIMEOUT,
                                  f"broker group {broker_name} has no master in the route of {topic}")
        return addr

    async def _failed(self, topic: str, exc: BaseException, timeout_s: float | None = None) -> None:
        # A broker gone under a request: the name server's new route is fetched, and the failed
        # request's answer waits for it while the client's deadline allows, so that its retry
        # goes where the route now says (a fetch not done in time serves the next request).
        with contextlib.suppress(GrpcStatusError):
            await self._within(self._inst.after_failure(topic, exc), timeout_s, f"the route of {topic}")

    # --- send ------------------------------------------------------------------------------
    def send_isolated(self, broker_name: str) -> bool:
        return not self._faults.is_available(broker_name)

    async def put(self, topic: TopicGroup, queue_id: int, msgs: list[StoreMessage], *, half: bool,
                  timeout_s: float | None = None) -> PutAnswer:
        api = self._inst.api
        deadline = Deadline(timeout_s)  # the lookup of a new master, then the put, share it
        try:
            addr = await self._master(topic.broker_name, topic.topic, deadline.left())
            timeout = self._timeout(deadline.left(), "send")
        except GrpcStatusError as exc:
            return PutAnswer(exc.code, exc.message)
        batch = len(msgs) > 1
        first = msgs[0]
        props = first.properties if isinstance(first.properties, dict) else {}
        header = {
            "producerGroup": topic.topic, "topic": topic.topic, "defaultTopic": "TBW102",
            "defaultTopicQueueNums": "4", "queueId": str(queue_id),
            "sysFlag": str(_TRANSACTION_PREPARED if half else 0), "bornTimestamp": str(first.born_timestamp),
            "flag": str(first.flag), "properties": "" if batch else P.properties_to_string(props),
            "reconsumeTimes": "0", "unitMode": "false", "batch": "true" if batch else "false",
        }
        body = encode_batch(msgs) if batch else first.body  # type: ignore[arg-type]
        try:
            resp = await api.send(addr, header, body, batch=batch, timeout=timeout)
        except RemotingError as exc:
            # A stopped or frozen broker answers nothing: the next sends go to other groups.
            self._faults.update(topic.broker_name, 0, isolation=True)
            self.send_failures[topic.broker_name] = self.send_failures.get(topic.broker_name, 0) + 1
            await self._failed(topic.topic, exc, deadline.left())
            return PutAnswer(Code.PROXY_TIMEOUT, f"send to broker group {topic.broker_name} ({addr}) failed: {exc}")
        if resp.code != ResponseCode.SUCCESS:
            return PutAnswer(response_code(resp.code), resp.remark or f"send failed: code {resp.code}")
        e = resp.ext_fields
        first_offset = int(e.get("queueOffset", -1))
        offsets = tuple(first_offset + i for i in range(len(msgs)))
        self.counts["sent"] += len(msgs)
        if not half:
            return PutAnswer(Code.OK, offsets=offsets, transaction_ids=("",) * len(msgs))
        msg_id = e.get("msgId", "")
        try:
            commit_log_offset = decode_offset_msg_id(msg_id).offset
        except MessageIdError as exc:
            return PutAnswer(Code.INTERNAL_SERVER_ERROR, f"the broker's answer has no usable msgId: {exc}")
        uniq = props.get(P.PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX, msg_id)
        return PutAnswer(Code.OK, offsets=offsets, transaction_ids=(
            encode_transaction_id(topic.broker_name, first_offset, commit_log_offset, uniq),))

    # --- pop -------------------------------------------------------------------------------
    async def pop(self, group: str, topic: TopicGroup, queue_id: int, *, max_nums: int, invisible_ms: int,
                  sub: Subscription, order: bool, poll_ms: int) -> list[Delivery]:
        addr = await self._master(topic.broker_name, topic.topic)
        try:
            answer = await pop_api.pop(
                self._inst.api, addr, topic.broker_name, group=group, topic=topic.topic, queue_id=queue_id,
                max_nums=max_nums, invisible_ms=invisible_ms, poll_ms=poll_ms, expression=sub.expression,
                expression_type=sub.expression_type, order=order, init_mode=_INIT_MAX)
        except RemotingError as exc:
            await self._failed(topic.topic, exc)
            raise GrpcStatusError(Code.PROXY_TIMEOUT, f"pop from broker group {topic.broker_name} failed: {exc}") \
                from None
        except FerryMQError as exc:
            raise _refused(exc) from None
        self.counts["received"] += len(answer.messages)
        out = []
        for p in answer.messages:
            # What pop_api adds for a 4.x consumer; a gRPC consumer has the receipt handle.
            p.message.properties.pop(PROPERTY_POP_CK, None)
            p.message.properties.pop(PROPERTY_FIRST_POP_TIME, None)
            out.append(Delivery(p.message, encode_handle(p.message.commit_log_offset, p.handle.encode())))
        return out

    async def _handle(self, topic: str, text: str, timeout_s: float | None) -> tuple[str, int, ExtraInfo]:
        commit_log_offset, extra = _decode_handle(text)
        try:
            handle = parse_extra_info(extra)
        except ExtraInfoError as exc:
            raise GrpcStatusError(Code.INVALID_RECEIPT_HANDLE, str(exc)) from None
        return await self._master(handle.broker_name, topic, timeout_s), commit_log_offset, handle

    def _timeout(self, timeout_s: float | None, what: str) -> float:
        """The remoting timeout of a call forwarded with `timeout_s` of the client's deadline
        left: the proxy's own request timeout, cut to that deadline."""
        api_timeout = self._inst.api.timeout
        timeout = api_timeout if timeout_s is None else min(api_timeout, timeout_s)
        if timeout <= 0:
            raise GrpcStatusError(Code.PROXY_TIMEOUT, f"the client's deadline passed before the {what} was forwarded")
        return timeout

    async def ack(self, group: str, topic: str, handle: str, *, timeout_s: float | None = None) -> None:
        deadline = Deadline(timeout_s)
        addr, _, h = await self._handle(topic, handle, deadline.left())
        try:
            await pop_api.ack(self._inst.api, addr, group=group, topic=topic, handle=h,
                              timeout=self._timeout(deadline.left(), "ack"))
        except (RemotingError, FerryMQError) as exc:
            raise _refused(exc) from None
        self.counts["acked"] += 1

    async def change_invisible(self, group: str, topic: str, handle: str, invisible_ms: int, *,
                               timeout_s: float | None = None) -> str:
        deadline = Deadline(timeout_s)
        addr, commit_log_offset, h = await self._handle(topic, handle, deadline.left())
        try:
            renewed = await pop_api.change_invisible(self._inst.api, addr, group=group, topic=topic, handle=h,
                                                     invisible_ms=invisible_ms,
                                                     timeout=self._timeout(deadline.left(),
                                                                           "invisible time's change"))
        except (RemotingError, FerryMQError) as exc:
            raise _refused(exc) from None
        return encode_handle(commit_log_offset, renewed.encode())

    async def forward_to_dlq(self, group: str, topic: str, handle: str, delivery_attempt: int,
                             message_id: str, *, timeout_s: float | None = None) -> None:
        deadline = Deadline(timeout_s)  # the calls share it: each gets what is left
        addr, commit_log_offset, h = await self._handle(topic, handle, deadline.left())
        try:
            # Delay level -1: straight to %DLQ%<group> (RocketMQ's proxy forwards the same way).
            await self._inst.api.consumer_send_back(
                addr, commit_log_offset=commit_log_offset, group=group, delay_level=-1, origin_msg_id=message_id,
                origin_topic=topic, max_reconsume_times=max(delivery_attempt - 1, 0),
                timeout=self._timeout(deadline.left(), "dead-letter copy"))
            await pop_api.ack(self._inst.api, addr, group=group, topic=topic, handle=h,
                              timeout=self._timeout(deadline.left(), "ack"))
        except (RemotingError, FerryMQError) as exc:
            raise _refused(exc) from None

    # --- transactions ----------------------------------------------------------------------
    async def retry_max_times(self, group: str) -> int | None:
        return await self.brokers.retry_max_times(group)

    async def end_transaction(self, topic: str, transaction_id: str, commit: bool) -> tuple[pb.Code, str]:
        broker_name, half_offset, commit_log_offset, msg_id = _decode_transaction_id(transaction_id)
        addr = await self._master(broker_name, topic)
        api = self._inst.api
        try:
            # One-way, as RocketMQ's proxy ends it: a lost one is recovered by the broker's check.
            await api.invoke_oneway(addr, RequestCode.END_TRANSACTION, fields(
                topic=topic, producerGroup=topic, tranStateTableOffset=half_offset,
                commitLogOffset=commit_log_offset, commitOrRollback=_COMMIT if commit else _ROLLBACK,
                fromTransactionCheck=False, msgId=msg_id, transactionId=msg_id, brokerName=broker_name))
        except RemotingError as exc:
            return Code.PROXY_TIMEOUT, f"END_TRANSACTION to {addr} failed: {exc}"
        return Code.OK, ""

    def join_producer_group(self, topic: str) -> None:
        if topic in self._inst.producers:
            return
        self._inst.register_producer(_TopicProducer(topic, self))
        # At once, not at the next heartbeat round: a transaction's check may come before it.
        task = asyncio.get_running_loop().create_task(self._inst.heartbeat_now(), name=f"ferrymq-proxy-join-{topic}")
        self._joins.add(task)
        task.add_done_callback(self._joins.discard)

    def transaction_check(self, topic: str, broker_addr: str, msg: MessageExt, header: Mapping[str, str]) -> None:
        """A broker's check of an open transaction, to one producer of the topic with an open
        telemetry stream (the most recently seen), as the recover-orphaned-transaction command."""
        broker_name = header.get("brokerName") or next(
            (name for name, addrs in self._inst.broker_addrs.items() if broker_addr in addrs.values()), "")
        try:
            txid = encode_transaction_id(broker_name, int(header["tranStateTableOffset"]),
                                         int(header["commitLogOffset"]),
                                         msg.properties.get(P.PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX) or msg.msg_id)
        except (KeyError, ValueError):
            log.warning("transaction check from %s without its offsets: %s", broker_addr, dict(header))
            return
        command = spb.TelemetryCommand(recover_orphaned_transaction_command=spb.RecoverOrphanedTransactionCommand(
            message=outgoing(msg, now_ms=self.now_ms()), transaction_id=txid))
        channels = sorted(self._registry.producers.get(topic, {}).values(), key=lambda c: -c.last_update_ms)
        for channel in channels:
            push = getattr(channel.conn, "push", None)
            if push is not None and push(command):
                return
        log.info("transaction check for topic %s: no producer of it has a telemetry stream here", topic)
