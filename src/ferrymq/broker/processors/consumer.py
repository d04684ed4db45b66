"""Client management and consumer progress: HEART_BEAT, UNREGISTER_CLIENT,
GET_CONSUMER_LIST_BY_GROUP, QUERY/UPDATE_CONSUMER_OFFSET, LOCK/UNLOCK_BATCH_MQ."""

from __future__ import annotations

from typing import Any

from ...common import jsonx
from ...common.codes import LanguageCode, RequestCode, ResponseCode
from ...common.headers import SET_ZERO_IF_NOT_FOUND, fields, opt_int, opt_str, req_int, req_str
from ...common.names import retry_topic, validate_group
from ...common.progress import (
    HANDOVER_WAIT_MS,
    RELEASED,
    WITH_ACK_RANGES,
    ProgressDecodeError,
    decode_progress,
    decode_ranges,
    encode_ranges,
)
from ...remoting import Connection, RemotingCommand
from ..clients import ClientChannel, parse_subscription
from ..context import BrokerContext
from ..events import MessageEvent, MessageEventKind
from ..init_offset import young_queue_start
from . import reply

_WATCHED = "_ferrymq_client_watch"


def _watch(broker: BrokerContext, conn: Connection) -> None:
    if not getattr(conn, _WATCHED, False):
        setattr(conn, _WATCHED, True)
        conn.on_close(broker.clients.drop_connection)
        conn.on_close(broker.handover.connection_closed)


# Java and ali-ons send enum names; the C++ client sends their ordinals (fastjson reads both).
_MESSAGE_MODELS = ("BROADCASTING", "CLUSTERING")
_CONSUME_TYPES = ("CONSUME_ACTIVELY", "CONSUME_PASSIVELY")
_CONSUME_FROM = ("CONSUME_FROM_LAST_OFFSET", "CONSUME_FROM_LAST_OFFSET_AND_FROM_MIN_WHEN_BOOT_FIRST",
                 "CONSUME_FROM_MIN_OFFSET", "CONSUME_FROM_MAX_OFFSET", "CONSUME_FROM_FIRST_OFFSET",
                 "CONSUME_FROM_TIMESTAMP")


def _enum_name(value: object, names: tuple[str, ...], default: str) -> str:
    if value is None or value == "":
        return default
    if isinstance(value, int) and not isinstance(value, bool):
        return names[value] if 0 <= value < len(names) else default
    text = str(value)
    if text.isdigit():
        return names[int(text)] if int(text) < len(names) else default
    return text


def _language_name(code: int) -> str:
    try:
        return LanguageCode(code).name
    except ValueError:
        return "OTHER"


async def heart_beat(broker: BrokerContext, conn: Connection, req: RemotingCommand) -> RemotingCommand | None:
    try:
        data: dict[str, Any] = jsonx.loads(req.body or b"{}")
    except ValueError as exc:
        return reply(req, ResponseCode.SYSTEM_ERROR, f"heartbeat body is not JSON: {exc}")
    client_id = str(data.get("clientID") or conn.remote_addr)
    now = broker.now_ms()
    _watch(broker, conn)
    created = False
    language = _language_name(req.language)
    for consumer in data.get("consumerDataSet") or []:
        group = str(consumer.get("groupName", ""))
        validate_group(group)
        subs = []
        for s in consumer.get("subscriptionDataSet") or []:
            topic = str(s.get("topic", ""))
            subs.append(parse_subscription(topic, s.get("subString"), int(s.get("subVersion") or 0),
                                           str(s.get("expressionType") or "TAG"),
                                           property_filter=broker.config.enable_property_filter))
        model = _enum_name(consumer.get("messageModel"), _MESSAGE_MODELS, "CLUSTERING")
        # The group's entry, created here on its first heartbeat (one dict lookup after that);
        # without one (auto-creation off) the consumer is still registered, as RocketMQ does,
        # and its pulls are refused.
        group_cfg = broker.groups.find(group)
        if (group_cfg is not None and model == "CLUSTERING"
                and broker.topics.get(retry_topic(group)) is None):
            broker.topics.create_group_topic(retry_topic(group), group_cfg.retry_queue_nums)
            created = True
        broker.clients.register_consumer(
            group,
            ClientChannel(client_id, conn, language, req.version, now,
                          releases_queues=consumer.get("releasesQueues") is True),
            consume_type=_enum_name(consumer.get("consumeType"), _CONSUME_TYPES, "CONSUME_PASSIVELY"),
            message_model=model,
            consume_from_where=_enum_name(consumer.get("consumeFromWhere"), _CONSUME_FROM,
                                          "CONSUME_FROM_LAST_OFFSET"),
            subscriptions=subs,
        )
    for producer in data.get("producerDataSet") or []:
        broker.clients.register_producer(
            str(producer.get("groupName", "")), ClientChannel(client_id, conn, language, req.version, now)
        )
    if created:
        # The client asks the name server for %RETRY%<group>'s route right after this answer;
        # registering first means it finds the route instead of waiting for its next poll.
        await broker.register_once()
    return reply(req, ResponseCode.SUCCESS)


