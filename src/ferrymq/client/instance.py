"""The per-process client instance (RocketMQ's MQClientInstance): one remoting client, one
route cache and one heartbeat shared by the producers and consumers of a process.

Each instance has a client id `ip@pid#n`. Two consumers of the same group cannot share an
instance (the broker would see one member), so the registry hands the second one a new
instance; everything else that asks with the same settings shares."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import os
import socket
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Protocol

from ..acl.signing import Credentials, signer_for
from ..common import jsonx
from ..common import props as P
from ..common.addrs import split_addrs
from ..common.codes import RequestCode, ResponseCode
from ..common.errors import FerryMQError
from ..common.message import MessageExt, MessageQueue
from ..common.names import MASTER_ID
from ..common.record import MessageDecodeError, decode_records
from ..remoting import (
    ClientConfig,
    Connection,
    RemotingClient,
    RemotingClosedError,
    RemotingCommand,
    RemotingConnectError,
    RemotingError,
)
from ..remoting.tls import TlsClientSettings
from .api import MQClientAPI, mq_from_key
from .errors import NoPermissionError, TlsRequiredError
from .loop import LoopThread
from .route import TopicRoute, read_addr

log = logging.getLogger("ferrymq.client")


@dataclass(frozen=True, slots=True)
class InstanceConfig:
    namesrv: str
    route_refresh_interval: float = 30.0
    heartbeat_interval: float = 30.0
    request_timeout: float = 3.0
    # While a broker group's master is missing from a route (it died; reads go to a slave), the
    # route is fetched again at most this often, so reads move back soon after it returns.
    master_recheck_interval: float = 1.0
    # ACL: every request is signed with these (instances with other credentials are not shared).
    credentials: Credentials | None = None
    # TLS to name servers and brokers (docs/security.md); resolved when the client is made.
    tls: TlsClientSettings = field(default_factory=TlsClientSettings)


class ProducerMember(Protocol):
    group: str

    def topics(self) -> set[str]: ...


class ConsumerMember(Protocol):
    group: str

    def topics(self) -> set[str]: ...

    def heartbeat_data(self) -> dict[str, Any]: ...

    def trigger_rebalance(self) -> None: ...

    async def reset_offsets(self, topic: str, offsets: dict[MessageQueue, int]) -> None: ...

    def running_info(self) -> dict[str, Any]: ...

    async def consume_directly(self, msg: MessageExt, broker: str) -> dict[str, Any]: ...


def local_ip(namesrv: str) -> str:
    """The address this host uses to reach the name server: what brokers will see as ours.
    A UDP connect sends nothing; it only asks the kernel for the route."""
    host = split_addrs(namesrv)[0].rsplit(":", 1)[0]
    with contextlib.suppress(OSError), socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.connect((host, 9))
        ip: str = s.getsockname()[0]
        return ip
    return "127.0.0.1"


class ClientInstance:
    def __init__(self, config: InstanceConfig, index: int) -> None:
        self.config = config
        self.client_id = f"{local_ip(config.namesrv)}@{os.getpid()}#{index}"
        self.remoting = RemotingClient(ClientConfig(tls=config.tls), signer=signer_for(config.credentials))
        self.api = MQClientAPI(self.remoting, config.namesrv, timeout=config.request_timeout)
        self.routes: dict[str, TopicRoute] = {}
        self._route_fetches: dict[str, asyncio.Future[TopicRoute | None]] = {}
        self._master_rechecked: dict[str, float] = {}  # topic -> monotonic time of the fetch
        # Why the last route lookup reached no name server (None once one answers): a missing
        # route is then reported as what it is, an unreachable name server.
        self.namesrv_failure: BaseException | None = None
        self.broker_addrs: dict[str, dict[int, str]] = {}
        self.producers: dict[str, ProducerMember] = {}
        self.consumers: dict[str, ConsumerMember] = {}
        self.reserved: set[tuple[str, str]] = set()  # ("P"|"C", group), guarded by _registry_lock
        self._tasks: list[asyncio.Task[None]] = []
        self._heartbeat_lock: asyncio.Lock | None = None
        self.closed = False
        for code, handler in (
            (RequestCode.NOTIFY_CONSUMER_IDS_CHANGED, self._on_ids_changed),
            (RequestCode.RESET_CONSUMER_CLIENT_OFFSET, self._on_reset_offset),
            (RequestCode.GET_CONSUMER_RUNNING_INFO, self._on_running_info),
            (RequestCode.CONSUME_MESSAGE_DIRECTLY, self._on_consume_directly),
            (RequestCode.CHECK_TRANSACTION_STATE, self._on_check_transaction),
        ):
            self.remoting.register(code, handler)

    # --- lifecycle ---------------------------------------------------------------------------
    def ensure_started(self) -> None:
        if not self._tasks:
            self._heartbeat_lock = asyncio.Lock()
            self._tasks = [
                asyncio.create_task(self._route_loop(), name=f"ferrymq-routes-{self.client_id}"),
                asyncio.create_task(
                    self._heartbeat_loop(), name=f"ferrymq-heartbeat-{self.client_id}"
                ),
            ]

    async def close(self) -> None:
        self.closed = True
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self._tasks = []
        await self.remoting.close()

    def register_producer(self, member: ProducerMember) -> None:
        self.producers[member.group] = member
        self.ensure_started()

    def register_consumer(self, member: ConsumerMember) -> None:
        self.consumers[member.group] = member
        self.ensure_started()

    async def unregister(
        self, *, producer_group: str | None = None, consumer_group: str | None = None
    ) -> None:
        """Tell every broker the member is gone (so the group rebalances at once)."""
        if producer_group is not None:
            self.producers.pop(producer_group, None)
        if consumer_group is not None:
            self.consumers.pop(consumer_group, None)
        addrs = self.all_broker_addrs()
        await asyncio.gather(
            *(self._unregister_at(a, producer_group, consumer_group) for a in addrs)
        )

    async def _unregister_at(
        self, addr: str, producer_group: str | None, consumer_group: str | None
    ) -> None:
        try:
            await self.api.unregister_client(
                addr, self.client_id, producer_group=producer_group, consumer_group=consumer_group
            )
        except (RemotingConnectError, RemotingClosedError, NoPermissionError) as exc:
            # A broker that is gone has dropped the client with its connections, and one that
            # refuses the request has already said so when it refused the client's work.
            log.debug("unregister %s from %s failed: %s", self.client_id, addr, exc)
        except FerryMQError as exc:
            log.warning("unregister %s from %s failed: %s", self.client_id, addr, exc)

    # --- routes ------------------------------------------------------------------------------
    async def update_route(self, topic: str) -> TopicRoute | None:
        """Fetch the route; a failed fetch keeps the previous one (the name server may be
        briefly unreachable, the brokers are not). Concurrent callers share one fetch, so a
        burst of first sends all see the topic's real route."""
        pending = self._route_fetches.get(topic)
        if pending is None:
            pending = asyncio.ensure_future(self._fetch_route(topic))
            self._route_fetches[topic] = pending
            pending.add_done_callback(lambda _f: self._route_fetches.pop(topic, None))
        return await asyncio.shield(pending)

    def route_fetch_pending(self, topic: str) -> bool:
        return topic in self._route_fetches

    async def _fetch_route(self, topic: str) -> TopicRoute | None:
        try:
            route = await self.api.get_route(topic)
        except RemotingError as exc:
            # A TLS-only name server answers the first plain request with why it refuses and
            # closes: the requests after it only see the connection closed, which says less.
            if not isinstance(self.namesrv_failure, TlsRequiredError):
                self.namesrv_failure = exc
            log.debug("route for %s not refreshed: %s", topic, exc)
            return self.routes.get(topic)
        except TlsRequiredError as exc:
            self.namesrv_failure = exc
            log.debug("route for %s not refreshed: %s", topic, exc)
            return self.routes.get(topic)
        except FerryMQError as exc:
            log.debug("route for %s not refreshed: %s", topic, exc)
            return self.routes.get(topic)
        self.namesrv_failure = None
        if route is None:
            return self.routes.get(topic)
        self.routes[topic] = route
        for bd in route.broker_datas:
            self.broker_addrs[bd.broker_name] = dict(bd.broker_addrs)
        return route

    async def route(self, topic: str) -> TopicRoute | None:
        route = self.routes.get(topic)
        if route is None:
            route = await self.update_route(topic)
        return route

    def master_addr(self, broker_name: str) -> str | None:
        return self.broker_addrs.get(broker_name, {}).get(0)

    async def find_broker_addr(self, broker_name: str, topic: str | None = None) -> str | None:
        """The group's master, else (it is away) a slave: slaves serve reads and take commits."""
        return await self.find_read_addr(broker_name, topic, MASTER_ID)

    async def find_read_addr(
        self, broker_name: str, topic: str | None, suggested: int
    ) -> str | None:
        """Where to read `broker_name`: the suggested broker id when the route lists it, else
        the master, else any slave. A route without the master is fetched again (at most every
        master_recheck_interval), so reads go back to the master once it is listed again."""
        if self.master_addr(broker_name) is None and topic is not None:
            now = time.monotonic()
            if now - self._master_rechecked.get(topic, -1e9) >= self.config.master_recheck_interval:
                self._master_rechecked[topic] = now
                await self.update_route(topic)
        return read_addr(self.broker_addrs.get(broker_name) or {}, suggested)

    async def after_failure(self, topic: str, exc: BaseException) -> bool:
        """A request to a broker failed. When the broker is gone (connection refused or closed
        under the request) the name server has likely dropped it already: fetch the route now
        rather than at the next periodic refresh. True when the route was fetched."""
        if not isinstance(exc, RemotingConnectError | RemotingClosedError) or self.closed:
            return False
        self._master_rechecked[topic] = time.monotonic()
        await self.update_route(topic)
        return True

    def all_broker_addrs(self) -> list[str]:
        return sorted({a for addrs in self.broker_addrs.values() for a in addrs.values()})

    async def _route_loop(self) -> None:
        while True:
            await asyncio.sleep(self.config.route_refresh_interval)
            topics: set[str] = set()
            for member in list(self.producers.values()) + list(self.consumers.values()):
                topics |= member.topics()
            for topic in sorted(topics):
                await self.update_route(topic)

    # --- heartbeat ---------------------------------------------------------------------------
    def heartbeat_data(self) -> dict[str, Any]:
        return {
            "clientID": self.client_id,
            "producerDataSet": [{"groupName": g} for g in sorted(self.producers)],
            "consumerDataSet": [c.heartbeat_data() for c in self.consumers.values()],
        }

    async def heartbeat_now(self) -> bool:
        """Heartbeat every known broker; True if at least one took it."""
        assert self._heartbeat_lock is not None
        async with self._heartbeat_lock:
            if not self.producers and not self.consumers:
                return False
            data = self.heartbeat_data()
            addrs = self.all_broker_addrs()
            results = await asyncio.gather(*(self._heartbeat_at(a, data) for a in addrs))
            return any(results)

    async def _heartbeat_at(self, addr: str, data: dict[str, Any]) -> bool:
        try:
            await self.api.heartbeat(addr, data)
            return True
        except FerryMQError as exc:
            log.warning("heartbeat to %s failed: %s", addr, exc)
            return False

    async def _heartbeat_loop(self) -> None:
        while True:
            await asyncio.sleep(self.config.heartbeat_interval)
            try:
                await self.heartbeat_now()
            except Exception:
                log.exception("heartbeat round failed")

    # --- requests from brokers ---------------------------------------------------------------
    async def _on_ids_changed(
        self, conn: Connection, req: RemotingCommand
    ) -> RemotingCommand | None:
        group = req.ext_fields.get("consumerGroup", "")
        consumer = self.consumers.get(group)
        if consumer is not None:
            log.debug("%s: members of %s changed; rebalancing", self.client_id, group)
            consumer.trigger_rebalance()
        return None

    async def _on_reset_offset(
        self, conn: Connection, req: RemotingCommand
    ) -> RemotingCommand | None:
        ext = req.ext_fields
        consumer = self.consumers.get(ext.get("group", ""))
        if consumer is not None and req.body:
            try:
                table = jsonx.loads(req.body).get("offsetTable") or {}
                offsets = {mq_from_key(k): int(v) for k, v in table.items()}
            except (ValueError, KeyError, TypeError) as exc:
                log.warning("bad RESET_CONSUMER_CLIENT_OFFSET body: %s", exc)
                return None
            await consumer.reset_offsets(ext.get("topic", ""), offsets)
        return None

    async def _on_running_info(
        self, conn: Connection, req: RemotingCommand
    ) -> RemotingCommand | None:
        consumer = self.consumers.get(req.ext_fields.get("consumerGroup", ""))
        if consumer is None:
            return RemotingCommand.make_response_to(
                req,
                ResponseCode.SYSTEM_ERROR,
                remark="the consumer group does not exist in this client",
            )
        body = jsonx.dumps_bytes(consumer.running_info())
        return RemotingCommand.make_response_to(req, ResponseCode.SUCCESS, body=body)

    async def _on_check_transaction(
        self, conn: Connection, req: RemotingCommand
    ) -> RemotingCommand | None:
        """One-way from a broker (ClientRemotingProcessor.checkTransactionState): the producer
        of the half message's group answers later with END_TRANSACTION."""
        try:
            msgs = decode_records(req.body or b"", broker=req.ext_fields.get("brokerName", ""))
        except MessageDecodeError as exc:
            log.warning("bad CHECK_TRANSACTION_STATE body from %s: %s", conn.remote_addr, exc)
            return None
        if not msgs:
            return None
        msg = msgs[0]
        group = msg.properties.get(P.PROPERTY_PRODUCER_GROUP, "")
        check = getattr(self.producers.get(group), "check_transaction_state", None)
        if check is None:
            log.warning("%s: transaction check for group %r, which has no transaction producer here",
                        self.client_id, group)
            return None
        check(conn.remote_addr, msg, req.ext_fields)
        return None

    async def _on_consume_directly(
        self, conn: Connection, req: RemotingCommand
    ) -> RemotingCommand | None:
        ext = req.ext_fields
        consumer = self.consumers.get(ext.get("consumerGroup", ""))
        if consumer is None:
            return RemotingCommand.make_response_to(
                req,
                ResponseCode.SYSTEM_ERROR,
                remark="the consumer group does not exist in this client",
            )
        try:
            msgs = decode_records(req.body or b"", broker=ext.get("brokerName", ""))
        except MessageDecodeError as exc:
            return RemotingCommand.make_response_to(req, ResponseCode.SYSTEM_ERROR, remark=str(exc))
        if not msgs:
            return RemotingCommand.make_response_to(
                req, ResponseCode.SYSTEM_ERROR, remark="no message"
            )
        result = await consumer.consume_directly(msgs[0], ext.get("brokerName", ""))
        return RemotingCommand.make_response_to(
            req, ResponseCode.SUCCESS, body=jsonx.dumps_bytes(result)
        )


