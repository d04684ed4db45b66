"""Queries and administration: offsets by queue/time, message lookups, topics, runtime info,
consume stats, connections and offset reset."""

from __future__ import annotations

import contextlib
import os
import platform
from pathlib import Path
from typing import Any

from ...common import jsonx, topic_types
from ...common.codes import RequestCode, ResponseCode
from ...common.headers import PERM_READ, PERM_WRITE, fields, opt_bool, opt_int, opt_str, req_int, req_str
from ...common.ids import MessageIdError, decode_offset_msg_id
from ...common.javaprops import format_properties, parse_properties
from ...common.jsonx import FrozenKey
from ...common.names import is_reserved_topic, validate_topic
from ...common.topic_types import TopicAttributeError
from ...remoting import Connection, RemotingCommand
from ..config import ConfigError
from ..config_file import write_back
from ..context import BrokerContext
from ..runtime_config import apply_runtime_update, config_properties, field_name
from ..topics import ReadShrinkRefused, TopicConfig, check_read_shrink
from . import log, reply


def _mq_key(topic: str, broker_name: str, queue_id: int) -> FrozenKey:
    return FrozenKey((("brokerName", broker_name), ("queueId", queue_id), ("topic", topic)))


async def get_max_offset(broker: BrokerContext, conn: Connection, req: RemotingCommand) -> RemotingCommand | None:
    ext = req.ext_fields
    assert broker.store is not None
    offset = broker.store.reads.get_max_offset(req_str(ext, "topic"), req_int(ext, "queueId"))
    return reply(req, ResponseCode.SUCCESS, ext_fields=fields(offset=offset))


async def get_min_offset(broker: BrokerContext, conn: Connection, req: RemotingCommand) -> RemotingCommand | None:
    ext = req.ext_fields
    assert broker.store is not None
    offset = broker.store.reads.get_min_offset(req_str(ext, "topic"), req_int(ext, "queueId"))
    return reply(req, ResponseCode.SUCCESS, ext_fields=fields(offset=offset))


async def search_offset(broker: BrokerContext, conn: Connection, req: RemotingCommand) -> RemotingCommand | None:
    ext = req.ext_fields
    assert broker.store is not None
    offset = broker.store.reads.get_offset_by_time(req_str(ext, "topic"), req_int(ext, "queueId"),
                                             req_int(ext, "timestamp"))
    return reply(req, ResponseCode.SUCCESS, ext_fields=fields(offset=offset))


async def earliest_store_time(broker: BrokerContext, conn: Connection, req: RemotingCommand) -> RemotingCommand | None:
    ext = req.ext_fields
    assert broker.store is not None
    ts = broker.store.reads.get_earliest_store_time(req_str(ext, "topic"), req_int(ext, "queueId"))
    return reply(req, ResponseCode.SUCCESS, ext_fields=fields(timestamp=ts))


async def view_message(broker: BrokerContext, conn: Connection, req: RemotingCommand) -> RemotingCommand | None:
    assert broker.store is not None
    offset = req_int(req.ext_fields, "offset")
    raw = broker.store.reads.read_record(offset)
    if raw is None:
        return reply(req, ResponseCode.SYSTEM_ERROR, f"can not find message by the offset, {offset}")
    return reply(req, ResponseCode.SUCCESS, body=raw)


async def query_message(broker: BrokerContext, conn: Connection, req: RemotingCommand) -> RemotingCommand | None:
    ext = req.ext_fields
    store = broker.store
    assert store is not None
    topic, key = req_str(ext, "topic"), req_str(ext, "key")
    max_num = max(1, min(opt_int(ext, "maxNum", 32), 1000))
    if opt_bool(ext, "_UNIQUE_KEY_QUERY"):
        hits = store.reads.find_by_uniq_key(topic, key)[:max_num]
    else:
        hits = store.reads.find_by_key(topic, key, max_num, opt_int(ext, "beginTimestamp", 0),
                                 opt_int(ext, "endTimestamp", 2**63 - 1))
    records = [hit.raw for hit in hits]
    if not records:
        return reply(req, ResponseCode.QUERY_NOT_FOUND, f"can not find message, topic {topic} key {key}")
    return reply(req, ResponseCode.SUCCESS, body=b"".join(records), ext_fields=fields(
        indexLastUpdateTimestamp=broker.now_ms(), indexLastUpdatePhyoffset=store.max_phy_offset))


