"""The administration client, async core: routes, offsets, single pulls, topics, group
progress, offset reset and message lookups. `AdminClient` (blocking) and
`ferrymq.aio.AdminClient` are this class."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable
from typing import Any

from ..common.errors import FerryMQError
from ..common.headers import PERM_READ, PERM_WRITE
from ..common.ids import decode_offset_msg_id
from ..common.message import MessageExt, MessageQueue
from ..common.names import TOOLS_CONSUMER_GROUP, retry_topic, validate_topic
from ..common.record import decode_records
from ..remoting import ClientConfig, RemotingClient
from .api import MQClientAPI, mq_from_key, pull_sys_flag
from .errors import ClientStateError, MessageNotFoundError, NoRouteError
from .results import (
    ConsumerConnectionInfo,
    ConsumerConnections,
    PullResult,
    QueueProgress,
    QueueStatus,
    RawPullResult,
)
from .route import TopicRoute


class AsyncAdminClient:
    """Stateless apart from a route cache; every call is one or a few requests. Use it as an
    async context manager, or call close()."""

    def __init__(
        self, namesrv: str = "127.0.0.1:9876", *, timeout: float = 3.0, route_ttl: float = 5.0
    ) -> None:
        self.namesrv = namesrv
        self.timeout = timeout
        self.route_ttl = route_ttl
        self._remoting: RemotingClient | None = None
        self._api: MQClientAPI | None = None
        self._routes: dict[str, tuple[float, TopicRoute]] = {}
        self._closed = False

    @property
    def api(self) -> MQClientAPI:
        if self._closed:
            raise ClientStateError("AdminClient", "closed", "send requests")
        if self._api is None:
            self._remoting = RemotingClient(ClientConfig())
            self._api = MQClientAPI(self._remoting, self.namesrv, timeout=self.timeout)
        return self._api

    async def close(self) -> None:
        self._closed = True
        if self._remoting is not None:
            await self._remoting.close()
            self._remoting = None
            self._api = None

    async def __aenter__(self) -> AsyncAdminClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # --- routes ------------------------------------------------------------------------------
    async def topic_route(self, topic: str, *, refresh: bool = False) -> TopicRoute:
        now = time.monotonic()
        cached = self._routes.get(topic)
        if cached is not None and not refresh and now - cached[0] < self.route_ttl:
            return cached[1]
        route = await self.api.get_route(topic)
        if route is None:
            self._routes.pop(topic, None)
            raise NoRouteError(topic, self.namesrv)
        self._routes[topic] = (now, route)
        return route

    async def message_queues(self, topic: str) -> list[MessageQueue]:
        """The topic's readable queues, sorted."""
        return (await self.topic_route(topic)).read_queues()

    async def broker_addr(self, mq_or_broker: MessageQueue | str, topic: str | None = None) -> str:
        if isinstance(mq_or_broker, MessageQueue):
            topic, name = mq_or_broker.topic, mq_or_broker.broker_name
        else:
            name = mq_or_broker
        if topic is not None:
            for refresh in (False, True):
                route = await self.topic_route(topic, refresh=refresh)
                bd = route.broker_data(name)
                addr = bd.any_addr() if bd is not None else None
                if addr:
                    return addr
        addr = (await self.brokers()).get(name)
        if not addr:
            raise NoRouteError(topic or "", self.namesrv, f"broker {name!r} has no live address")
        return addr

    async def brokers(self) -> dict[str, str]:
        """Every broker of every cluster: name -> master address."""
        info = await self.api.cluster_info()
        out: dict[str, str] = {}
        for name, bd in (info.get("brokerAddrTable") or {}).items():
            addrs = {int(k): str(v) for k, v in (bd.get("brokerAddrs") or {}).items()}
            if 0 in addrs:
                out[str(name)] = addrs[0]
        return dict(sorted(out.items()))

    async def cluster_brokers(self, cluster: str | None = None) -> dict[str, str]:
        info = await self.api.cluster_info()
        everything = await self.brokers()
        if cluster is None:
            return everything
        names = set((info.get("clusterAddrTable") or {}).get(cluster) or [])
        return {n: a for n, a in everything.items() if n in names}

    # --- offsets and pulls -------------------------------------------------------------------
    async def max_offset(self, mq: MessageQueue) -> int:
        return await self.api.max_offset(await self.broker_addr(mq), mq.topic, mq.queue_id)

    async def min_offset(self, mq: MessageQueue) -> int:
        return await self.api.min_offset(await self.broker_addr(mq), mq.topic, mq.queue_id)

    async def search_offset(self, mq: MessageQueue, timestamp_ms: int) -> int:
        return await self.api.search_offset(
            await self.broker_addr(mq), mq.topic, mq.queue_id, timestamp_ms
        )

    async def pull_raw(
        self,
        mq: MessageQueue,
        offset: int,
        max_nums: int = 32,
        *,
        expression: str = "*",
        group: str = TOOLS_CONSUMER_GROUP,
    ) -> RawPullResult:
        """One PULL_MESSAGE without suspending; the body is left encoded (decode_records)."""
        return await self.api.pull(
            await self.broker_addr(mq),
            mq.broker_name,
            group=group,
            topic=mq.topic,
            queue_id=mq.queue_id,
            offset=offset,
            max_nums=max_nums,
            sys_flag=pull_sys_flag(commit=False, suspend=False),
            expression=expression,
        )

    async def pull(
        self,
        mq: MessageQueue,
        offset: int,
        max_nums: int = 32,
        *,
        expression: str = "*",
        group: str = TOOLS_CONSUMER_GROUP,
    ) -> PullResult:
        raw = await self.pull_raw(mq, offset, max_nums, expression=expression, group=group)
        msgs = decode_records(raw.body, broker=mq.broker_name) if raw.body else []
        return PullResult(raw.status, msgs, raw.next_begin_offset, raw.min_offset, raw.max_offset)

    async def query_consumer_offset(self, group: str, mq: MessageQueue) -> int:
        return await self.api.query_consumer_offset(
            await self.broker_addr(mq), group, mq.topic, mq.queue_id
        )

    async def update_consumer_offset(self, group: str, mq: MessageQueue, offset: int) -> None:
        await self.api.update_consumer_offset(
            await self.broker_addr(mq), group, mq.topic, mq.queue_id, offset
        )

    # --- topics ------------------------------------------------------------------------------
    async def create_topic(
        self,
        topic: str,
        queue_nums: int = 4,
        *,
        read_queue_nums: int | None = None,
        perm: int = PERM_READ | PERM_WRITE,
        order: bool = False,
        cluster: str | None = None,
    ) -> list[str]:
        """Create or update the topic on every broker of the cluster; returns the broker names."""
        validate_topic(topic)
        brokers = await self.cluster_brokers(cluster)
        if not brokers:
            raise NoRouteError(topic, self.namesrv, "no broker is registered")
        await _gather(
            self.api.create_topic(
                addr,
                topic,
                read_queue_nums=read_queue_nums or queue_nums,
                write_queue_nums=queue_nums,
                perm=perm,
                order=order,
            )
            for addr in brokers.values()
        )
        self._routes.pop(topic, None)
        return sorted(brokers)

    async def topic_list(self) -> list[str]:
        return await self.api.topic_list()

    async def topic_status(self, topic: str) -> list[QueueStatus]:
        route = await self.topic_route(topic, refresh=True)
        rows: list[QueueStatus] = []
        tables = await _gather(self.api.topic_stats(addr, topic) for addr in route.brokers.values())
        for table in tables:
            for key, v in (table or {}).items():
                mq = mq_from_key(key)
                rows.append(
                    QueueStatus(
                        mq.topic,
                        mq.broker_name,
                        mq.queue_id,
                        int(v.get("minOffset", 0)),
                        int(v.get("maxOffset", 0)),
                        int(v.get("lastUpdateTimestamp", 0)),
                    )
                )
        return sorted(rows, key=lambda r: (r.broker, r.queue_id))

    # --- groups ------------------------------------------------------------------------------
    async def consume_stats(self, group: str, topic: str | None = None) -> list[QueueProgress]:
        """Per queue: broker max offset, the group's committed offset, lag."""
        if topic is not None:
            addrs = list((await self.topic_route(topic, refresh=True)).brokers.values())
        else:
            addrs = list((await self.brokers()).values())
        tables = await _gather(self.api.consume_stats(addr, group, topic) for addr in addrs)
        rows: list[QueueProgress] = []
        for data in tables:
            for key, v in (data.get("offsetTable") or {}).items():
                mq = mq_from_key(key)
                rows.append(
                    QueueProgress(
                        mq.topic,
                        mq.broker_name,
                        mq.queue_id,
                        int(v.get("brokerOffset", 0)),
                        int(v.get("consumerOffset", 0)),
                        int(v.get("lastTimestamp", 0)),
                    )
                )
        return sorted(rows, key=lambda r: (r.topic, r.broker, r.queue_id))

    async def group_progress(self, group: str) -> list[QueueProgress]:
        """Every topic the group consumes or committed on, its retry topic included."""
        return await self.consume_stats(group, None)

    async def reset_offset_by_time(
        self, group: str, topic: str, timestamp_ms: int, *, force: bool = True
    ) -> dict[MessageQueue, int]:
        """Move the group's offsets on `topic` to the first message stored at or after
        `timestamp_ms` (-1: the end of each queue). Online members are told to follow."""
        route = await self.topic_route(topic, refresh=True)
        tables = await _gather(
            self.api.reset_offset(addr, group, topic, timestamp_ms, force=force)
            for addr in route.brokers.values()
        )
        out: dict[MessageQueue, int] = {}
        for table in tables:
            for key, offset in table.items():
                out[mq_from_key(key)] = int(offset)
        return dict(sorted(out.items()))

    async def consumer_connections(self, group: str) -> ConsumerConnections:
        addrs = await self._group_broker_addrs(group)
        for addr in addrs:
            data = await self.api.consumer_connections(addr, group)
            if data is None:
                continue
            conns = [
                ConsumerConnectionInfo(
                    str(c.get("clientId", "")),
                    str(c.get("clientAddr", "")),
                    str(c.get("language", "")),
                    int(c.get("version", 0) or 0),
                )
                for c in data.get("connectionSet") or []
            ]
            subs = {
                str(t): str((s or {}).get("subString", "*"))
                for t, s in (data.get("subscriptionTable") or {}).items()
            }
            return ConsumerConnections(
                group,
                sorted(conns, key=lambda c: c.client_id),
                subs,
                str(data.get("messageModel", "")),
                str(data.get("consumeType", "")),
                str(data.get("consumeFromWhere", "")),
                data,
            )
        return ConsumerConnections(group, [], {})

    async def consumer_ids(self, group: str) -> list[str]:
        for addr in await self._group_broker_addrs(group):
            ids = await self.api.consumer_ids(addr, group)
            if ids:
                return ids
        return []

    async def _group_broker_addrs(self, group: str) -> list[str]:
        try:
            return list((await self.topic_route(retry_topic(group), refresh=True)).brokers.values())
        except NoRouteError:
            return list((await self.brokers()).values())

    # --- messages ----------------------------------------------------------------------------
    async def view_message(self, offset_msg_id: str) -> MessageExt:
        """Look a message up by its offset id (store host + commit-log offset)."""
        decoded = decode_offset_msg_id(offset_msg_id)
        body = await self.api.view_message(decoded.address, decoded.offset)
        msgs = decode_records(body)
        if not msgs:
            raise MessageNotFoundError(f"offset message id {offset_msg_id}")
        msg = msgs[0]
        msg.broker = await self._broker_name_of(decoded.address)
        return msg

    async def query_message(self, topic: str, key: str, *, max_num: int = 32) -> list[MessageExt]:
        """Messages whose KEYS contain `key`, from every broker of the topic."""
        return await self._query(topic, key, max_num=max_num, unique=False)

    async def query_by_uniq_key(self, topic: str, uniq: str) -> MessageExt:
        found = await self._query(topic, uniq, max_num=32, unique=True)
        found = [m for m in found if m.msg_id == uniq] or found
        if not found:
            raise MessageNotFoundError(f"unique key {uniq} in topic {topic}")
        # A message stored twice (a producer retry) has the same unique key; the first wins.
        return min(found, key=lambda m: m.store_timestamp)

    async def _query(self, topic: str, key: str, *, max_num: int, unique: bool) -> list[MessageExt]:
        route = await self.topic_route(topic, refresh=True)
        out: list[MessageExt] = []
        bodies = await _gather(
            self.api.query_message(addr, topic, key, max_num=max_num, unique=unique)
            for addr in route.brokers.values()
        )
        for (name, _addr), body in zip(route.brokers.items(), bodies, strict=True):
            if body:
                out.extend(m for m in decode_records(body, broker=name) if m.topic == topic)
        return sorted(out, key=lambda m: (m.store_timestamp, m.commit_log_offset))

    async def _broker_name_of(self, addr: str) -> str:
        try:
            brokers = await self.brokers()
        except FerryMQError:  # the message itself was found; its name is a nicety
            return ""
        return next((name for name, a in brokers.items() if a == addr), "")


async def _gather(aws: Any) -> list[Any]:
    tasks: list[Awaitable[Any]] = list(aws)
    return list(await asyncio.gather(*tasks))