async def unregister_client(broker: BrokerContext, conn: Connection, req: RemotingCommand) -> RemotingCommand | None:
    ext = req.ext_fields
    broker.clients.unregister(conn, producer_group=opt_str(ext, "producerGroup"),
                              consumer_group=opt_str(ext, "consumerGroup"))
    return reply(req, ResponseCode.SUCCESS)


async def consumer_list(broker: BrokerContext, conn: Connection, req: RemotingCommand) -> RemotingCommand | None:
    group = req_str(req.ext_fields, "consumerGroup")
    info = broker.clients.consumer_group(group)
    if info is None or not info.channels:
        return reply(req, ResponseCode.SYSTEM_ERROR, f"no consumer for this group, {group}")
    return reply(req, ResponseCode.SUCCESS, body=jsonx.dumps_bytes({"consumerIdList": info.client_ids()}))


async def query_consumer_offset(broker: BrokerContext, conn: Connection,
                                req: RemotingCommand) -> RemotingCommand | None:
    ext = req.ext_fields
    group, topic, queue_id = req_str(ext, "consumerGroup"), req_str(ext, "topic"), req_int(ext, "queueId")
    wait_ms = opt_int(ext, HANDOVER_WAIT_MS, 0)
    if wait_ms > 0 and broker.clients.is_member(group, conn):
        # A member taking the queue over: the owner's last progress first (handover.py).
        await broker.handover.wait_released(group, topic, queue_id, conn, wait_ms / 1000)
    progress = broker.offsets.progress(group, topic, queue_id)
    if progress is not None and progress.offset >= 0:
        # Ranges only for a ferrymq client that asks: Apache clients see RocketMQ's answer.
        body = encode_ranges(progress.acked) if ext.get(WITH_ACK_RANGES) == "true" else None
        return reply(req, ResponseCode.SUCCESS, ext_fields=fields(offset=progress.offset), body=body)
    if ext.get(SET_ZERO_IF_NOT_FOUND) == "false":
        return reply(req, ResponseCode.QUERY_NOT_FOUND, "Not found, do not set to zero, maybe this group boot first")
    store = broker.store
    group_cfg = broker.groups.get(group)
    # consume_from_min_enable off: a young queue's first offset is not offered; the client's
    # consume-from-where decides, as for any queue.
    if store is not None and (group_cfg is None or group_cfg.consume_from_min_enable):
        start = young_queue_start(store, topic, queue_id, broker.config.access_message_in_memory_max_ratio)
        if start is not None:
            return reply(req, ResponseCode.SUCCESS, ext_fields=fields(offset=start))
    # Otherwise a group that never committed here decides where to start (consume-from-where).
    return reply(req, ResponseCode.QUERY_NOT_FOUND, "Not found, V3_0_6_SNAPSHOT maybe this group consumer boot first")


async def update_consumer_offset(broker: BrokerContext, conn: Connection,
                                 req: RemotingCommand) -> RemotingCommand | None:
    ext = req.ext_fields
    group, topic, queue_id = req_str(ext, "consumerGroup"), req_str(ext, "topic"), req_int(ext, "queueId")
    offset = req_int(ext, "commitOffset")
    await broker.offsets.wait_durable(broker.offsets.commit(group, topic, queue_id, offset, broker.now_ms()))
    if broker.events.wants(MessageEventKind.COMMITTED):
        broker.events.emit(MessageEvent(MessageEventKind.COMMITTED, topic, queue_id, offset, group=group,
                                        client=conn.remote_addr))
    return reply(req, ResponseCode.SUCCESS)


async def update_ack_ranges(broker: BrokerContext, conn: Connection, req: RemotingCommand) -> RemotingCommand | None:
    """ferrymq extension: the committed offset plus the ranges above it already consumed."""
    ext = req.ext_fields
    group, topic, queue_id = req_str(ext, "consumerGroup"), req_str(ext, "topic"), req_int(ext, "queueId")
    offset = req_int(ext, "commitOffset")
    try:
        ranges = decode_ranges(req.body, offset)
    except ProgressDecodeError as exc:
        return reply(req, ResponseCode.SYSTEM_ERROR, str(exc))
    await broker.offsets.wait_durable(
        broker.offsets.commit(group, topic, queue_id, offset, broker.now_ms(), acked=ranges))
    return reply(req, ResponseCode.SUCCESS)