async def view_message_by_msg_id(broker: BrokerContext, msg_id: str) -> bytes | None:
    try:
        decoded = decode_offset_msg_id(msg_id)
    except MessageIdError:
        return None
    assert broker.store is not None
    return broker.store.reads.read_record(decoded.offset)


def _reserved(broker: BrokerContext, req: RemotingCommand, topic: str) -> RemotingCommand | None:
    """Changing a system topic breaks the broker for everyone (TBW102 is the template that
    auto-created topics copy; rewriting it turned auto-creation off), so no client may."""
    if is_reserved_topic(topic, broker.config.broker_cluster_name, broker.config.broker_name):
        return reply(req, ResponseCode.SYSTEM_ERROR,
                     f"the topic[{topic}] is conflict with system topic: system topics cannot be "
                     "created, updated or deleted")
    return None


async def update_topic(broker: BrokerContext, conn: Connection, req: RemotingCommand) -> RemotingCommand | None:
    ext = req.ext_fields
    topic = req_str(ext, "topic")
    validate_topic(topic)
    if refused := _reserved(broker, req, topic):
        return refused
    read = opt_int(ext, "readQueueNums", 4)
    write = opt_int(ext, "writeQueueNums", 4)
    if not (1 <= read <= 1024 and 1 <= write <= 1024):
        return reply(req, ResponseCode.SYSTEM_ERROR, "queue numbers must be between 1 and 1024")
    existing = broker.topics.get(topic)
    if existing is not None and read < existing.read_queue_nums and not opt_bool(ext, "force"):
        try:
            _check_read_shrink(broker, topic, existing.read_queue_nums, read)
        except ReadShrinkRefused as exc:
            # Not SYSTEM_ERROR, which clients retry: the same request is refused again.
            return reply(req, ResponseCode.INVALID_PARAMETER, str(exc))
    try:
        attributes = topic_types.alter(existing.attributes if existing is not None else {},
                                       opt_str(ext, "attributes", "") or "",
                                       allow_mixed=broker.config.enable_mixed_message_type)
    except TopicAttributeError as exc:
        return reply(req, ResponseCode.INVALID_PARAMETER, exc.reason)
    broker.topics.upsert(TopicConfig(topic, read, write, opt_int(ext, "perm", PERM_READ | PERM_WRITE),
                                     opt_int(ext, "topicSysFlag", 0), opt_bool(ext, "order"), attributes))
    # As RocketMQ does: the topic is on disk and the name server knows it before the creator
    # hears "done", so a producer that starts right after finds its route.
    await broker.persist_topics()
    await broker.register_once()
    return reply(req, ResponseCode.SUCCESS)


def _check_read_shrink(broker: BrokerContext, topic: str, old_read: int, new_read: int) -> None:
    """Queues past the new read count are not read by any consumer any more (RocketMQ's
    rebalance allocates read queues only): what some group of the topic has not consumed
    there is refused. The groups are those with a committed offset on the topic here and
    those subscribed to it now."""
    store = broker.store
    assert store is not None
    groups = broker.offsets.groups_of_topic(topic) | set(broker.clients.groups_subscribed_to(topic))
    check_read_shrink(
        topic, old_read, new_read,
        lambda q: (store.reads.get_min_offset(topic, q), store.reads.get_max_offset(topic, q)),
        lambda q: [broker.offsets.query(g, topic, q) for g in groups])


async def delete_topic(broker: BrokerContext, conn: Connection, req: RemotingCommand) -> RemotingCommand | None:
    topic = req_str(req.ext_fields, "topic")
    if refused := _reserved(broker, req, topic):
        return refused
    broker.topics.delete(topic)
    assert broker.store is not None
    broker.store.delete_queue(topic)
    await broker.persist_topics()
    await broker.register_once()
    return reply(req, ResponseCode.SUCCESS)


async def topic_config(broker: BrokerContext, conn: Connection, req: RemotingCommand) -> RemotingCommand | None:
    """GET_TOPIC_CONFIG: one topic's config with its attributes (RocketMQ's
    TopicConfigAndQueueMapping; ferrymq has no static queue mapping)."""
    topic = req_str(req.ext_fields, "topic")
    cfg = broker.topics.get(topic)
    if cfg is None:
        return reply(req, ResponseCode.TOPIC_NOT_EXIST, f"No topic in this broker. topic: {topic}")
    return reply(req, ResponseCode.SUCCESS, body=jsonx.dumps_bytes(
        {**cfg.to_json(), "attributes": dict(cfg.attributes)}))


