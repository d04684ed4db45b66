"""The admin client's operator views (mqadmin's producerConnection, consumerStatus,
cloneGroupOffset, brokerConsumeStats and statsAll), and where each broker group is read from
when its master is down. AsyncAdminClient inherits them."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from ..common import jsonx
from ..common.codes import RequestCode, ResponseCode
from ..common.errors import FerryMQError
from ..common.headers import fields
from ..common.names import DLQ_GROUP_TOPIC_PREFIX, MASTER_ID, RETRY_GROUP_TOPIC_PREFIX
from .api import MQClientAPI, mq_from_key
from .errors import NoRouteError
from .ops_results import (
    BrokerConsumeStats,
    ConsumerRunningInfo,
    GroupTopicStats,
    ProducerConnection,
    TopicGroupTraffic,
)
from .results import ConsumerConnections, QueueProgress
from .route import TopicRoute

MASTER, SLAVE = "master", "slave"

# Seconds added to a GET_CONSUMER_RUNNING_INFO's timeout: the broker waits up to 3 s for the
# member (broker/processors/ops.py) before it answers.
RUNNING_INFO_SLACK = 3.0


def read_target(addrs: dict[int, str]) -> tuple[str, str] | None:
    """(address, "master"|"slave") to read a broker group's offsets from: its master, else
    its lowest-numbered slave, which holds the replicated queues and offsets."""
    if MASTER_ID in addrs:
        return addrs[MASTER_ID], MASTER
    return (addrs[min(addrs)], SLAVE) if addrs else None


def route_read_targets(route: TopicRoute) -> dict[str, tuple[str, str]]:
    """broker name -> read_target, for the broker groups of a topic's route."""
    out: dict[str, tuple[str, str]] = {}
    for bd in route.broker_datas:
        target = read_target(dict(bd.broker_addrs))
        if target is not None:
            out[bd.broker_name] = target
    return out


