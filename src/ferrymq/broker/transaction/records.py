"""The records of transactional messages, as pure functions (RocketMQ's TransactionalMessageBridge
and TransactionalMessageUtil):

- a half message: the producer's message stored in RMQ_SYS_TRANS_HALF_TOPIC queue 0, its real
  topic and queue in REAL_TOPIC / REAL_QID, its transaction type reset to "not a transaction"
  (so the half queue indexes it);
- a check copy: a half message written again at the end of the half queue when the broker asks
  its producer, with TRANSACTION_CHECK_TIMES counted up and TRAN_PREPARED_QUEUE_OFFSET naming
  the first copy's queue offset (the transaction's origin);
- an op: a message in RMQ_SYS_TRANS_OP_HALF_TOPIC tagged "d" whose body lists half-queue
  offsets ("12,7,") of a transaction that ended (committed, rolled back, or discarded);
- the committed message: back in its real topic and queue, transaction type COMMIT;
- the discarded message: in TRANS_CHECK_MAX_TIME_TOPIC queue 0 once checked too often."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TypeVar

from ...common import props as P
from ...common.errors import FerryMQError
from ...common.message import MessageExt
from ...common.names import TRANS_CHECK_MAX_TIME_TOPIC, TRANS_HALF_TOPIC, TRANS_OP_HALF_TOPIC
from ...common.record import (
    MessageDecodeError,
    Properties,
    RecordEncodeError,
    batch_to_messages,
    check_batch,
    properties_map,
    property_value,
)
from ...common.record.layout import SYSFLAG_COMPRESSED
from ...store import StoreMessage

T = TypeVar("T")

# MessageSysFlag's transaction type bits.
TRANSACTION_TYPE_MASK = 0xC
TRANSACTION_NOT_TYPE = 0x0
TRANSACTION_PREPARED_TYPE = 0x4
TRANSACTION_COMMIT_TYPE = 0x8
TRANSACTION_ROLLBACK_TYPE = 0xC

REMOVE_TAG = "d"
OFFSET_SEPARATOR = ","
HALF_QUEUE_ID = 0
OP_QUEUE_ID = 0
CHECK_MAX_QUEUE_ID = 0


class HalfMessageError(FerryMQError, ValueError):
    """A record in the half queue that cannot be a half message (no REAL_TOPIC / REAL_QID)."""

    def __init__(self, queue_offset: int, reason: str) -> None:
        super().__init__(f"half message at queue offset {queue_offset}: {reason}")
        self.queue_offset = queue_offset
        self.reason = reason


def reset_transaction_type(sys_flag: int, tran_type: int) -> int:
    return (sys_flag & ~TRANSACTION_TYPE_MASK) | tran_type


def is_half_message(sys_flag: int, props: Properties, reconsume_times: int) -> bool:
    """A transactional prepare: TRAN_MSG=true (what RocketMQ's broker reads), or the sysFlag's
    prepared/rollback type without it (stored as they are, such messages could never be
    delivered, so they are kept as half messages too). A consumer's retry of a message that was
    once transactional (reconsumed, with a delay level) is not one, as in RocketMQ."""
    prepared = (sys_flag & TRANSACTION_TYPE_MASK) in (TRANSACTION_PREPARED_TYPE, TRANSACTION_ROLLBACK_TYPE)
    if not prepared:
        value = property_value(props, P.PROPERTY_TRANSACTION_PREPARED)
        prepared = value is not None and value.strip().lower() == "true"
    return prepared and not (reconsume_times > 0 and bool(property_value(props, P.PROPERTY_DELAY_TIME_LEVEL)))


def to_half(msg: StoreMessage) -> StoreMessage:
    """The producer's message as the broker keeps it until the transaction ends."""
    props = dict(properties_map(msg.properties))
    uniq = props.get(P.PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX)
    if uniq:
        props[P.PROPERTY_TRANSACTION_ID] = uniq
    props[P.PROPERTY_REAL_TOPIC] = msg.topic
    props[P.PROPERTY_REAL_QUEUE_ID] = str(msg.queue_id)
    # The delay level is applied when the message is committed, not to the half message.
    return StoreMessage(
        topic=TRANS_HALF_TOPIC, queue_id=HALF_QUEUE_ID, body=msg.body, properties=props,
        flag=msg.flag, sys_flag=reset_transaction_type(msg.sys_flag, TRANSACTION_NOT_TYPE),
        born_timestamp=msg.born_timestamp, born_host=msg.born_host,
        reconsume_times=msg.reconsume_times,
    )


@dataclass(frozen=True, slots=True)
class HalfInfo:
    """What the broker needs of one copy of a half message."""

    queue_offset: int
    phys_offset: int
    origin: int  # the queue offset of the transaction's first copy
    check_times: int
    producer_group: str
    born_timestamp: int
    store_timestamp: int
    immunity_ms: int  # CHECK_IMMUNITY_TIME_IN_SECONDS in ms, 0 when not set


def _int(text: str | None, default: int) -> int:
    try:
        return int(text) if text is not None else default
    except ValueError:
        return default


def half_info(msg: MessageExt) -> HalfInfo:
    props = msg.properties
    if not props.get(P.PROPERTY_REAL_TOPIC) or _int(props.get(P.PROPERTY_REAL_QUEUE_ID), -1) < 0:
        raise HalfMessageError(msg.queue_offset, "no REAL_TOPIC / REAL_QID property")
    origin = _int(props.get(P.PROPERTY_TRANSACTION_PREPARED_QUEUE_OFFSET), -1)
    return HalfInfo(
        queue_offset=msg.queue_offset,
        phys_offset=msg.commit_log_offset,
        origin=origin if origin >= 0 else msg.queue_offset,
        check_times=max(_int(props.get(P.PROPERTY_TRANSACTION_CHECK_TIMES), 0), 0),
        producer_group=props.get(P.PROPERTY_PRODUCER_GROUP, ""),
        born_timestamp=msg.born_timestamp,
        store_timestamp=msg.store_timestamp,
        immunity_ms=max(_int(props.get(P.PROPERTY_CHECK_IMMUNITY_TIME_IN_SECONDS), 0), 0) * 1000,
    )


def _copy(msg: MessageExt, topic: str, queue_id: int, props: dict[str, str], sys_flag: int) -> StoreMessage:
    return StoreMessage(
        topic=topic, queue_id=queue_id, body=msg.body, properties=props, flag=msg.flag,
        sys_flag=sys_flag, born_timestamp=msg.born_timestamp, born_host=msg.born_host,
        reconsume_times=msg.reconsume_times,
    )


def check_copy(msg: MessageExt, info: HalfInfo) -> StoreMessage:
    """The half message written again before its producer is asked about it: the count of
    checks travels with the newest copy, so it survives restarts."""
    props = dict(msg.properties)
    props[P.PROPERTY_TRANSACTION_CHECK_TIMES] = str(info.check_times + 1)
    props[P.PROPERTY_TRANSACTION_PREPARED_QUEUE_OFFSET] = str(info.origin)
    return _copy(msg, TRANS_HALF_TOPIC, HALF_QUEUE_ID, props, msg.sys_flag)


def committed(msg: MessageExt, commit_log_offset: int) -> StoreMessage:
    """The message its consumers get (EndTransactionProcessor.endMessageTransaction)."""
    props = dict(msg.properties)
    topic = props.pop(P.PROPERTY_REAL_TOPIC, "")
    queue_id = _int(props.pop(P.PROPERTY_REAL_QUEUE_ID, None), 0)
    props.pop(P.PROPERTY_TRANSACTION_PREPARED, None)
    out = _copy(msg, topic, queue_id, props, reset_transaction_type(msg.sys_flag, TRANSACTION_COMMIT_TYPE))
    out.prepared_transaction_offset = commit_log_offset
    return out


def is_batch_half(props: Properties) -> bool:
    """A ferrymq batch half message (TRAN_BATCH=true): its body holds the transaction's
    messages in SEND_BATCH_MESSAGE's encoding."""
    value = property_value(props, P.PROPERTY_TRANSACTION_BATCH)
    return value is not None and value.strip().lower() == "true"


def _decoded(sys_flag: int, decode: Callable[[], tuple[T, int]]) -> T:
    """What `decode` (check_batch or batch_to_messages over a batch half message's body)
    finds, under the refusals both are held to: BatchHalfError for a compressed body, a body
    that is not a batch, or an empty one. One place, so the send and the commit refuse alike."""
    if sys_flag & SYSFLAG_COMPRESSED:
        raise BatchHalfError("a batch half message cannot be compressed (its members are stored as sent)")
    try:
        found, _marks = decode()
    except (MessageDecodeError, RecordEncodeError) as exc:
        raise BatchHalfError(f"the body is not a message batch: {exc}") from exc
    if not found:
        raise BatchHalfError("the batch is empty")
    return found


def check_batch_half(body: bytes, sys_flag: int) -> None:
    """BatchHalfError when batch_members would refuse this half message's body: checked when
    the half is sent, so a commit never finds a body it cannot store (without building the
    members, which the commit builds)."""
    _decoded(sys_flag, lambda: check_batch(body))


def batch_members(body: bytes, sys_flag: int, topic: str, queue_id: int, born_timestamp: int,
                  born_host: str, cluster: str) -> list[StoreMessage]:
    """The messages a batch half message carries, as SEND_BATCH_MESSAGE would store them;
    BatchHalfError when there are none or the body is not a batch."""
    return _decoded(sys_flag, lambda: batch_to_messages(
        body, StoreMessage, topic, queue_id, reset_transaction_type(sys_flag, TRANSACTION_COMMIT_TYPE),
        born_timestamp, born_host, 0, P.PROPERTY_CLUSTER, cluster))


class BatchHalfError(FerryMQError, ValueError):
    """A batch half message (TRAN_BATCH) whose body cannot be stored as its members."""

    def __init__(self, reason: str) -> None:
        super().__init__(f"batch half message refused: {reason}")
        self.reason = reason


def committed_messages(msg: MessageExt, commit_log_offset: int, cluster: str) -> list[StoreMessage]:
    """What a commit stores: the message, or every member of a batch half message (each with
    the half message's commit-log offset as its preparedTransactionOffset)."""
    if not is_batch_half(msg.properties):
        return [committed(msg, commit_log_offset)]
    props = msg.properties
    members = batch_members(msg.body, msg.sys_flag, props.get(P.PROPERTY_REAL_TOPIC, ""),
                            _int(props.get(P.PROPERTY_REAL_QUEUE_ID), 0), msg.born_timestamp,
                            msg.born_host, cluster)
    for member in members:
        member.prepared_transaction_offset = commit_log_offset
    return members


def discarded(msg: MessageExt) -> StoreMessage:
    """A half message checked too often, kept where an operator can find it and no consumer of
    its real topic will (DefaultTransactionalMessageCheckListener.toMessageExtBrokerInner)."""
    return _copy(msg, TRANS_CHECK_MAX_TIME_TOPIC, CHECK_MAX_QUEUE_ID, dict(msg.properties), msg.sys_flag)


def op_message(offsets: Iterable[int], born_timestamp: int, store_host: str) -> StoreMessage:
    body = "".join(f"{o}{OFFSET_SEPARATOR}" for o in offsets).encode()
    return StoreMessage(
        topic=TRANS_OP_HALF_TOPIC, queue_id=OP_QUEUE_ID, body=body,
        properties={P.PROPERTY_TAGS: REMOVE_TAG}, born_timestamp=born_timestamp, born_host=store_host,
    )


def op_offsets(msg: MessageExt) -> list[int]:
    """The half-queue offsets an op names; an op with another tag names none (RocketMQ logs
    such ops as illegal and passes over them)."""
    if msg.properties.get(P.PROPERTY_TAGS) != REMOVE_TAG:
        return []
    out: list[int] = []
    for part in msg.body.decode("utf-8", "replace").split(OFFSET_SEPARATOR):
        part = part.strip()
        if part.lstrip("-").isdigit():
            out.append(int(part))
    return out
