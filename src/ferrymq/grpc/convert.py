"""apache.rocketmq.v2 Message <-> ferrymq's stored message, as RocketMQ's proxy maps them:
system properties become the 4.x properties every RocketMQ client reads (TAGS, KEYS, UNIQ_KEY,
__SHARDINGKEY, TRAN_MSG, TIMER_DELIVER_MS ...), user properties stay as they are, so a message
sent over gRPC is an ordinary message to 4.x consumers and the other way round. Pure
functions; the checks raise GrpcStatusError with the proxy's codes."""

from __future__ import annotations

import hashlib
import re
import zlib
from collections.abc import Mapping
from dataclasses import dataclass

from google.protobuf.duration_pb2 import Duration
from google.protobuf.timestamp_pb2 import Timestamp

from ..common import props as P
from ..common.message import MessageExt
from ..common.names import InvalidNameError, is_dlq_topic, is_retry_topic, validate_group, validate_topic
from ..common.record import SYSFLAG_COMPRESSED
from ..store import StoreMessage
from .pb import definition_pb2 as pb
from .status import Code, GrpcStatusError

PROPERTY_TIMER_DELIVER_MS = "TIMER_DELIVER_MS"
PROPERTY_TIMER_DELAY_SEC = "TIMER_DELAY_SEC"
PROPERTY_TIMER_DELAY_MS = "TIMER_DELAY_MS"
PROPERTY_TRACE_CONTEXT = "TRACE_CONTEXT"
PROPERTY_BORN_HOST = "__BORNHOST"
PROPERTY_CHECK_IMMUNITY_TIME = "CHECK_IMMUNITY_TIME_IN_SECONDS"
PROPERTY_POP_CK = "POP_CK"

# Names a user property may not take (RocketMQ's MessageConst.STRING_HASH_SET, the ones
# ferrymq or a 4.x client reads): the broker or a consumer would misread them.
RESERVED_PROPERTY_KEYS = P.SYSTEM_PROPERTIES | frozenset({
    P.PROPERTY_SHARDING_KEY, P.PROPERTY_CLUSTER, P.PROPERTY_MSG_REGION, P.PROPERTY_TRACE_SWITCH,
    P.PROPERTY_DLQ_ORIGIN_TOPIC, P.PROPERTY_DLQ_ORIGIN_MESSAGE_ID, PROPERTY_TIMER_DELIVER_MS,
    PROPERTY_TIMER_DELAY_SEC, PROPERTY_TIMER_DELAY_MS, PROPERTY_TRACE_CONTEXT, PROPERTY_BORN_HOST,
    PROPERTY_CHECK_IMMUNITY_TIME, PROPERTY_POP_CK, "__STARTDELIVERTIME", "INSTANCE_ID",
    "CORRECTION_FLAG", "TRANSACTION_ID", "UNIQ_KEY",
})

# RocketMQ's proxy limits (ProxyConfig): user properties and message groups.
MAX_USER_PROPERTIES = 128
MAX_USER_PROPERTY_BYTES = 16 * 1024
MAX_MESSAGE_GROUP_BYTES = 64


_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f]")


def _has_control(text: str) -> bool:
    return _CONTROL.search(text) is not None


def check_topic(name: str) -> None:
    """ILLEGAL_TOPIC for a malformed name or a system topic (the proxy's GrpcValidator)."""
    try:
        validate_topic(name)
    except InvalidNameError as exc:
        raise GrpcStatusError(Code.ILLEGAL_TOPIC, str(exc)) from None
    if is_retry_topic(name) or is_dlq_topic(name) or name.startswith(("rmq_sys_", "RMQ_SYS_")) \
            or name in ("TBW102", "SCHEDULE_TOPIC_XXXX"):
        raise GrpcStatusError(Code.ILLEGAL_TOPIC, f"cannot access system topic {name}")


def check_group(name: str) -> None:
    try:
        validate_group(name)
    except InvalidNameError as exc:
        raise GrpcStatusError(Code.ILLEGAL_CONSUMER_GROUP, str(exc)) from None


def to_millis(ts: Timestamp) -> int:
    return ts.seconds * 1000 + ts.nanos // 1_000_000