async def clean_unused_topic(broker: BrokerContext, conn: Connection, req: RemotingCommand) -> RemotingCommand | None:
    """CLEAN_UNUSED_TOPIC (RocketMQ's cleanUnusedTopic): delete the consume queues of topics the
    broker has no configuration for, what a topic deletion or a lost topic table leaves behind.
    System topics (the schedule, timer, transaction, revive ones) have queues without entries
    in the table and are kept, as RocketMQ keeps them. The body names the topics cleaned (a
    ferrymq addition; RocketMQ answers none)."""
    assert broker.store is not None
    configured = broker.topics.topics
    cfg = broker.config
    unused = sorted(t for t in broker.store.reads.queues() if t not in configured
                    and not is_reserved_topic(t, cfg.broker_cluster_name, cfg.broker_name))
    for topic in unused:
        broker.store.delete_queue(topic)
    if unused:
        log.warning("clean unused topics by %s: consume queues of %s deleted", conn.remote_addr, ", ".join(unused))
    return reply(req, ResponseCode.SUCCESS, body=jsonx.dumps_bytes({"topics": unused}))


async def all_topic_config(broker: BrokerContext, conn: Connection, req: RemotingCommand) -> RemotingCommand | None:
    return reply(req, ResponseCode.SUCCESS, body=jsonx.dumps_bytes(broker.topics.wrapper_json()))


async def runtime_info(broker: BrokerContext, conn: Connection, req: RemotingCommand) -> RemotingCommand | None:
    store = broker.store
    assert store is not None
    table = {
        "brokerVersionDesc": "ferrymq 0.1.0",
        "brokerVersion": str(req.version),
        "bootTimestamp": str(broker.started_ms),
        "commitLogMaxOffset": str(store.max_phy_offset),
        "commitLogMinOffset": str(store.min_phy_offset),
        "commitLogDiskRatio": f"{store.retention.disk_ratio():.4f}",
        "flushedOffset": str(store.flushed_offset),
        "pullHeldRequests": str(broker.waiters.pending() if broker.waiters else 0),
        "topicCount": str(len(broker.topics.topics)),
        "consumerGroupCount": str(len(broker.clients.consumers)),
        "runtime": f"python {platform.python_version()} pid {os.getpid()}",
        **broker.stats.runtime_table(),
        **broker.connection_table(),
        **broker.ha_table(),
        **(broker.trace.runtime_table() if broker.trace is not None else {"traceEnable": "false"}),
    }
    return reply(req, ResponseCode.SUCCESS, body=jsonx.dumps_bytes({"table": table}))


def consume_stats(broker: BrokerContext, group: str, topic: str | None) -> dict[str, Any]:
    store = broker.store
    assert store is not None
    info = broker.clients.consumer_group(group)
    subscribed = set(info.subscriptions) if info is not None else set()
    topics = [topic] if topic else sorted(broker.offsets.topics_of_group(group) | subscribed)
    table: dict[Any, Any] = {}
    for t in topics:
        cfg = broker.topics.get(t)
        if cfg is None:
            continue
        for qid in range(cfg.read_queue_nums):
            broker_offset = store.reads.get_max_offset(t, qid)
            consumer_offset = broker.offsets.query(group, t, qid)
            consumer_offset = max(consumer_offset, 0)
            last_ts = 0
            if consumer_offset > 0:
                with contextlib.suppress(Exception):
                    last_ts = store.reads.get_store_time(t, qid, consumer_offset - 1)
            table[_mq_key(t, broker.config.broker_name, qid)] = {
                "brokerOffset": broker_offset, "consumerOffset": consumer_offset, "lastTimestamp": last_ts,
            }
    return {"consumeTps": 0.0, "offsetTable": table}


async def get_consume_stats(broker: BrokerContext, conn: Connection, req: RemotingCommand) -> RemotingCommand | None:
    ext = req.ext_fields
    body = consume_stats(broker, req_str(ext, "consumerGroup"), opt_str(ext, "topic") or None)
    return reply(req, ResponseCode.SUCCESS, body=jsonx.dumps_bytes(body))


