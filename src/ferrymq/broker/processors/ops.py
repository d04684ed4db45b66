"""The operator's views of who is connected and how much flows (mqadmin's producerConnection,
consumerStatus, cloneGroupOffset, brokerConsumeStats and statsAll), with RocketMQ's request
codes and bodies."""

from __future__ import annotations

from typing import Any

from ...common import jsonx
from ...common.codes import RequestCode, ResponseCode
from ...common.headers import opt_bool, opt_str, req_str
from ...common.names import CID_SYS_RMQ_TRANS, TOOLS_CONSUMER_GROUP
from ...remoting import Connection, RemotingCommand
from ..context import BrokerContext
from . import log, reply
from .admin import consume_stats

# How long the broker waits for a consumer to answer GET_CONSUMER_RUNNING_INFO (RocketMQ's
# callClientTimeout default is the admin's 5 s less its own slack).
CLIENT_CALL_TIMEOUT = 3.0

# Groups every broker has that no operator made; brokerConsumeStats leaves them out.
_INTERNAL_GROUPS = frozenset({TOOLS_CONSUMER_GROUP, CID_SYS_RMQ_TRANS})


async def producer_connections(broker: BrokerContext, conn: Connection,
                               req: RemotingCommand) -> RemotingCommand | None:
    group = req_str(req.ext_fields, "producerGroup")
    channels = list(broker.clients.producers.get(group, {}).values())
    if not channels:
        return reply(req, ResponseCode.SYSTEM_ERROR, f"the producer group[{group}] not exist")
    body = {"connectionSet": [
        {"clientId": c.client_id, "clientAddr": c.addr, "language": c.language, "version": c.version}
        for c in channels
    ]}
    return reply(req, ResponseCode.SUCCESS, body=jsonx.dumps_bytes(body))


async def consumer_running_info(broker: BrokerContext, conn: Connection,
                                req: RemotingCommand) -> RemotingCommand | None:
    """Asked of one client of the group: the request goes on to it over the connection it
    opened, and its answer comes back as it is (AdminBrokerProcessor.callConsumer)."""
    group = req_str(req.ext_fields, "consumerGroup")
    client_id = req_str(req.ext_fields, "clientId")
    info = broker.clients.consumer_group(group)
    channel = next((c for c in (info.channels.values() if info else ()) if c.client_id == client_id),
                   None)
    if channel is None:
        return reply(req, ResponseCode.SYSTEM_ERROR, f"The Consumer <{group}> <{client_id}> not online")
    ask = RemotingCommand.request(RequestCode.GET_CONSUMER_RUNNING_INFO,
                                  ext_fields=dict(req.ext_fields))
    try:
        answer = await channel.conn.invoke(ask, CLIENT_CALL_TIMEOUT)
    except Exception as exc:
        log.info("running info of %s (%s) not had: %s", client_id, group, exc)
        return reply(req, ResponseCode.SYSTEM_ERROR,
                     f"invoke consumer <{client_id}> <{group}> failed: {exc}")
    return reply(req, answer.code, answer.remark, body=answer.body)


async def clone_group_offset(broker: BrokerContext, conn: Connection,
                             req: RemotingCommand) -> RemotingCommand | None:
    """The destination group's offsets on the topic (every topic of the source group when none
    is given) become the source group's (AdminBrokerProcessor.cloneGroupOffset). Without
    `offline`, a topic the online source group does not subscribe to is passed over."""
    ext = req.ext_fields
    src, dest = req_str(ext, "srcGroup"), req_str(ext, "destGroup")
    topic = opt_str(ext, "topic")
    offline = opt_bool(ext, "offline")
    info = broker.clients.consumer_group(src)
    topics = [topic] if topic else sorted(broker.offsets.topics_of_group(src))
    seq = 0
    cloned: dict[str, dict[int, int]] = {}
    for t in topics:
        if broker.topics.get(t) is None:
            continue
        if not offline and info is not None and info.subscriptions and t not in info.subscriptions:
            continue
        offsets = broker.offsets.queue_offsets(src, t)
        for qid, offset in sorted(offsets.items()):
            seq = max(seq, broker.offsets.commit(dest, t, qid, offset, broker.now_ms()))
        if offsets:
            cloned[t] = offsets
    await broker.offsets.wait_durable(seq)  # answered, so on disk
    log.info("%s cloned the offsets of %s to %s: %s", conn.remote_addr, src, dest, sorted(cloned))
    return reply(req, ResponseCode.SUCCESS, body=jsonx.dumps_bytes({"offsetTable": {
        t: {str(q): o for q, o in per.items()} for t, per in cloned.items()}}))


