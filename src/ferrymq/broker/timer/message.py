"""What a timer message is on the way in and on the way out (RocketMQ 5's HookUtils
transformTimerMessage and TimerMessageStore.convertMessage), as pure functions.

In: a message carrying TIMER_DELAY_SEC, TIMER_DELAY_MS or TIMER_DELIVER_MS (read in that
order, as RocketMQ does) with a delivery time ahead is stored in the timer topic's queue 0,
its real topic and queue in REAL_TOPIC / REAL_QID and the delivery time in TIMER_OUT_MS. A
delivery time not ahead is delivered at once; a delay level wins over the timer properties.
Out: the real topic and queue come back, the request properties and the roll count go; the
message id (UNIQ_KEY), TIMER_OUT_MS and every other property stay, and TIMER_OUT_MS keeps the
message from being timed again if it is sent once more.

A message carrying TIMER_DEL_UNIQKEY ("<topic>+<message id>", RocketMQ's buildDeleteKey) is a
delete marker: stored and linked as a timer like the others, it is never delivered, and the
timer of that topic and message id in the same wheel slot is dropped when the slot fires
(RocketMQ 5's timer delete, what RecallMessage sends). It needs a delivery time ahead: the
target's own, or any time in the same slot."""

from __future__ import annotations

from ...common import props as P
from ...common.errors import FerryMQError
from ...common.message import MessageExt
from ...common.names import TIMER_TOPIC
from ...common.record import properties_map
from ...store import StoreMessage

TIMER_QUEUE_ID = 0
_REQUEST_PROPS = (P.PROPERTY_TIMER_DELAY_SEC, P.PROPERTY_TIMER_DELAY_MS, P.PROPERTY_TIMER_DELIVER_MS)
_REQUEST_MARK = b"TIMER_"


class TimerMessageError(FerryMQError, ValueError):
    """A timer property the broker cannot honour; the send is refused as MESSAGE_ILLEGAL."""

    def __init__(self, prop: str, value: str, reason: str) -> None:
        super().__init__(f"timer message illegal: {prop}={value!r} {reason}")
        self.prop = prop
        self.value = value
        self.reason = reason


def delete_key(topic: str, message_id: str) -> str:
    """What TIMER_DEL_UNIQKEY names: a timer message by its real topic and message id."""
    return f"{topic}+{message_id}"


RECALL_TAG = "_RECALL_TAG_"


def recall_marker(topic: str, message_id: str, deliver_ms: int, now_ms: int,
                  born_host: tuple[str, int] | str) -> StoreMessage:
    """The delete marker a recall stores (RocketMQ's RecallMessageProcessor.buildMessage): due
    at the recalled message's delivery time, naming it by topic and message id."""
    return StoreMessage(
        topic=topic, queue_id=0, body=b"0", born_timestamp=now_ms, born_host=born_host,
        properties={P.PROPERTY_TAGS: RECALL_TAG, P.PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX: message_id,
                    P.PROPERTY_TIMER_DEL_UNIQKEY: delete_key(topic, message_id),
                    P.PROPERTY_TIMER_DELIVER_MS: str(deliver_ms)})


def is_delete_marker(props: dict[str, str]) -> bool:
    return P.PROPERTY_TIMER_DEL_UNIQKEY in props


def timer_key(props: dict[str, str]) -> str | None:
    """The delete key of a stored timer message (its REAL_TOPIC and UNIQ_KEY)."""
    topic = props.get(P.PROPERTY_REAL_TOPIC)
    uniq = props.get(P.PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX)
    return delete_key(topic, uniq) if topic and uniq else None


def asks_for_timer(props: dict[str, str] | bytes) -> bool:
    """Cheap test on the send path: could this message carry a timer request?"""
    if isinstance(props, dict):
        return any(name in props for name in _REQUEST_PROPS)
    return _REQUEST_MARK in props


def requested_deliver_ms(props: dict[str, str], now_ms: int) -> int | None:
    """The delivery time asked for, None when the message asks for none."""
    for name in _REQUEST_PROPS:
        text = props.get(name)
        if text is None:
            continue
        try:
            value = int(text.strip())
        except ValueError:
            raise TimerMessageError(name, text, "is not a whole number") from None
        if name == P.PROPERTY_TIMER_DELAY_SEC:
            return now_ms + value * 1000
        if name == P.PROPERTY_TIMER_DELAY_MS:
            return now_ms + value
        return value
    return None