async def topic_stats(broker: BrokerContext, conn: Connection, req: RemotingCommand) -> RemotingCommand | None:
    store = broker.store
    assert store is not None
    topic = req_str(req.ext_fields, "topic")
    cfg = broker.topics.get(topic)
    if cfg is None:
        return reply(req, ResponseCode.TOPIC_NOT_EXIST, f"topic[{topic}] not exist")
    table: dict[Any, Any] = {}
    for qid in range(max(cfg.read_queue_nums, cfg.write_queue_nums)):
        max_off = store.reads.get_max_offset(topic, qid)
        last = 0
        if max_off > 0:
            with contextlib.suppress(Exception):
                last = store.reads.get_store_time(topic, qid, max_off - 1)
        table[_mq_key(topic, broker.config.broker_name, qid)] = {
            "minOffset": store.reads.get_min_offset(topic, qid), "maxOffset": max_off, "lastUpdateTimestamp": last,
        }
    return reply(req, ResponseCode.SUCCESS, body=jsonx.dumps_bytes({"offsetTable": table}))


async def consumer_connections(broker: BrokerContext, conn: Connection, req: RemotingCommand) -> RemotingCommand | None:
    group = req_str(req.ext_fields, "consumerGroup")
    info = broker.clients.consumer_group(group)
    if info is None or not info.channels:
        return reply(req, ResponseCode.CONSUMER_NOT_ONLINE, f"the consumer group[{group}] not online")
    body = {
        "connectionSet": [
            {"clientAddr": c.addr, "clientId": c.client_id, "language": c.language, "version": c.version}
            for c in info.channels.values()
        ],
        "consumeFromWhere": info.consume_from_where,
        "consumeType": info.consume_type,
        "messageModel": info.message_model,
        "subscriptionTable": {t: s.to_json() for t, s in info.subscriptions.items()},
    }
    return reply(req, ResponseCode.SUCCESS, body=jsonx.dumps_bytes(body))


async def reset_offset(broker: BrokerContext, conn: Connection, req: RemotingCommand) -> RemotingCommand | None:
    """Move a group's offsets on a topic to a timestamp (-1 = the end), commit them here so an
    offline group resumes there, and tell online members to drop what they hold."""
    ext = req.ext_fields
    store = broker.store
    assert store is not None
    topic, group = req_str(ext, "topic"), req_str(ext, "group")
    timestamp = req_int(ext, "timestamp")
    force = opt_bool(ext, "isForce", True)
    cfg = broker.topics.get(topic)
    if cfg is None:
        return reply(req, ResponseCode.TOPIC_NOT_EXIST, f"topic[{topic}] not exist")
    info = broker.clients.consumer_group(group)
    if not broker.offsets.queue_offsets(group, topic) and (info is None or not info.channels):
        # As RocketMQ's Broker2Client.resetOffset: a reset must not create a group that a
        # typo named; a group exists here once it committed on the topic or is online.
        return reply(req, ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST,
                     f"the consumer group[{group}] does not exist: it has no offset on topic[{topic}] "
                     "and no consumer online")
    table: dict[Any, int] = {}
    seq = 0
    for qid in range(cfg.read_queue_nums):
        if timestamp < 0:
            target = store.reads.get_max_offset(topic, qid)
        else:
            target = store.reads.get_offset_by_time(topic, qid, timestamp)
        current = broker.offsets.query(group, topic, qid)
        if force or current < 0 or target < current:
            seq = max(seq, broker.offsets.commit(group, topic, qid, target, broker.now_ms()))
            table[_mq_key(topic, broker.config.broker_name, qid)] = target
    await broker.offsets.wait_durable(seq)  # answered, so on disk: a crash must not undo it
    body = jsonx.dumps_bytes({"offsetTable": table})
    if info is not None:
        notice = RemotingCommand.request(
            RequestCode.RESET_CONSUMER_CLIENT_OFFSET,
            ext_fields=fields(topic=topic, group=group, timestamp=timestamp, isForce=force), body=body)
        for channel in list(info.channels.values()):
            with contextlib.suppress(Exception):
                await channel.conn.invoke_oneway(notice)
    return reply(req, ResponseCode.SUCCESS, body=body)


async def all_consumer_offsets(broker: BrokerContext, conn: Connection, req: RemotingCommand) -> RemotingCommand | None:
    # ferrymq's acknowledged ranges above each offset ride along (RocketMQ clients ignore the
    # key), so a slave taking over does not deliver them again.
    return reply(req, ResponseCode.SUCCESS, body=jsonx.dumps_bytes(broker.offsets.table_json()))