def _consume_groups(broker: BrokerContext) -> dict[str, set[str]]:
    """group -> the topics it committed on here or subscribes to now."""
    groups: dict[str, set[str]] = {}
    for key in broker.offsets.table:
        topic, _, group = str(key).rpartition("@")
        if topic and group not in _INTERNAL_GROUPS:
            groups.setdefault(group, set()).add(topic)
    for group, info in list(broker.clients.consumers.items()):
        if group not in _INTERNAL_GROUPS:
            groups.setdefault(group, set()).update(info.subscriptions)
    return groups


async def broker_consume_stats(broker: BrokerContext, conn: Connection,
                               req: RemotingCommand) -> RemotingCommand | None:
    """Every group's lag on every topic it consumes here (fetchAllConsumeStatsInBroker):
    consumeStatsList is [{group: [ConsumeStats of each topic]}], totalDiff the sum of the lags
    (brokerAddr, which RocketMQ adds, is left to the asker, who dialled it).
    isOrder keeps the groups that lock queues here (orderly consumers) only."""
    only_orderly = opt_bool(req.ext_fields, "isOrder")
    listed: list[dict[str, list[dict[str, Any]]]] = []
    total = 0
    for group, topics in sorted(_consume_groups(broker).items()):
        if only_orderly and not broker.locks.has_group(group):
            continue
        stats = []
        for topic in sorted(topics):
            body = consume_stats(broker, group, topic)
            if not body["offsetTable"]:
                continue
            body["consumeTps"] = _tps(broker, topic, group)
            total += sum(max(v["brokerOffset"] - v["consumerOffset"], 0)
                         for v in body["offsetTable"].values())
            stats.append(body)
        if stats:
            listed.append({group: stats})
    body = {"totalDiff": total,
            "consumeStatsList": listed}
    return reply(req, ResponseCode.SUCCESS, body=jsonx.dumps_bytes(body))


def _tps(broker: BrokerContext, topic: str, group: str) -> float:
    figures = broker.stats.window_figures("got", (topic, group))
    return 0.0 if figures is None else round(figures["statsMinute"].tps, 2)


# RocketMQ's stats names (BrokerStatsManager) this broker keeps, and what each counts.
STATS_NAMES = {"TOPIC_PUT_NUMS": "put", "GROUP_GET_NUMS": "got"}


async def view_broker_stats_data(broker: BrokerContext, conn: Connection,
                                 req: RemotingCommand) -> RemotingCommand | None:
    """statsMinute/statsHour/statsDay of one counter: TOPIC_PUT_NUMS keyed by topic,
    GROUP_GET_NUMS keyed by topic@group."""
    name, key = req_str(req.ext_fields, "statsName"), req_str(req.ext_fields, "statsKey")
    kind = STATS_NAMES.get(name)
    if kind is None:
        return reply(req, ResponseCode.SYSTEM_ERROR,
                     f"The stats <{name}> is not kept here (kept: {', '.join(STATS_NAMES)})")
    lookup: str | tuple[str, str] = key
    if kind == "got":
        topic, _, group = key.partition("@")
        lookup = (topic, group)
    figures = broker.stats.window_figures(kind, lookup)
    if figures is None:
        return reply(req, ResponseCode.SYSTEM_ERROR, f"The stats <{name}> <{key}> not exist")
    body = {k: f.to_json() for k, f in figures.items()}
    return reply(req, ResponseCode.SUCCESS, body=jsonx.dumps_bytes(body))


HANDLERS = {
    RequestCode.GET_PRODUCER_CONNECTION_LIST: producer_connections,
    RequestCode.GET_CONSUMER_RUNNING_INFO: consumer_running_info,
    RequestCode.CLONE_GROUP_OFFSET: clone_group_offset,
    RequestCode.GET_BROKER_CONSUME_STATS: broker_consume_stats,
    RequestCode.VIEW_BROKER_STATS_DATA: view_broker_stats_data,
}