async def update_consumer_progress(broker: BrokerContext, conn: Connection,
                                   req: RemotingCommand) -> RemotingCommand | None:
    """ferrymq extension: offsets and acknowledged ranges of many queues of one group."""
    try:
        group, updates = decode_progress(req.body)
    except ProgressDecodeError as exc:
        return reply(req, ResponseCode.SYSTEM_ERROR, str(exc))
    now = broker.now_ms()
    seq = 0
    releasing = req.ext_fields.get(RELEASED) == "true"
    for u in updates:
        seq = max(seq, broker.offsets.commit(group, u.topic, u.queue_id, u.offset, now, acked=list(u.acked)))
        if broker.events.wants(MessageEventKind.COMMITTED):
            broker.events.emit(MessageEvent(MessageEventKind.COMMITTED, u.topic, u.queue_id, u.offset,
                                            group=group, client=conn.remote_addr))
    if req.is_oneway and not releasing:
        # A consumer's prompt round (one per few completions): applied above, it outlives the
        # consumer; the journal takes it with its next write (journal_delay at the latest)
        # rather than with an fsync of its own that nobody waits for.
        return None
    await broker.offsets.wait_durable(seq)
    if releasing:  # durable first: the next owner starts from what it reads
        for u in updates:
            broker.handover.released(group, u.topic, u.queue_id, conn)
    return reply(req, ResponseCode.SUCCESS)


def _mq_list(body: dict[str, Any]) -> list[tuple[str, str, int]]:
    return [(str(m["topic"]), str(m["brokerName"]), int(m["queueId"])) for m in body.get("mqSet") or []]


def _mq_json(mqs: list[tuple[str, str, int]]) -> list[dict[str, Any]]:
    return [{"brokerName": b, "queueId": q, "topic": t} for t, b, q in mqs]


async def lock_batch(broker: BrokerContext, conn: Connection, req: RemotingCommand) -> RemotingCommand | None:
    body = jsonx.loads(req.body or b"{}")
    group = str(body.get("consumerGroup", ""))
    client_id = str(body.get("clientId", ""))
    locked = broker.locks.try_lock_batch(group, client_id, _mq_list(body), broker.now_ms())
    return reply(req, ResponseCode.SUCCESS, body=jsonx.dumps_bytes({"lockOKMQSet": _mq_json(locked)}))


async def unlock_batch(broker: BrokerContext, conn: Connection, req: RemotingCommand) -> RemotingCommand | None:
    body = jsonx.loads(req.body or b"{}")
    broker.locks.unlock_batch(str(body.get("consumerGroup", "")), str(body.get("clientId", "")),
                              _mq_list(body))
    return reply(req, ResponseCode.SUCCESS)


async def check_client_config(broker: BrokerContext, conn: Connection, req: RemotingCommand) -> RemotingCommand | None:
    """What a Java consumer asks on start for a non-tag subscription: an SQL92 selector is
    compiled, and refused (by parse_subscription) when invalid or when the broker does not
    filter by properties."""
    try:
        body = jsonx.loads(req.body or b"{}")
    except ValueError as exc:
        return reply(req, ResponseCode.SYSTEM_ERROR, f"check client config body is not JSON: {exc}")
    sub = body.get("subscriptionData") if isinstance(body, dict) else None
    if isinstance(sub, dict):
        parse_subscription(str(sub.get("topic", "")), sub.get("subString"), 0,
                           str(sub.get("expressionType") or "TAG"),
                           property_filter=broker.config.enable_property_filter)
    return reply(req, ResponseCode.SUCCESS)


HANDLERS = {
    RequestCode.HEART_BEAT: heart_beat,
    RequestCode.UNREGISTER_CLIENT: unregister_client,
    RequestCode.GET_CONSUMER_LIST_BY_GROUP: consumer_list,
    RequestCode.QUERY_CONSUMER_OFFSET: query_consumer_offset,
    RequestCode.UPDATE_CONSUMER_OFFSET: update_consumer_offset,
    RequestCode.UPDATE_CONSUMER_ACK_RANGES: update_ack_ranges,
    RequestCode.UPDATE_CONSUMER_PROGRESS: update_consumer_progress,
    RequestCode.LOCK_BATCH_MQ: lock_batch,
    RequestCode.UNLOCK_BATCH_MQ: unlock_batch,
    RequestCode.CHECK_CLIENT_CONFIG: check_client_config,
}

