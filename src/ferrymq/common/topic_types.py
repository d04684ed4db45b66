"""RocketMQ 5's topic message types: the `message.type` topic attribute
(TopicAttributes.TOPIC_MESSAGE_TYPE_ATTRIBUTE), the type of one message read from its
properties (TopicMessageType.parseFromMessageProperty), the check a send goes through
(DefaultTopicMessageTypeValidator), and the `+key=value,-key` attribute changes a
CREATE_TOPIC request carries (AttributeParser / AttributeUtil)."""

from __future__ import annotations

from collections.abc import Mapping

from . import props as P
from .errors import FerryMQError
from .names import is_dlq_topic, is_retry_topic

MESSAGE_TYPE_ATTRIBUTE = "message.type"
NORMAL = "NORMAL"
FIFO = "FIFO"
DELAY = "DELAY"
TRANSACTION = "TRANSACTION"
MIXED = "MIXED"
UNSPECIFIED = "UNSPECIFIED"
# What `--type` offers; UNSPECIFIED is RocketMQ's too, but a topic of it accepts nothing.
TOPIC_TYPES = (NORMAL, FIFO, DELAY, TRANSACTION, MIXED)
_ALL_TYPES = frozenset((*TOPIC_TYPES, UNSPECIFIED))
# Set on a message moved between clusters (RocketMQ's PROPERTY_TRANSFER_FLAG): not checked.
PROPERTY_TRANSFER_FLAG = "TRANSFER_FLAG"
# The attributes a broker knows, and whether a change may alter them once set.
_CHANGEABLE = {MESSAGE_TYPE_ATTRIBUTE: True}


class TopicMessageTypeMismatch(FerryMQError):
    """A send whose message type the topic does not accept (RocketMQ's proxy answers gRPC with
    MESSAGE_PROPERTY_CONFLICT_WITH_TYPE and remoting with MESSAGE_ILLEGAL)."""

    def __init__(self, topic: str, expected: str, actual: str) -> None:
        super().__init__(f"TopicMessageType validate failed, the expected type is {expected}, "
                         f"but actual type is {actual}")
        self.topic = topic
        self.expected = expected
        self.actual = actual


class TopicAttributeError(FerryMQError, ValueError):
    """A CREATE_TOPIC attribute change the broker refuses (answered INVALID_PARAMETER)."""

    def __init__(self, attributes: str, reason: str) -> None:
        super().__init__(f"topic attributes {attributes!r}: {reason}")
        self.attributes = attributes
        self.reason = reason


def topic_type(attributes: Mapping[str, str], order: bool) -> str:
    """The type a topic accepts: its attribute, else FIFO for an order topic (what ferrymq's
    order topics always accepted over gRPC), else NORMAL (RocketMQ's default)."""
    value = attributes.get(MESSAGE_TYPE_ATTRIBUTE)
    if value:
        return value
    return FIFO if order else NORMAL


def message_type(props: Mapping[str, str]) -> str:
    """One message's type from its properties, in RocketMQ's order of precedence."""
    if props.get(P.PROPERTY_TRANSACTION_PREPARED) == "true":
        return TRANSACTION
    if (P.PROPERTY_DELAY_TIME_LEVEL in props or P.PROPERTY_TIMER_DELIVER_MS in props
            or P.PROPERTY_TIMER_DELAY_SEC in props or P.PROPERTY_TIMER_DELAY_MS in props):
        return DELAY
    if P.PROPERTY_SHARDING_KEY in props:
        return FIFO
    return NORMAL


def check(topic: str, expected: str, actual: str) -> None:
    """Raise TopicMessageTypeMismatch unless a topic of type `expected` takes a message of
    type `actual` (the same type, or any type on a MIXED topic)."""
    if actual == UNSPECIFIED or (actual != expected and expected != MIXED):
        raise TopicMessageTypeMismatch(topic, expected, actual)


def check_send(topic: str, expected: str, props: Mapping[str, str], *, order_by_queue: bool = False) -> None:
    """The proxy's check of one message sent to `topic` (of type `expected`): retry and
    dead-letter topics, and messages carrying TRANSFER_FLAG, are not checked. `order_by_queue`:
    the 4.x protocol, whose ordered sends name their queue and carry no sharding key, so a
    FIFO topic takes a message that reads as NORMAL."""
    if expected == MIXED or is_retry_topic(topic) or is_dlq_topic(topic) or PROPERTY_TRANSFER_FLAG in props:
        return
    actual = message_type(props)
    if order_by_queue and expected == FIFO and actual == NORMAL:
        return
    check(topic, expected, actual)


def alter(current: Mapping[str, str], changes: str, *, allow_mixed: bool) -> dict[str, str]:
    """The topic's attributes after a request's `+key=value,-key` changes (an empty string
    changes nothing; RocketMQ's alterCurrentAttributes, changes to an existing topic's kept
    attributes included)."""
    out = dict(current)
    if not changes:
        return out
    seen: set[str] = set()
    for item in changes.split(","):
        if "=" in item:
            key, _, value = item.partition("=")
            if not key.startswith("+"):
                raise TopicAttributeError(changes, f"add/alter attribute format is wrong: {key}")
        else:
            key, value = item, ""
            if not key.startswith("-"):
                raise TopicAttributeError(changes, f"delete attribute format is wrong: {key}")
        name = key[1:]
        if name in seen:
            raise TopicAttributeError(changes, f"alter duplication key. key: {name}")
        seen.add(name)
        if name not in _CHANGEABLE:
            raise TopicAttributeError(changes, f"unsupported key: {name}")
        if key.startswith("-"):
            if name not in out:
                raise TopicAttributeError(changes, f"attempt to delete a nonexistent key: {name}")
            del out[name]
            continue
        if name == MESSAGE_TYPE_ATTRIBUTE:
            if value not in _ALL_TYPES:
                raise TopicAttributeError(changes, f"value is not in set: {sorted(_ALL_TYPES)}")
            if value == MIXED and not allow_mixed:
                # RocketMQ's broker: enableMixedMessageType is off by default.
                raise TopicAttributeError(changes, "MIXED message type is not supported.")
        out[name] = value
    return out