def to_timer(msg: StoreMessage, now_ms: int, max_delay_ms: int) -> StoreMessage:
    """The message to store for `msg`: itself, or its timer-topic form. Raises
    TimerMessageError for a value that is not a number or lies beyond `max_delay_ms`."""
    props = properties_map(msg.properties)
    if msg.topic == TIMER_TOPIC or P.PROPERTY_TIMER_OUT_MS in props:
        return msg
    if props.get(P.PROPERTY_DELAY_TIME_LEVEL, "0") not in ("", "0"):
        kept = {k: v for k, v in props.items() if k not in _REQUEST_PROPS}
        return _with(msg, msg.topic, msg.queue_id, kept)
    deliver = requested_deliver_ms(props, now_ms)
    if P.PROPERTY_TIMER_DEL_UNIQKEY in props and (deliver is None or deliver <= now_ms):
        # RocketMQ's WHEEL_TIMER_MSG_ILLEGAL: delivered now, the marker would reach consumers.
        raise TimerMessageError(P.PROPERTY_TIMER_DEL_UNIQKEY, props[P.PROPERTY_TIMER_DEL_UNIQKEY],
                                "needs a delivery time ahead (TIMER_DELIVER_MS of the timer it cancels)")
    if deliver is None or deliver <= now_ms:
        return msg
    if deliver - now_ms > max_delay_ms:
        name = next(n for n in _REQUEST_PROPS if n in props)
        raise TimerMessageError(name, props[name], f"is {deliver - now_ms} ms ahead; the broker's "
                                f"timer_max_delay_sec allows at most {max_delay_ms} ms")
    timed = dict(props)
    timed[P.PROPERTY_TIMER_OUT_MS] = str(deliver)
    timed[P.PROPERTY_REAL_TOPIC] = msg.topic
    timed[P.PROPERTY_REAL_QUEUE_ID] = str(msg.queue_id)
    return _with(msg, TIMER_TOPIC, TIMER_QUEUE_ID, timed)


def deliver_ms_of(props: dict[str, str]) -> int:
    """A stored timer message's delivery time; 0 (deliver now) when it has none readable."""
    text = props.get(P.PROPERTY_TIMER_OUT_MS, "")
    try:
        return int(text)
    except ValueError:
        return 0


def from_timer(msg: MessageExt) -> StoreMessage | None:
    """The message to write to its real topic; None when it names none."""
    props = dict(msg.properties)
    real_topic = props.pop(P.PROPERTY_REAL_TOPIC, None)
    real_qid = props.pop(P.PROPERTY_REAL_QUEUE_ID, "0")
    if not real_topic:
        return None
    for name in _REQUEST_PROPS:
        props.pop(name, None)
    props.pop(P.PROPERTY_TIMER_ROLL_TIMES, None)
    try:
        qid = int(real_qid)
    except ValueError:
        qid = 0
    return _stored(msg, real_topic, qid, props)


def rolled(msg: MessageExt) -> StoreMessage:
    """The message stored again in the timer topic for a timer beyond the wheel's reach (a
    fresh record, so the commit log's retention never takes a waiting timer away)."""
    props = dict(msg.properties)
    try:
        times = int(props.get(P.PROPERTY_TIMER_ROLL_TIMES, "0"))
    except ValueError:
        times = 0
    props[P.PROPERTY_TIMER_ROLL_TIMES] = str(times + 1)
    return _stored(msg, TIMER_TOPIC, TIMER_QUEUE_ID, props)


def _with(msg: StoreMessage, topic: str, queue_id: int, props: dict[str, str]) -> StoreMessage:
    return StoreMessage(
        topic=topic, queue_id=queue_id, body=msg.body, properties=props, flag=msg.flag,
        sys_flag=msg.sys_flag, born_timestamp=msg.born_timestamp, born_host=msg.born_host,
        reconsume_times=msg.reconsume_times,
        prepared_transaction_offset=msg.prepared_transaction_offset)


def _stored(msg: MessageExt, topic: str, queue_id: int, props: dict[str, str]) -> StoreMessage:
    return StoreMessage(
        topic=topic, queue_id=queue_id, body=msg.body, properties=props, flag=msg.flag,
        sys_flag=msg.sys_flag, born_timestamp=msg.born_timestamp, born_host=msg.born_host,
        reconsume_times=msg.reconsume_times,
        prepared_transaction_offset=msg.prepared_transaction_offset)
