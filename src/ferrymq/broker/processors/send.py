"""SEND_MESSAGE, SEND_MESSAGE_V2, SEND_BATCH_MESSAGE and CONSUMER_SEND_MSG_BACK."""

from __future__ import annotations

import asyncio
import random

from ...common import props as P
from ...common import topic_types
from ...common.codes import RequestCode, ResponseCode
from ...common.errors import FerryMQError
from ...common.headers import (
    PERM_WRITE,
    fields,
    opt_bool,
    opt_int,
    opt_str,
    req_int,
    req_str,
    send_header_from_v2,
)
from ...common.names import (
    AUTO_CREATE_TOPIC_KEY_TOPIC,
    TRANSACTION_TOPICS,
    dlq_topic,
    is_retry_topic,
    retry_topic,
    validate_group,
    validate_topic,
)
from ...common.recall_handle import RecallHandle
from ...common.record import (
    MARK_TIMER,
    MARK_TRANSACTION,
    MessageDecodeError,
    RecordEncodeError,
    batch_to_messages,
    decode_record,
    properties_map,
    with_property,
)
from ...remoting import Connection, RemotingCommand
from ...store import PutResult, PutStatus, StoreMessage
from ..context import BrokerContext
from ..events import MessageEvent, MessageEventKind
from ..topics import TopicConfig
from ..transaction import is_half_message
from ..transaction.records import TRANSACTION_TYPE_MASK, BatchHalfError, check_batch_half, is_batch_half
from . import reply

_PUT_CODES = {
    PutStatus.PUT_OK: ResponseCode.SUCCESS,
    PutStatus.FLUSH_DISK_TIMEOUT: ResponseCode.FLUSH_DISK_TIMEOUT,
    PutStatus.MESSAGE_ILLEGAL: ResponseCode.MESSAGE_ILLEGAL,
    PutStatus.PROPERTIES_SIZE_EXCEEDED: ResponseCode.MESSAGE_ILLEGAL,
    PutStatus.SERVICE_NOT_AVAILABLE: ResponseCode.SERVICE_NOT_AVAILABLE,
    PutStatus.DISK_FULL: ResponseCode.SERVICE_NOT_AVAILABLE,
    PutStatus.UNKNOWN_ERROR: ResponseCode.SYSTEM_ERROR,
    PutStatus.FLUSH_SLAVE_TIMEOUT: ResponseCode.FLUSH_SLAVE_TIMEOUT,
    PutStatus.SLAVE_NOT_AVAILABLE: ResponseCode.SLAVE_NOT_AVAILABLE,
}




class SendRejected(FerryMQError):
    def __init__(self, code: int, remark: str) -> None:
        super().__init__(remark)
        self.code = code
        self.remark = remark


def _type_refusal(broker: BrokerContext, cfg: TopicConfig, props: list[dict[str, str]]) -> str | None:
    """Why a typed topic refuses these messages (None: it takes them). Only a topic given a
    `message.type` is checked here: RocketMQ's broker checks no type (its proxy does), so a
    4.x client keeps sending what it always sent to the topics it always had, while a topic
    created with --type refuses the others as RocketMQ's proxy refuses them over remoting
    (an ordered 4.x send carries no sharding key: a FIFO topic takes it)."""
    expected = cfg.attributes.get(topic_types.MESSAGE_TYPE_ATTRIBUTE)
    if not expected or not broker.config.enable_topic_message_type_check:
        return None
    try:
        for p in props:
            topic_types.check_send(cfg.topic_name, expected, p, order_by_queue=True)
    except topic_types.TopicMessageTypeMismatch as exc:
        return str(exc)
    return None


def _resolve_topic(broker: BrokerContext, topic: str, default_topic: str | None, queue_nums: int) -> TopicConfig:
    validate_topic(topic)
    if topic in TRANSACTION_TOPICS:
        # Only the broker writes there: a message sent straight to the half queue would be
        # taken for a producer's open transaction.
        raise SendRejected(ResponseCode.NO_PERMISSION, f"Sending message to topic[{topic}] is forbidden.")
    cfg = broker.topics.get(topic)
    if cfg is None and is_retry_topic(topic):
        cfg = broker.topics.create_group_topic(topic)
    if cfg is None and broker.config.auto_create_topic_enable:
        cfg = broker.topics.create_in_send(topic, default_topic or AUTO_CREATE_TOPIC_KEY_TOPIC, queue_nums)
    if cfg is None:
        raise SendRejected(ResponseCode.TOPIC_NOT_EXIST,
                           f"topic[{topic}] not exist, apply first please!")
    if not cfg.perm & PERM_WRITE:
        raise SendRejected(ResponseCode.NO_PERMISSION, f"the topic[{topic}] sending is forbidden")
    return cfg