async def all_delay_offsets(broker: BrokerContext, conn: Connection, req: RemotingCommand) -> RemotingCommand | None:
    body: dict[str, object] = {"offsetTable": broker.delay_offsets.table}
    timer = broker.timer_position()
    if timer is not None:  # ferrymq's timer wheel position, for slaves (docs/replication.md)
        body["ferrymqTimer"] = {"readTimeMs": timer[0], "enqueueOffset": timer[1]}
    return reply(req, ResponseCode.SUCCESS, body=jsonx.dumps_bytes(body))


async def topic_consumed_by(broker: BrokerContext, conn: Connection, req: RemotingCommand) -> RemotingCommand | None:
    topic = req_str(req.ext_fields, "topic")
    groups = broker.offsets.groups_of_topic(topic) | set(broker.clients.groups_subscribed_to(topic))
    return reply(req, ResponseCode.SUCCESS, body=jsonx.dumps_bytes({"groupList": sorted(groups)}))


async def get_broker_config(broker: BrokerContext, conn: Connection, req: RemotingCommand) -> RemotingCommand | None:
    body = format_properties(config_properties(broker.config)).encode("utf-8")
    return reply(req, ResponseCode.SUCCESS, body=body)


async def update_broker_config(broker: BrokerContext, conn: Connection, req: RemotingCommand) -> RemotingCommand | None:
    values = parse_properties((req.body or b"").decode("utf-8", "replace"))
    if not values:
        return reply(req, ResponseCode.SYSTEM_ERROR, "no key=value in the request body")
    try:
        updated = apply_runtime_update(broker.config, values)
    except ConfigError as exc:
        return reply(req, ResponseCode.NO_PERMISSION, str(exc))
    broker.reconfigure(updated)
    log.info("configuration changed at runtime by %s: %s", conn.remote_addr, values)
    path = updated.broker_config_path
    if path:
        names = [n for n in (field_name(k) for k in values) if n is not None]
        try:
            # On the loop, not a thread: two updates never interleave their read and write of
            # the file, and an operator's rare request costs one small fsync.
            write_back(Path(path), {n: getattr(updated, n) for n in names})
        except (OSError, ValueError) as exc:
            return reply(req, ResponseCode.SYSTEM_ERROR,
                         f"applied until the broker restarts, but not written to {path}: {exc}")
        log.info("configuration change written to %s", path)
    return reply(req, ResponseCode.SUCCESS)


HANDLERS = {
    RequestCode.GET_MAX_OFFSET: get_max_offset,
    RequestCode.GET_MIN_OFFSET: get_min_offset,
    RequestCode.SEARCH_OFFSET_BY_TIMESTAMP: search_offset,
    RequestCode.GET_EARLIEST_MSG_STORETIME: earliest_store_time,
    RequestCode.VIEW_MESSAGE_BY_ID: view_message,
    RequestCode.QUERY_MESSAGE: query_message,
    RequestCode.UPDATE_AND_CREATE_TOPIC: update_topic,
    RequestCode.DELETE_TOPIC_IN_BROKER: delete_topic,
    RequestCode.GET_ALL_TOPIC_CONFIG: all_topic_config,
    RequestCode.CLEAN_UNUSED_TOPIC: clean_unused_topic,
    RequestCode.GET_TOPIC_CONFIG: topic_config,
    RequestCode.GET_BROKER_RUNTIME_INFO: runtime_info,
    RequestCode.GET_CONSUME_STATS: get_consume_stats,
    RequestCode.GET_TOPIC_STATS_INFO: topic_stats,
    RequestCode.GET_CONSUMER_CONNECTION_LIST: consumer_connections,
    RequestCode.INVOKE_BROKER_TO_RESET_OFFSET: reset_offset,
    RequestCode.GET_ALL_CONSUMER_OFFSET: all_consumer_offsets,
    RequestCode.GET_ALL_DELAY_OFFSET: all_delay_offsets,
    RequestCode.QUERY_TOPIC_CONSUME_BY_WHO: topic_consumed_by,
    RequestCode.GET_BROKER_CONFIG: get_broker_config,
    RequestCode.UPDATE_BROKER_CONFIG: update_broker_config,
}