# --- sharing -----------------------------------------------------------------------------------
_registry_lock = threading.Lock()
_index = itertools.count(1)
# Async instances live on the caller's loop; blocking ones each own a loop thread.
_async_instances: dict[tuple[int, InstanceConfig], list[ClientInstance]] = {}
_blocking_instances: dict[InstanceConfig, list[tuple[LoopThread, ClientInstance]]] = {}


def _free(inst: ClientInstance, key: tuple[str, str]) -> bool:
    return not inst.closed and key not in inst.reserved


def acquire_async(config: InstanceConfig, kind: str, group: str) -> ClientInstance:
    """An instance on the running loop with no member of ("P"|"C", group) yet; reserves it."""
    loop = asyncio.get_running_loop()
    key = (kind, group)
    with _registry_lock:
        pool = _async_instances.setdefault((id(loop), config), [])
        inst = next((i for i in pool if _free(i, key)), None)
        if inst is None:
            inst = ClientInstance(config, next(_index))
            pool.append(inst)
        inst.reserved.add(key)
        return inst


def acquire_blocking(
    config: InstanceConfig, kind: str, group: str
) -> tuple[LoopThread, ClientInstance]:
    key = (kind, group)
    with _registry_lock:
        pool = _blocking_instances.setdefault(config, [])
        found = next(((t, i) for t, i in pool if _free(i, key)), None)
        if found is None:
            thread = LoopThread()
            index = next(_index)
            # The remoting client binds to the loop it is created on: build it there.
            inst = thread.run(_make(config, index))
            found = (thread, inst)
            pool.append(found)
        found[1].reserved.add(key)
        return found


async def _make(config: InstanceConfig, index: int) -> ClientInstance:
    return ClientInstance(config, index)


async def abandon(inst: ClientInstance, kind: str, group: str) -> bool:
    """A member whose start failed: forget it without telling the brokers anything."""
    (inst.producers if kind == "P" else inst.consumers).pop(group, None)
    return await release(inst, kind, group)


async def release(inst: ClientInstance, kind: str, group: str) -> bool:
    """Drop the reservation; close the instance when nobody uses it. True when closed (a
    blocking caller then stops the loop thread)."""
    with _registry_lock:
        inst.reserved.discard((kind, group))
        last = not inst.reserved
        if last:
            inst.closed = True
            for pool in _async_instances.values():
                if inst in pool:
                    pool.remove(inst)
            for bpool in _blocking_instances.values():
                for entry in list(bpool):
                    if entry[1] is inst:
                        bpool.remove(entry)
    if last:
        await inst.close()
    return last