def _refuse_half(broker: BrokerContext, req: RemotingCommand) -> RemotingCommand:
    # NO_PERMISSION with RocketMQ's remark (reject_transaction_message): clients show it and do
    # not retry it.
    return reply(req, ResponseCode.NO_PERMISSION,
                 f"the broker[{broker.config.broker_name}] sending transaction message is forbidden")


def _pick_queue(cfg: TopicConfig, queue_id: int) -> int:
    if queue_id < 0:
        return random.randrange(cfg.write_queue_nums)
    if queue_id >= cfg.write_queue_nums:
        raise SendRejected(ResponseCode.SYSTEM_ERROR,
                           f"request queueId[{queue_id}] is illegal, topic {cfg.topic_name} has "
                           f"{cfg.write_queue_nums} write queues")
    return queue_id


def _retry_to_dlq(broker: BrokerContext, topic: str, ext: dict[str, str], reconsume: int,
                  props: dict[str, str]) -> tuple[str, int] | None:
    """A client that sends straight to %RETRY% (send-back fallback) has its DLQ decided here."""
    if not is_retry_topic(topic):
        return None
    group = topic[len("%RETRY%"):]
    # The client's count when it sends one (every client since RocketMQ 3.4.9), else the group's.
    max_times = opt_int(ext, "maxReconsumeTimes", broker.groups.existing(group).retry_max_times)
    if reconsume >= max_times:
        dlq = broker.topics.create_group_topic(dlq_topic(group))
        props.pop(P.PROPERTY_DELAY_TIME_LEVEL, None)
        return dlq.topic_name, 0
    return None


def _recall_handle(broker: BrokerContext, result: PutResult) -> str | None:
    """The recall handle of a single message the put stored as a timer (RocketMQ's
    attachRecallHandle): its delivery time is read back from the stored record, as the routing
    settled it."""
    store = broker.store
    if store is None or not result.status.stored or len(result.messages) != 1:
        return None
    a = result.messages[0]
    raw = store.reads.read_sound_record(a.phys_offset, a.size)
    if raw is None:
        return None
    props = decode_record(raw, decompress=False).properties
    real_topic, out_ms = props.get(P.PROPERTY_REAL_TOPIC), props.get(P.PROPERTY_TIMER_OUT_MS, "")
    uniq = props.get(P.PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX)
    if not real_topic or is_retry_topic(real_topic) or not uniq or not out_ms.isdigit():
        return None
    return RecallHandle(real_topic, broker.config.broker_name, int(out_ms), uniq).encode()


def _response(req: RemotingCommand, result: PutResult, queue_id: int, broker: BrokerContext,
              recall_handle: str | None = None) -> RemotingCommand:
    code = _PUT_CODES.get(result.status, ResponseCode.SYSTEM_ERROR)
    if not result.status.stored:
        return reply(req, code, result.reason or f"store refused the message: {result.status.name}")
    first = result.messages[0]
    msg_id = ",".join(m.offset_msg_id for m in result.messages)
    # Stored but not fully confirmed (flush or slave timeout) says why in the remark.
    return reply(req, code, result.reason or None, ext_fields=fields(
        msgId=msg_id, queueId=queue_id, queueOffset=first.queue_offset,
        MSG_REGION="DefaultRegion", TRACE_ON="true", recallHandle=recall_handle,
    ))