class OpsAdmin:
    if TYPE_CHECKING:
        namesrv: str

        @property
        def api(self) -> MQClientAPI: ...

        async def topic_route(self, topic: str, *, refresh: bool = False) -> TopicRoute: ...

        async def topic_list(self) -> list[str]: ...

        async def _broker_address(self, broker: str) -> str: ...

        async def _group_broker_addrs(self, group: str) -> list[str]: ...

        async def consumer_connections(self, group: str) -> ConsumerConnections: ...

        async def consume_stats(self, group: str, topic: str | None = None) -> list[QueueProgress]: ...

    async def read_brokers(self) -> dict[str, tuple[str, str]]:
        """Every broker group: name -> (address, "master"|"slave"), the slave where the name
        server lists no master (it died or is being replaced)."""
        info = await self.api.cluster_info()
        out: dict[str, tuple[str, str]] = {}
        for name, bd in (info.get("brokerAddrTable") or {}).items():
            addrs = {int(k): str(v) for k, v in (bd.get("brokerAddrs") or {}).items()}
            target = read_target(addrs)
            if target is not None:
                out[str(name)] = target
        return dict(sorted(out.items()))

    # --- producers -------------------------------------------------------------------------
    async def producer_connections(self, group: str, topic: str) -> list[ProducerConnection]:
        """The online clients of a producer group, as the masters of `topic` see them."""
        route = await self.topic_route(topic, refresh=True)
        named = route.brokers
        answers = await asyncio.gather(*(self._producer_conns(a, group) for a in named.values()))
        merged: dict[str, tuple[dict[str, Any], list[str]]] = {}
        for name, conns in zip(named, answers, strict=True):
            for c in conns:
                merged.setdefault(str(c.get("clientId", "")), (c, []))[1].append(name)
        return [ProducerConnection(cid, str(c.get("clientAddr", "")), str(c.get("language", "")),
                                   int(c.get("version", 0) or 0), tuple(sorted(names)))
                for cid, (c, names) in sorted(merged.items())]

    async def _producer_conns(self, addr: str, group: str) -> list[dict[str, Any]]:
        resp = await self.api.invoke_ok(
            addr, RequestCode.GET_PRODUCER_CONNECTION_LIST, fields(producerGroup=group),
            ok=(ResponseCode.SUCCESS, ResponseCode.SYSTEM_ERROR))
        if resp.code != ResponseCode.SUCCESS:  # "the producer group[..] not exist" here
            return []
        return list(jsonx.loads(resp.body or b"{}").get("connectionSet") or [])

    # --- consumers -------------------------------------------------------------------------
    async def consumer_status(self, group: str) -> list[ConsumerRunningInfo]:
        """Each online member's running info, asked of it through a broker it is connected to
        (mqadmin consumerStatus); a member that cannot answer is listed with the error."""
        conns = await self.consumer_connections(group)
        addrs = await self._group_broker_addrs(group)
        return list(await asyncio.gather(
            *(self._running_info(addrs, group, c.client_id) for c in conns.connections)))

    async def _running_info(self, addrs: list[str], group: str, client_id: str) -> ConsumerRunningInfo:
        error = "no broker of the group answered"
        for addr in addrs:
            try:
                # Longer than the broker waits for the member, so its answer saying why the
                # member did not answer arrives rather than our own timeout.
                resp = await self.api.invoke_ok(
                    addr, RequestCode.GET_CONSUMER_RUNNING_INFO,
                    fields(consumerGroup=group, clientId=client_id, jstackEnable=False),
                    timeout=self.api.timeout + RUNNING_INFO_SLACK)
            except FerryMQError as exc:
                error = str(exc)
                continue
            body = jsonx.loads(resp.body or b"{}")
            return ConsumerRunningInfo.from_body(group, client_id, body)
        return ConsumerRunningInfo(group, client_id, error=error)

    async def clone_group_offset(
        self, src: str, dest: str, topic: str, *, offline: bool = False
    ) -> dict[str, dict[int, int]]:
        """Give group `dest` the offsets `src` has on `topic`, on every master of the topic;
        returns broker name -> {queue: offset} copied. Without `offline`, an online `src` that
        does not subscribe to the topic copies nothing (RocketMQ's rule)."""
        route = await self.topic_route(topic, refresh=True)
        named = route.brokers
        if not named:
            raise NoRouteError(topic, self.namesrv, f"topic {topic} has no master broker")
        bodies = await asyncio.gather(*(self.api.invoke_ok(
            a, RequestCode.CLONE_GROUP_OFFSET,
            fields(srcGroup=src, destGroup=dest, topic=topic, offline=offline))
            for a in named.values()))
        out: dict[str, dict[int, int]] = {}
        for name, resp in zip(named, bodies, strict=True):
            table = (jsonx.loads(resp.body or b"{}").get("offsetTable") or {}).get(topic) or {}
            out[name] = {int(q): int(o) for q, o in sorted(table.items(), key=lambda i: int(i[0]))}
        return out

    # --- brokers ---------------------------------------------------------------------------
    async def broker_consume_stats(self, broker: str, *, order: bool = False) -> BrokerConsumeStats:
        """Every group's lag on every topic it consumes on one broker (brokerConsumeStats);
        `broker` is a broker name (its master) or HOST:PORT."""
        addr = await self._broker_address(broker)
        resp = await self.api.invoke_ok(addr, RequestCode.GET_BROKER_CONSUME_STATS,
                                        fields(isOrder=order, timeoutMillis=int(self.api.timeout * 1000)))
        body = jsonx.loads(resp.body or b"{}")
        stats: list[GroupTopicStats] = []
        for entry in body.get("consumeStatsList") or []:
            for group, per_topic in entry.items():
                for cs in per_topic or []:
                    rows = [QueueProgress(mq.topic, mq.broker_name, mq.queue_id,
                                          int(v.get("brokerOffset", 0)), int(v.get("consumerOffset", 0)),
                                          int(v.get("lastTimestamp", 0)))
                            for mq, v in ((mq_from_key(k), v) for k, v in
                                          (cs.get("offsetTable") or {}).items())]
                    rows.sort(key=lambda r: r.queue_id)
                    topic = rows[0].topic if rows else ""
                    stats.append(GroupTopicStats(str(group), topic, float(cs.get("consumeTps", 0)),
                                                 tuple(rows)))
        return BrokerConsumeStats(broker, addr, int(body.get("totalDiff", 0)), tuple(stats))

    async def _stats_figures(self, addr: str, name: str, key: str) -> tuple[float, int]:
        """(TPS over the last minute, messages over the last day) of one broker counter;
        (0, 0) for one the broker has not counted yet."""
        resp = await self.api.invoke_ok(addr, RequestCode.VIEW_BROKER_STATS_DATA,
                                        fields(statsName=name, statsKey=key),
                                        ok=(ResponseCode.SUCCESS, ResponseCode.SYSTEM_ERROR))
        if resp.code != ResponseCode.SUCCESS:
            return 0.0, 0
        body = jsonx.loads(resp.body or b"{}")
        return (float((body.get("statsMinute") or {}).get("tps", 0)),
                int((body.get("statsDay") or {}).get("sum", 0)))

    async def stats_all(self, *, active_only: bool = False) -> list[TopicGroupTraffic]:
        """Per topic and consuming group: lag, in/out TPS and the last day's messages, summed
        over the topic's masters (mqadmin statsAll; retry and dead-letter topics left out).
        `active_only`: rows with some traffic in the last day."""
        topics = [t for t in await self.topic_list()
                  if not t.startswith((RETRY_GROUP_TOPIC_PREFIX, DLQ_GROUP_TOPIC_PREFIX))]
        rows: list[TopicGroupTraffic] = []
        for part in await asyncio.gather(*(self._topic_traffic(t) for t in topics)):
            rows += part
        if active_only:
            rows = [r for r in rows if r.in_msgs_24h or r.out_msgs_24h]
        return rows

    async def _topic_traffic(self, topic: str) -> list[TopicGroupTraffic]:
        try:
            route = await self.topic_route(topic, refresh=True)
        except NoRouteError:
            return []  # deleted between the list and now, or a topic with no broker left
        addrs = list(route.brokers.values())
        put = await asyncio.gather(*(self._stats_figures(a, "TOPIC_PUT_NUMS", topic) for a in addrs))
        in_tps, in_day = sum(p[0] for p in put), sum(p[1] for p in put)
        groups = sorted({g for a in addrs for g in await self.api.topic_consumed_by(a, topic)})
        if not groups:
            return [TopicGroupTraffic(topic, "", 0, in_tps, 0.0, in_day, 0)]
        rows = []
        for group in groups:
            lag = sum(r.lag for r in await self.consume_stats(group, topic))
            got = await asyncio.gather(
                *(self._stats_figures(a, "GROUP_GET_NUMS", f"{topic}@{group}") for a in addrs))
            rows.append(TopicGroupTraffic(topic, group, lag, in_tps, sum(g[0] for g in got),
                                          in_day, sum(g[1] for g in got)))
        return rows