def timestamp(ms: int) -> Timestamp:
    return Timestamp(seconds=ms // 1000, nanos=(ms % 1000) * 1_000_000)


def duration_ms(d: Duration) -> int:
    return d.seconds * 1000 + d.nanos // 1_000_000


def duration(ms: int) -> Duration:
    return Duration(seconds=ms // 1000, nanos=(ms % 1000) * 1_000_000)


@dataclass(frozen=True, slots=True)
class Incoming:
    """A message of a SendMessage request, checked and turned into what the store appends."""

    message: StoreMessage
    message_id: str
    message_type: pb.MessageType
    message_group: str
    delivery_ms: int | None


def _check_user_properties(user: Mapping[str, str]) -> int:
    if len(user) > MAX_USER_PROPERTIES:
        raise GrpcStatusError(Code.MESSAGE_PROPERTIES_TOO_LARGE,
                              f"too many user properties, max is {MAX_USER_PROPERTIES}")
    size = 0
    for key, value in user.items():
        if key in RESERVED_PROPERTY_KEYS:
            raise GrpcStatusError(Code.ILLEGAL_MESSAGE_PROPERTY_KEY, f"property is used by system: {key}")
        if not key or _has_control(key) or _has_control(value):
            raise GrpcStatusError(Code.ILLEGAL_MESSAGE_PROPERTY_KEY,
                                  "the key and value of a property cannot be empty or contain control characters")
        size += len(key.encode()) + len(value.encode())
    return size


def _check_tag(tag: str) -> None:
    if tag and (not tag.strip() or "|" in tag or _has_control(tag)):
        raise GrpcStatusError(Code.ILLEGAL_MESSAGE_TAG,
                              "tag cannot be blank or contain '|' or control characters")


def _check_keys(keys: list[str]) -> None:
    for key in keys:
        if key and (not key.strip() or _has_control(key) or " " in key):
            raise GrpcStatusError(Code.ILLEGAL_MESSAGE_KEY,
                                  f"key {key!r} cannot be blank or contain spaces or control characters")


def _check_group_name(group: str) -> None:
    if not group.strip() or _has_control(group):
        raise GrpcStatusError(Code.ILLEGAL_MESSAGE_GROUP, "message group cannot be blank or contain control characters")
    if len(group.encode()) >= MAX_MESSAGE_GROUP_BYTES:
        raise GrpcStatusError(Code.ILLEGAL_MESSAGE_GROUP,
                              f"message group exceeds the max size {MAX_MESSAGE_GROUP_BYTES}")


def incoming(msg: pb.Message, *, topic: str, queue_id: int, max_body_size: int, peer: str,
             cluster: str, now_ms: int) -> Incoming:
    """Check one message of a send and build the record to append (properties as RocketMQ's
    proxy sets them; the producer group is the topic, as there)."""
    if msg.topic.name != topic:
        raise GrpcStatusError(Code.MESSAGE_CORRUPTED, "topic in message is not same")
    body = msg.body
    sp = msg.system_properties
    if sp.body_encoding == pb.GZIP:
        try:
            body = zlib.decompress(body, zlib.MAX_WBITS | 16)
        except zlib.error as exc:
            raise GrpcStatusError(Code.MESSAGE_CORRUPTED, f"gzip body cannot be decoded: {exc}") from None
    if not body:
        raise GrpcStatusError(Code.MESSAGE_BODY_EMPTY, "message body cannot be empty")
    if len(body) > max_body_size:
        raise GrpcStatusError(Code.MESSAGE_BODY_TOO_LARGE, f"message body cannot exceed the max {max_body_size}")
    if not sp.message_id.strip():
        raise GrpcStatusError(Code.ILLEGAL_MESSAGE_ID, "message id cannot be empty")
    size = _check_user_properties(msg.user_properties)
    props: dict[str, str] = dict(msg.user_properties)
    tag = sp.tag if sp.HasField("tag") else ""
    _check_tag(tag)
    if tag:
        props[P.PROPERTY_TAGS] = tag
    keys = [k for k in sp.keys if k]
    _check_keys(keys)
    if keys:
        props[P.PROPERTY_KEYS] = P.KEY_SEPARATOR.join(keys)
    size += len(tag.encode()) + sum(len(k.encode()) for k in keys)
    if size > MAX_USER_PROPERTY_BYTES:
        raise GrpcStatusError(Code.MESSAGE_PROPERTIES_TOO_LARGE,
                              f"the total size of user property is too large, max is {MAX_USER_PROPERTY_BYTES}")
    props[P.PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX] = sp.message_id
    props[P.PROPERTY_PRODUCER_GROUP] = topic
    props[P.PROPERTY_CLUSTER] = cluster
    message_type = sp.message_type
    if message_type == pb.TRANSACTION:
        props[P.PROPERTY_TRANSACTION_PREPARED] = "true"
        if sp.HasField("orphaned_transaction_recovery_duration"):
            seconds = duration_ms(sp.orphaned_transaction_recovery_duration) // 1000
            props[PROPERTY_CHECK_IMMUNITY_TIME] = str(seconds)
    group = sp.message_group if sp.HasField("message_group") else ""
    if group:
        _check_group_name(group)
        props[P.PROPERTY_SHARDING_KEY] = group
    delivery_ms: int | None = None
    if sp.HasField("delivery_timestamp"):
        delivery_ms = to_millis(sp.delivery_timestamp)
        props[PROPERTY_TIMER_DELIVER_MS] = str(delivery_ms)
    if sp.HasField("trace_context") and sp.trace_context:
        props[PROPERTY_TRACE_CONTEXT] = sp.trace_context
    if sp.born_host:
        props[PROPERTY_BORN_HOST] = sp.born_host
    born_ms = to_millis(sp.born_timestamp) if sp.HasField("born_timestamp") else 0
    store_msg = StoreMessage(
        topic=topic, queue_id=queue_id, body=body, properties=props,
        sys_flag=0x4 if message_type == pb.TRANSACTION else 0,
        born_timestamp=born_ms or now_ms, born_host=peer,
        reconsume_times=0,
    )
    return Incoming(store_msg, sp.message_id, message_type, group, delivery_ms)


def message_type_of(properties: Mapping[str, str]) -> pb.MessageType:
    if properties.get(P.PROPERTY_TRANSACTION_PREPARED) == "true":
        return pb.TRANSACTION
    if (P.PROPERTY_DELAY_TIME_LEVEL in properties or PROPERTY_TIMER_DELIVER_MS in properties
            or PROPERTY_TIMER_DELAY_SEC in properties):
        return pb.DELAY
    if P.PROPERTY_SHARDING_KEY in properties:
        return pb.FIFO
    return pb.NORMAL


def outgoing(m: MessageExt, *, topic: str | None = None, receipt_handle: str | None = None,
             invisible_ms: int | None = None, now_ms: int = 0) -> pb.Message:
    """A stored message as a consumer receives it over gRPC. `topic` overrides the stored one
    (a retry copy is delivered under its original topic). The body is delivered decompressed
    (RocketMQ compresses with zlib, which the SDKs' GZIP encoding is not)."""
    props = m.properties
    body = m.body
    if m.sys_flag & SYSFLAG_COMPRESSED:
        body = zlib.decompress(body)
    sp = pb.SystemProperties()
    tag = props.get(P.PROPERTY_TAGS)
    if tag is not None:
        sp.tag = tag
    keys = props.get(P.PROPERTY_KEYS)
    if keys:
        sp.keys.extend(k for k in keys.split(P.KEY_SEPARATOR) if k)
    sp.message_id = props.get(P.PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX) or m.msg_id or m.offset_msg_id
    sp.body_digest.type = pb.MD5
    sp.body_digest.checksum = hashlib.md5(body).hexdigest().upper()
    sp.body_encoding = pb.IDENTITY
    sp.message_type = message_type_of(props)
    sp.born_timestamp.CopyFrom(timestamp(m.born_timestamp))
    sp.born_host = props.get(PROPERTY_BORN_HOST) or m.born_host
    sp.store_timestamp.CopyFrom(timestamp(m.store_timestamp))
    sp.store_host = m.store_host
    if PROPERTY_TIMER_DELAY_SEC in props:
        sp.delivery_timestamp.CopyFrom(timestamp(now_ms + int(props[PROPERTY_TIMER_DELAY_SEC]) * 1000))
    elif PROPERTY_TIMER_DELIVER_MS in props:
        sp.delivery_timestamp.CopyFrom(timestamp(int(props[PROPERTY_TIMER_DELIVER_MS])))
    group = props.get(P.PROPERTY_SHARDING_KEY)
    if group is not None:
        sp.message_group = group
    if receipt_handle is not None:
        sp.receipt_handle = receipt_handle
    if invisible_ms is not None:
        sp.invisible_duration.CopyFrom(duration(invisible_ms))
    sp.queue_id = m.queue_id
    sp.queue_offset = m.queue_offset
    sp.delivery_attempt = m.reconsume_times + 1
    trace = props.get(PROPERTY_TRACE_CONTEXT)
    if trace is not None:
        sp.trace_context = trace
    dlq_topic, dlq_id = props.get(P.PROPERTY_DLQ_ORIGIN_TOPIC), props.get(P.PROPERTY_DLQ_ORIGIN_MESSAGE_ID)
    if dlq_topic is not None and dlq_id is not None:
        sp.dead_letter_queue.topic = dlq_topic
        sp.dead_letter_queue.message_id = dlq_id
    user = {k: v for k, v in props.items() if k not in RESERVED_PROPERTY_KEYS}
    return pb.Message(topic=pb.Resource(name=topic or m.topic), user_properties=user,
                      system_properties=sp, body=body)