async def send_message(broker: BrokerContext, conn: Connection, req: RemotingCommand) -> RemotingCommand | None:
    ext = req.ext_fields
    if req.code == RequestCode.SEND_MESSAGE_V2 or (req.code == RequestCode.SEND_BATCH_MESSAGE and "b" in ext):
        ext = send_header_from_v2(ext)
    topics_version = broker.topics.version
    try:
        topic = req_str(ext, "topic")
        cfg = _resolve_topic(broker, topic, opt_str(ext, "defaultTopic"), opt_int(ext, "defaultTopicQueueNums", 4))
        queue_id = _pick_queue(cfg, opt_int(ext, "queueId", -1))
    except SendRejected as exc:
        return reply(req, exc.code, exc.remark)
    body = req.body or b""
    born_ts = opt_int(ext, "bornTimestamp", broker.now_ms())
    born_host = conn.remote_addr or "127.0.0.1:0"
    sys_flag = opt_int(ext, "sysFlag", 0)
    flag = opt_int(ext, "flag", 0)
    reconsume = opt_int(ext, "reconsumeTimes", 0)
    cluster = broker.config.broker_cluster_name
    batch = req.code == RequestCode.SEND_BATCH_MESSAGE or opt_bool(ext, "batch")
    dead_from: str | None = None  # a message sent into %RETRY% that went to the DLQ: its topic
    timer = True  # a single message is looked at by the put
    # The properties a producer sent are stored as they came, with CLUSTER added; they are
    # parsed into a map only where something must be taken out of them (a retry topic's).
    if batch:
        try:
            msgs, marks = batch_to_messages(body, StoreMessage, topic, queue_id, sys_flag, born_ts,
                                            born_host, reconsume, P.PROPERTY_CLUSTER, cluster)
        except MessageDecodeError as exc:
            return reply(req, ResponseCode.MESSAGE_ILLEGAL, f"batch body is malformed: {exc}")
        except RecordEncodeError as exc:
            return reply(req, ResponseCode.MESSAGE_ILLEGAL, exc.reason)
        if not msgs:
            return reply(req, ResponseCode.MESSAGE_ILLEGAL, "batch is empty")
        if cfg.attributes and (refused := _type_refusal(broker, cfg, [properties_map(m.properties) for m in msgs])):
            return reply(req, ResponseCode.MESSAGE_ILLEGAL, refused)
        # The marks come from the decoding pass over the entries' properties: a Python loop
        # over the messages cost a tenth of a batch put's CPU.
        tran, timer = bool(marks & MARK_TRANSACTION), bool(marks & MARK_TIMER)
        if ((tran or sys_flag & TRANSACTION_TYPE_MASK)
                and any(is_half_message(sys_flag, m.properties, reconsume) for m in msgs)):
            return reply(req, ResponseCode.MESSAGE_ILLEGAL,
                         "a batch cannot carry transactional (half) messages; send them one by one")
    else:
        text = opt_str(ext, "properties", "") or ""
        if cfg.attributes and (refused := _type_refusal(broker, cfg, [P.string_to_properties(text)])):
            return reply(req, ResponseCode.MESSAGE_ILLEGAL, refused)
        if is_half_message(sys_flag, text.encode(), reconsume):
            return await _send_half(broker, req, cfg, queue_id, text, body, ext, born_host, topics_version)
        dlq = None
        props: dict[str, str] | bytes
        if is_retry_topic(topic):
            props = P.string_to_properties(text)
            props[P.PROPERTY_CLUSTER] = cluster
            dlq = _retry_to_dlq(broker, topic, ext, reconsume, props)
            if dlq:
                dead_from = props.get(P.PROPERTY_RETRY_TOPIC, topic)
        else:
            props = with_property(text.encode(), P.PROPERTY_CLUSTER, cluster)
        target_topic, target_qid = dlq if dlq else (topic, queue_id)
        msgs = [StoreMessage(topic=target_topic, queue_id=target_qid, body=body, properties=props,
                             flag=flag, sys_flag=sys_flag, born_timestamp=born_ts,
                             born_host=born_host, reconsume_times=reconsume)]
        queue_id = target_qid
    if broker.topics.version != topics_version:
        # A topic created by this send (auto-created, or a DLQ) is on disk before its message
        # is answered: after a crash the message must not sit in a topic the broker forgot.
        await broker.persist_topics()
    # A batch carries no delay level (batch_to_messages refuses one); without TIMER_ in any of
    # its properties it asks for no timer either, and the put skips the per-message lookups.
    waiters = broker.waiters
    woken = 0 if waiters is None else waiters.woken
    result = await broker.put(msgs, allow_delay=not batch or timer)
    if waiters is not None and waiters.woken != woken:
        # A consumer waits for these messages in a held pull: its answer goes out before this
        # one, which only tells the producer what it already expects.
        await asyncio.sleep(0)
    if dead_from is not None and result.status.stored:
        # Counted as CONSUMER_SEND_MSG_BACK counts its dead letters: an orderly consumer
        # dead-letters this way (RocketMQ's ConsumeMessageOrderlyService.sendMessageBack).
        broker.stats.count_send_back(dead_from, topic[len("%RETRY%"):], True)
    # Only a single message that asked for a timer has a handle to look up.
    asked_timer = not batch and "TIMER_" in (opt_str(ext, "properties", "") or "")
    return _response(req, result, queue_id, broker, _recall_handle(broker, result) if asked_timer else None)


async def _send_half(broker: BrokerContext, req: RemotingCommand, cfg: TopicConfig, queue_id: int,
                     text: str, body: bytes, ext: dict[str, str], born_host: str,
                     topics_version: int) -> RemotingCommand:
    """A transactional prepare: stored as a half message, answered with its half-queue offset
    (the tranStateTableOffset its END_TRANSACTION names) and the queue it will go to."""
    if broker.config.reject_transaction_message:
        return _refuse_half(broker, req)
    born_ts = opt_int(ext, "bornTimestamp", broker.now_ms())
    if is_batch_half(text.encode()):
        try:
            check_batch_half(body, opt_int(ext, "sysFlag", 0))
        except BatchHalfError as exc:
            return reply(req, ResponseCode.MESSAGE_ILLEGAL, str(exc))
    msg = StoreMessage(topic=cfg.topic_name, queue_id=queue_id, body=body,
                       properties=with_property(text.encode(), P.PROPERTY_CLUSTER, broker.config.broker_cluster_name),
                       flag=opt_int(ext, "flag", 0), sys_flag=opt_int(ext, "sysFlag", 0),
                       born_timestamp=born_ts, born_host=born_host,
                       reconsume_times=opt_int(ext, "reconsumeTimes", 0))
    if broker.topics.version != topics_version:
        await broker.persist_topics()
    result = await broker.transactions.prepare(msg)
    return _response(req, result, queue_id, broker)


