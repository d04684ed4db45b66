"""The administration client, async core: routes, offsets, single pulls, topics, group
progress, offset reset and message lookups. `AdminClient` (blocking) and
`ferrymq.aio.AdminClient` are this class."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable
from typing import Any

from ..acl.signing import credentials_from, signer_for
from ..common import topic_types
from ..common.codes import RequestCode
from ..common.errors import FerryMQError
from ..common.headers import PERM_READ, PERM_WRITE, fields
from ..common.ids import decode_offset_msg_id, decode_uniq_id, is_offset_msg_id, is_uniq_id
from ..common.message import MessageExt, MessageQueue
from ..common.names import (
    AUTO_CREATE_TOPIC_KEY_TOPIC,
    CID_SYS_RMQ_TRANS,
    RETRY_GROUP_TOPIC_PREFIX,
    SYSTEM_TOPICS,
    TOOLS_CONSUMER_GROUP,
    retry_topic,
    validate_topic,
)
from ..common.record import decode_records
from ..common.trace_events import TraceEvent
from ..remoting import ClientConfig, RemotingClient
from ..remoting.tls import TlsClientSettings, resolve_client_tls
from .admin_groups import GroupsAdmin
from .admin_namesrv import NamesrvAdmin
from .admin_ops import OpsAdmin, route_read_targets
from .admin_results import BrokerStatus, MessageTrace, MessageTrack, parse_message_trace
from .api import MQClientAPI, mq_from_key, pull_sys_flag
from .consumer.subscription import Subscription
from .errors import ClientStateError, MessageNotFoundError, NoRouteError, UnknownBrokerError, UnknownClusterError
from .results import (
    ConsumerConnectionInfo,
    ConsumerConnections,
    PullResult,
    QueueProgress,
    QueueStatus,
    RawPullResult,
)
from .route import TopicRoute
from .store_damage import StoreDamage, parse_store_damage


class AsyncAdminClient(OpsAdmin, NamesrvAdmin, GroupsAdmin):
    """Stateless apart from a route cache; every call is one or a few requests. Use it as an
    async context manager, or call close()."""

    def __init__(
        self, namesrv: str = "127.0.0.1:9876", *, timeout: float = 3.0, route_ttl: float = 5.0,
        access_key: str | None = None, secret_key: str | None = None,
        tls: TlsClientSettings | bool | None = None,
    ) -> None:
        """`tls`: settings, True/False, or None for what $FERRYMQ_TLS says (docs/security.md)."""
        self.namesrv = namesrv
        self.credentials = credentials_from(access_key, secret_key)
        self.tls = resolve_client_tls(tls)
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
            self._remoting = RemotingClient(ClientConfig(tls=self.tls), signer=signer_for(self.credentials))
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
        clusters = info.get("clusterAddrTable") or {}
        if cluster not in clusters:
            # Else "no broker is registered", which is not what went wrong (mqadmin: "Make sure
            # the specified clusterName exists").
            raise UnknownClusterError(cluster, self.namesrv, tuple(sorted(clusters)))
        names = set(clusters[cluster] or [])
        return {n: a for n, a in everything.items() if n in names}

    async def cluster_list(self) -> list[BrokerStatus]:
        """Every broker of every cluster, slaves included, with its runtime table (RocketMQ's
        GET_BROKER_RUNTIME_INFO); a broker that does not answer is listed with the error."""
        info = await self.api.cluster_info()
        clusters = {
            str(name): str(cluster)
            for cluster, names in (info.get("clusterAddrTable") or {}).items()
            for name in names or []
        }
        listed: list[tuple[str, str, int, str]] = []
        for name, bd in (info.get("brokerAddrTable") or {}).items():
            cluster = clusters.get(str(name), str(bd.get("cluster", "")))
            for bid, addr in (bd.get("brokerAddrs") or {}).items():
                listed.append((cluster, str(name), int(bid), str(addr)))
        listed.sort()
        answers = await asyncio.gather(
            *(self.api.broker_runtime_info(addr) for *_, addr in listed), return_exceptions=True
        )
        out: list[BrokerStatus] = []
        for (cluster, name, bid, addr), answer in zip(listed, answers, strict=True):
            if isinstance(answer, FerryMQError):
                out.append(BrokerStatus(cluster, name, bid, addr, error=str(answer)))
            elif isinstance(answer, BaseException):
                raise answer
            else:
                out.append(BrokerStatus(cluster, name, bid, addr, answer))
        return out

    async def broker_status(self, broker: str) -> BrokerStatus:
        """One broker's runtime table; `broker` is a broker name (its master) or HOST:PORT."""
        listed = await self.cluster_list()
        for status in listed:
            if status.addr == broker or (status.broker == broker and status.broker_id == 0):
                if status.error is not None:
                    raise NoRouteError("", self.namesrv, f"broker {broker}: {status.error}")
                return status
        raise UnknownBrokerError(broker, self.namesrv, tuple(sorted({s.broker for s in listed})))

    async def broker_config(self, broker: str) -> dict[str, str]:
        """The broker's configuration (RocketMQ's camelCase keys); `broker` as in
        broker_status."""
        return await self.api.broker_config(await self._broker_address(broker))

    async def update_broker_config(
        self, values: dict[str, str], broker: str | None = None
    ) -> list[str]:
        """Change configuration keys at runtime on one broker, or on every master when
        `broker` is None. The broker refuses keys that cannot change while it runs."""
        if broker is not None:
            addrs = [await self._broker_address(broker)]
        else:
            addrs = list((await self.brokers()).values())
        await _gather(self.api.update_broker_config(addr, values) for addr in addrs)
        return addrs

    async def store_damage(self, broker: str | None = None) -> StoreDamage:
        """Records the store found damaged at rest and the queue ranges skipped by an
        operator, on one broker or on every one."""
        if broker is not None:
            named = {broker: await self._broker_address(broker)}
        else:
            named = await self.brokers()
        names = list(named)
        bodies = await _gather(self.api.store_damage(named[n]) for n in names)
        parts = [parse_store_damage(n, b) for n, b in zip(names, bodies, strict=True)]
        return StoreDamage([r for p in parts for r in p.records],
                           [s for p in parts for s in p.skipped])

    async def skip_store_range(
        self, topic: str, queue_id: int, from_offset: int, to_offset: int
    ) -> list[str]:
        """Make pulls of the queue pass over [from_offset, to_offset) on every broker that
        holds it (giving up on damaged records there). Returns the brokers' names."""
        names = sorted({mq.broker_name for mq in await self.message_queues(topic)
                        if mq.queue_id == queue_id})
        if not names:
            raise NoRouteError(topic, self.namesrv, f"topic {topic} has no queue {queue_id}")
        addrs = [await self._broker_address(n) for n in names]
        await _gather(self.api.skip_store_range(a, topic, queue_id, from_offset, to_offset)
                      for a in addrs)
        return names

    async def _broker_address(self, broker: str) -> str:
        if ":" in broker:
            return broker
        known = await self.brokers()
        addr = known.get(broker)
        if not addr:
            raise UnknownBrokerError(broker, self.namesrv, tuple(sorted(known)))
        return addr

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
        expression_type: str = "TAG",
        group: str = TOOLS_CONSUMER_GROUP,
    ) -> RawPullResult:
        """One PULL_MESSAGE without suspending; the body is left encoded (decode_records).
        `expression_type` SQL92 makes `expression` a selector the broker evaluates."""
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
            expression_type=expression_type,
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

    async def acknowledged(self, group: str, mq: MessageQueue) -> tuple[int, list[tuple[int, int]]]:
        """The group's committed offset on `mq` (-1: none) and the [start, end) ranges above
        it already acknowledged (always empty on a broker without precise acknowledgement)."""
        return await self.api.query_consumer_progress(
            await self.broker_addr(mq), group, mq.topic, mq.queue_id
        )

    async def acknowledge(
        self, group: str, mq: MessageQueue, offset: int, ranges: list[tuple[int, int]]
    ) -> bool:
        """Commit `offset` with the acknowledged ranges above it; False (and nothing stored)
        when the broker keeps no ranges, so the caller can commit the offset alone."""
        addr = await self.broker_addr(mq)
        return await self.api.update_ack_ranges(
            addr, group, mq.topic, mq.queue_id, offset, ranges
        )

    # --- topics ------------------------------------------------------------------------------
    async def create_topic(
        self,
        topic: str,
        queue_nums: int = 4,
        *,
        read_queue_nums: int | None = None,
        perm: int = PERM_READ | PERM_WRITE,
        message_type: str | None = None,
        order: bool = False,
        cluster: str | None = None,
        force: bool = False,
        broker: str | None = None,
    ) -> list[str]:
        """Create or update the topic on every broker of the cluster (every broker when no
        cluster is named), or on the one `broker` (a name or a master's HOST:PORT, as
        mqadmin updateTopic -b); returns the broker names.
        queue_nums is the write queue count, and the read count unless read_queue_nums is
        given. A ferrymq broker refuses to lower the read queues where that would leave
        messages some group has not consumed, unless forced (BrokerError naming them); the
        other brokers still apply the change. message_type: RocketMQ 5's topic message type
        (common/topic_types.py), the `message.type` attribute; FIFO makes an order topic, and
        an order topic is FIFO."""
        validate_topic(topic)
        if order and message_type is None:
            message_type = topic_types.FIFO
        brokers = await self.cluster_brokers(cluster)
        if broker is not None:
            named = {n: a for n, a in brokers.items() if broker in (n, a)}
            if not named:
                raise UnknownBrokerError(broker, self.namesrv, tuple(sorted(brokers)))
            brokers = named
        if not brokers:
            raise NoRouteError(topic, self.namesrv, "no broker is registered")
        await _gather(
            self.api.create_topic(
                addr,
                topic,
                read_queue_nums=read_queue_nums or queue_nums,
                write_queue_nums=queue_nums,
                perm=perm,
                order=order or message_type == topic_types.FIFO,
                force=force,
                attributes=f"+{topic_types.MESSAGE_TYPE_ATTRIBUTE}={message_type}" if message_type else None,
            )
            for addr in brokers.values()
        )
        self._routes.pop(topic, None)
        return sorted(brokers)

    async def topic_message_types(self, topic: str) -> dict[str, str]:
        """The message type each broker of the topic's route gives it (RocketMQ 5's
        `message.type`, common/topic_types.py), by broker name."""
        # Read where topic_status reads (a group whose master is down: its slave), and a broker
        # that cannot answer is left out rather than failing the caller's view.
        targets = route_read_targets(await self.topic_route(topic, refresh=True))
        names = sorted(targets)
        configs = await asyncio.gather(*(self.api.topic_config(targets[n][0], topic) for n in names),
                                       return_exceptions=True)
        return {
            n: topic_types.topic_type(cfg.get("attributes") or {}, bool(cfg.get("order")))
            for n, cfg in zip(names, configs, strict=True) if isinstance(cfg, dict)
        }

    async def delete_topic(self, topic: str) -> list[str]:
        """Delete the topic on every broker that serves it, then on every name server
        (RocketMQ's order: a route never points at a broker that no longer has the topic).
        Returns the broker names."""
        validate_topic(topic)
        if topic in SYSTEM_TOPICS:
            raise ValueError(f"{topic} is a system topic and cannot be deleted")
        route = await self.topic_route(topic, refresh=True)
        await _gather(self.api.delete_topic_in_broker(a, topic) for a in route.brokers.values())
        await self.api.delete_topic_in_namesrvs(topic)
        self._routes.pop(topic, None)
        return sorted(route.brokers)

    async def update_topic_perm(self, topic: str, perm: int) -> list[str]:
        """Set the topic's permission (PERM_READ | PERM_WRITE bits) on every broker that serves
        it, keeping its queue numbers and flags. Returns the broker names."""
        if perm & ~(PERM_READ | PERM_WRITE) or not perm >= 0:
            raise ValueError(f"permission {perm} is not a combination of read (4) and write (2)")
        if topic in SYSTEM_TOPICS:
            raise ValueError(f"{topic} is a system topic; its permission is the broker's")
        route = await self.topic_route(topic, refresh=True)
        addrs = route.brokers
        await _gather(
            self.api.create_topic(
                addrs[q.broker_name],
                topic,
                read_queue_nums=q.read_queue_nums,
                write_queue_nums=q.write_queue_nums,
                perm=perm,
                topic_sys_flag=q.topic_sys_flag,
            )
            for q in route.queue_datas
            if q.broker_name in addrs
        )
        self._routes.pop(topic, None)
        return sorted(q.broker_name for q in route.queue_datas if q.broker_name in addrs)

    async def topic_list(self) -> list[str]:
        return await self.api.topic_list()

    async def topic_status(self, topic: str) -> list[QueueStatus]:
        """Every queue of the topic; a broker group whose master is down is read from its
        slave (read_from "slave"), not left out."""
        route = await self.topic_route(topic, refresh=True)
        targets = route_read_targets(route)
        rows: list[QueueStatus] = []
        tables = await _gather(self.api.topic_stats(addr, topic) for addr, _ in targets.values())
        for (_addr, read_from), table in zip(targets.values(), tables, strict=True):
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
                        read_from,
                    )
                )
        return sorted(rows, key=lambda r: (r.broker, r.queue_id))

    # --- groups ------------------------------------------------------------------------------
    async def consume_stats(self, group: str, topic: str | None = None) -> list[QueueProgress]:
        """Per queue: broker max offset, the group's committed offset, lag. A broker group
        whose master is down is read from its slave (read_from "slave"), not left out."""
        if topic is not None:
            targets = route_read_targets(await self.topic_route(topic, refresh=True))
        else:
            targets = await self.read_brokers()
        tables = await _gather(
            self.api.consume_stats(addr, group, topic) for addr, _ in targets.values()
        )
        rows: list[QueueProgress] = []
        for (_addr, read_from), data in zip(targets.values(), tables, strict=True):
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
                        read_from,
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

    async def consumer_groups(self) -> list[str]:
        """Every consumer group a master broker holds offsets for, or whose retry topic exists
        (a push consumer's, made at its first heartbeat); the tools group and the broker's
        transaction-check group are left out."""
        tables = await _gather(self.api.all_consumer_offsets(a) for a in (await self.brokers()).values())
        groups = {str(k).partition("@")[2] for table in tables for k in table}
        groups.update(t[len(RETRY_GROUP_TOPIC_PREFIX):] for t in await self.topic_list()
                      if t.startswith(RETRY_GROUP_TOPIC_PREFIX))
        return sorted(g for g in groups if g and g not in (TOOLS_CONSUMER_GROUP, CID_SYS_RMQ_TRANS))

    async def _group_broker_addrs(self, group: str) -> list[str]:
        try:
            return list((await self.topic_route(retry_topic(group), refresh=True)).brokers.values())
        except NoRouteError:
            return list((await self.brokers()).values())

    # --- transactions ------------------------------------------------------------------------
    async def end_transaction(
        self, broker: str, *, producer_group: str, topic: str, transaction_id: str,
        tran_state_table_offset: int, commit_log_offset: int, commit: bool,
    ) -> str | None:
        """END_TRANSACTION for a half message on `broker` (a name or an address), waiting for
        the answer a producer's one-way request never gets: the commit is stored (or the
        rollback written) when this returns. Returns the broker's remark ("the transaction has
        already ended" for a repeat); BrokerError when it refused."""
        addr = await self._broker_address(broker)
        resp = await self.api.invoke_ok(addr, RequestCode.END_TRANSACTION, fields(
            topic=topic, producerGroup=producer_group, tranStateTableOffset=tran_state_table_offset,
            commitLogOffset=commit_log_offset, commitOrRollback=0x8 if commit else 0xC,
            fromTransactionCheck=False, msgId=transaction_id, transactionId=transaction_id,
            brokerName=broker,
        ))
        return resp.remark

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

    async def find_by_uniq_key(self, uniq: str) -> list[MessageExt]:
        """Every stored copy of the message with unique id `uniq`, in any topic (its own, a
        retry topic, the DLQ, the delay schedule), oldest first: the index of each topic on
        each broker is asked, as no topic is given."""
        decode_uniq_id(uniq)  # refuse what cannot be a unique id before asking anyone
        topics = [t for t in await self.topic_list() if t != AUTO_CREATE_TOPIC_KEY_TOPIC]
        found: list[MessageExt] = []
        for start in range(0, len(topics), UNIQ_SEARCH_FANOUT):
            batch = topics[start : start + UNIQ_SEARCH_FANOUT]
            results = await asyncio.gather(
                *(self._query(t, uniq, max_num=32, unique=True) for t in batch),
                return_exceptions=True,
            )
            for result in results:
                if isinstance(result, NoRouteError):
                    continue  # deleted between the list and the query
                if isinstance(result, BaseException):
                    raise result
                found.extend(m for m in result if m.msg_id == uniq)
        return sorted(found, key=lambda m: (m.store_timestamp, m.commit_log_offset))

    async def message_tracks(self, msg: MessageExt) -> list[MessageTrack]:
        """For every group that consumes the message's topic: has it consumed this message
        (mqadmin queryMsgById's tracks)."""
        route = await self.topic_route(msg.topic, refresh=True)
        lists = await _gather(self.api.topic_consumed_by(a, msg.topic) for a in route.brokers.values())
        groups = sorted({g for names in lists for g in names})
        mq = MessageQueue(msg.topic, msg.broker, msg.queue_id)
        tracks = []
        for group in groups:
            conns = await self.consumer_connections(group)
            offset = await self.query_consumer_offset(group, mq)
            consumed = offset > msg.queue_offset
            if not conns.connections:
                track = "NOT_ONLINE"
            elif conns.consume_type == "CONSUME_ACTIVELY":
                track = "PULL"
            elif not consumed:
                track = "NOT_CONSUME_YET"
            elif not _subscribed(conns.subscriptions.get(msg.topic), msg):
                track = "CONSUMED_BUT_FILTERED"
            else:
                track = "CONSUMED"
            tracks.append(
                MessageTrack(msg.topic, msg.queue_id, msg.queue_offset, group, track, consumed, offset)
            )
        return tracks

    async def message_trace(self, msg_id: str) -> MessageTrace:
        """The recorded timeline of the message with unique id `msg_id` (an offset message id
        is resolved to its unique id first), merged over every broker, oldest first."""
        if is_offset_msg_id(msg_id) and not is_uniq_id(msg_id):
            msg_id = (await self.view_message(msg_id)).msg_id
        named = await self.brokers()
        names = list(named)
        bodies = await asyncio.gather(*(self.api.message_trace(named[n], msg_id) for n in names),
                                      return_exceptions=True)
        events: list[TraceEvent] = []
        enabled: dict[str, bool] = {}
        errors: dict[str, str] = {}
        for name, body in zip(names, bodies, strict=True):
            if isinstance(body, FerryMQError | ValueError):
                # A broker that is down, or that has no trace (Apache RocketMQ answers
                # REQUEST_CODE_NOT_SUPPORTED): the others' timelines still stand.
                enabled[name] = False
                errors[name] = str(body)
                continue
            if isinstance(body, BaseException):
                raise body
            try:
                _, on, found = parse_message_trace(body)
            except ValueError as exc:
                enabled[name], errors[name] = False, str(exc)
                continue
            enabled[name] = on
            events += found
        # Each broker's list is in order; across brokers, time orders them (stable sort).
        events.sort(key=lambda e: e.ts)
        return MessageTrace(msg_id, tuple(events), enabled, errors)

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


def _subscribed(expression: str | None, msg: MessageExt) -> bool:
    try:
        return Subscription.parse(msg.topic, expression).accepts(msg)
    except ValueError:  # an expression this client cannot read: do not claim it filters
        return True


# How many topics a unique-id search asks at once.
UNIQ_SEARCH_FANOUT = 16


async def _gather(aws: Any) -> list[Any]:
    tasks: list[Awaitable[Any]] = list(aws)
    return list(await asyncio.gather(*tasks))