async def consumer_send_msg_back(broker: BrokerContext, conn: Connection,
                                 req: RemotingCommand) -> RemotingCommand | None:
    """A consumer gives a message back: it goes to %RETRY%<group> with a delay level, or to
    %DLQ%<group> once it has been reconsumed max times (no delay on that last hop)."""
    ext = req.ext_fields
    group = req_str(ext, "group")
    validate_group(group)
    topics_version = broker.topics.version
    phys = req_int(ext, "offset")
    store = broker.store
    assert store is not None
    raw = store.reads.read_sound_record(phys)  # stored again under a new CRC: damage must stop here
    if raw is None:
        return reply(req, ResponseCode.SYSTEM_ERROR, f"look message by offset failed, {phys}")
    try:
        msg = decode_record(raw, decompress=False)
    except MessageDecodeError as exc:
        return reply(req, ResponseCode.SYSTEM_ERROR, f"message at offset {phys} is unreadable: {exc}")
    props = dict(msg.properties)
    props.setdefault(P.PROPERTY_RETRY_TOPIC, msg.topic)
    props.pop(P.PROPERTY_WAIT_STORE_MSG_OK, None)
    delay_level = opt_int(ext, "delayLevel", 0)
    group_cfg = broker.groups.existing(group)
    # The client's count when it sends one (every client since RocketMQ 3.4.9), else the group's.
    max_times = opt_int(ext, "maxReconsumeTimes", group_cfg.retry_max_times)
    origin_id = props.get(P.PROPERTY_ORIGIN_MESSAGE_ID) or opt_str(ext, "originMsgId") or msg.msg_id
    props[P.PROPERTY_ORIGIN_MESSAGE_ID] = origin_id
    if msg.reconsume_times >= max_times or delay_level < 0:
        target = broker.topics.create_group_topic(dlq_topic(group))
        props.pop(P.PROPERTY_DELAY_TIME_LEVEL, None)
        kind = MessageEventKind.DEAD_LETTERED
    else:
        target = broker.topics.create_group_topic(retry_topic(group), group_cfg.retry_queue_nums)
        if delay_level == 0:
            delay_level = 3 + msg.reconsume_times
        props[P.PROPERTY_DELAY_TIME_LEVEL] = str(delay_level)
        kind = MessageEventKind.SENT_BACK
    inner = StoreMessage(
        topic=target.topic_name, queue_id=random.randrange(target.write_queue_nums), body=msg.body,
        properties=props, flag=msg.flag, sys_flag=msg.sys_flag, born_timestamp=msg.born_timestamp,
        born_host=msg.born_host, reconsume_times=msg.reconsume_times + 1,
    )
    if broker.topics.version != topics_version:
        await broker.persist_topics()
    result = await broker.put([inner])
    if not result.status.stored:
        return reply(req, _PUT_CODES.get(result.status, ResponseCode.SYSTEM_ERROR),
                     result.reason or result.status.name)
    # Counted against the topic the message was first sent to, not the retry topic it came from.
    broker.stats.count_send_back(props[P.PROPERTY_RETRY_TOPIC], group, kind is MessageEventKind.DEAD_LETTERED)
    if broker.events.active:
        broker.events.emit(MessageEvent(kind, msg.topic, msg.queue_id, msg.queue_offset, group=group,
                                        msg_id=origin_id, detail={
                                            "target": target.topic_name,
                                            "reconsume_times": str(msg.reconsume_times + 1),
                                            "delay_level": str(delay_level)}))
    return reply(req, ResponseCode.SUCCESS)


# Their handling time is the send latency histogram (processors/__init__.py times them).
TIMED = (RequestCode.SEND_MESSAGE, RequestCode.SEND_MESSAGE_V2, RequestCode.SEND_BATCH_MESSAGE)

HANDLERS = {
    RequestCode.SEND_MESSAGE: send_message,
    RequestCode.SEND_MESSAGE_V2: send_message,
    RequestCode.SEND_BATCH_MESSAGE: send_message,
    RequestCode.CONSUMER_SEND_MSG_BACK: consumer_send_msg_back,
}
