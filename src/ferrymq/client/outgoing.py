"""What a producer puts on the wire for a message: validated (as a broker would refuse it,
before any request), its properties encoded once, its unique id assigned, its body compressed
when that is smaller; a `send_batch`'s messages encoded into one SEND_BATCH_MESSAGE body. The
result, an `Outgoing`, is made once per send and reused by every attempt."""

from __future__ import annotations

import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from ..common import props as P
from ..common.delay import DEFAULT_DELAY_LEVELS, parse_delay_levels
from ..common.ids import new_uniq_id, new_uniq_ids
from ..common.message import Message
from ..common.names import SYSTEM_TOPICS, is_retry_topic, validate_topic
from ..common.record import MAX_PROPERTIES_BYTES, SYSFLAG_COMPRESSED, encode_batch, record_size
from .errors import ClientClosedError, MessageValidationError

MAX_MESSAGE_SIZE = 4 * 1024 * 1024
COMPRESS_LEVEL = 5  # RocketMQ's default zlib level
# RocketMQ's 18 levels; a broker configured with other levels needs the producer told.
DEFAULT_DELAY_LEVEL_COUNT = len(parse_delay_levels(DEFAULT_DELAY_LEVELS))
# Properties a broker adds to every stored message (CLUSTER and the like) fit in this.
BROKER_PROPERTY_HEADROOM = 128
# Topic names a producer remembers as valid (a bound for producers sending to endless topics).
MAX_CHECKED_TOPICS = 1024
_UNIQ_PREFIX = P.PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX + P.NAME_VALUE_SEPARATOR
UNIQ_ID_LENGTH = 32  # the hex of RocketMQ's 16-byte IPv4 unique id
# What a unique id adds to a message's encoded properties.
UNIQ_PROPERTY_BYTES = len(_UNIQ_PREFIX) + UNIQ_ID_LENGTH + 1
# A message's flag travels as a 32-bit signed int.
FLAG_MIN, FLAG_MAX = -(2**31), 2**31 - 1
# Properties that ask for delivery at a time.
TIMER_REQUESTS = (P.PROPERTY_TIMER_DELIVER_MS, P.PROPERTY_TIMER_DELAY_MS, P.PROPERTY_TIMER_DELAY_SEC)


@dataclass(slots=True)
class Outgoing:
    """A message as it goes on the wire, prepared once and reused by every attempt (never
    changed; not frozen because one is made per message and a frozen init costs twice)."""

    topic: str
    body: bytes
    sys_flag: int
    flag: int
    text: str  # the properties as the request header carries them
    uniq_id: str
    batch: bool
    reconsume_times: int | None = None
    max_reconsume_times: int | None = None
    # What `text` encodes. With flag and body, an Outgoing is also the entry a batch encodes.
    properties: dict[str, str] = field(default_factory=dict)


def validate_message(msg: Message, max_size: int = MAX_MESSAGE_SIZE) -> None:
    """Refuse what a broker would refuse, before any request is made."""
    _check_topic(msg.topic)
    _check_content(msg, max_size)


def _check_topic(topic: str) -> None:
    validate_topic(topic)
    if topic in SYSTEM_TOPICS:
        raise MessageValidationError("topic", f"{topic} is reserved for the system")


def _check_flag(flag: int) -> None:
    if not FLAG_MIN <= flag <= FLAG_MAX:
        raise MessageValidationError("flag", f"is {flag}; the wire carries a 32-bit signed int")


def _body_bytes(msg: Message) -> bytes:
    """`msg.body` as bytes, before any check counts it. Message() makes it so, but a body set
    afterwards (a view, an array) stays as given, and len() of a view counts its items: a
    batch entry's length would disagree with its bytes."""
    body = msg.body
    if type(body) is not bytes:
        msg.body = body = bytes(body)
    return body


def _check_content(msg: Message, max_size: int) -> str:
    """The body and property rules of validate_message; returns the properties as encoded
    (what the send carries before its unique id is added), computed once here."""
    if not msg.body:
        raise MessageValidationError("body", "is empty")
    if len(msg.body) > max_size:
        raise MessageValidationError("body", f"is {len(msg.body)} bytes; the limit is {max_size}")
    _check_flag(msg.flag)
    props = msg.properties
    if not props:
        return ""
    try:
        text = P.properties_to_string(props)
    except P.PropertyError as exc:
        raise MessageValidationError("properties", str(exc)) from exc
    size = len(text.encode()) + UNIQ_PROPERTY_BYTES
    if size > MAX_PROPERTIES_BYTES:
        # A record stores its properties' length in 16 bits (RocketMQ's limit too).
        raise MessageValidationError(
            "properties", f"encode to about {size} bytes with the unique id; at most "
            f"{MAX_PROPERTIES_BYTES} fit")
    timer = [n for n in TIMER_REQUESTS if n in props]
    if timer:
        if msg.delay_level:
            raise MessageValidationError(
                "delay_level", "a message takes a delay level or a delivery time, not both")
        for name in timer:
            if not props[name].isdigit():
                raise MessageValidationError(name, f"is {props[name]!r}; it must be a "
                                             "whole number >= 0")
    return text



def _with_uniq(props: dict[str, str], text: str, uniq: str) -> str:
    """Set the unique id in the caller's map; `text` is the map's encoding without it."""
    had_key = P.PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX in props  # present but empty
    props[P.PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX] = uniq
    if had_key:
        return P.properties_to_string(props)
    # Added last to the map, so last in its encoding too: appended, not encoded again.
    return text + _UNIQ_PREFIX + uniq + P.PROPERTY_SEPARATOR


class Preparer:
    """Makes a producer's `Outgoing`s, holding what that needs across sends: the limits, the
    topics already checked, the unique-id generator. A base class of the producer rather than
    an object it holds: a send then calls these as the producer's own methods, which costs
    less per message than calling a bound method kept on the producer."""

    kind: str  # the producer's, for the error of a send after shutdown began

    def __init__(self, *, max_message_size: int, compress_over: int, delay_levels: int) -> None:
        self.max_message_size = max_message_size
        self.compress_over = compress_over
        self.delay_levels = delay_levels
        self._checked_topics: dict[str, int] = {}  # valid topic -> its plain-message limit
        self._new_id: Callable[[], str] = new_uniq_id  # bound to the process's generator at start
        # Set when shutdown begins: new sends are refused while what was handed over drains
        # (senders that kept going would otherwise keep the drain from ever ending).
        self._closing = False

    def _valid_topic(self, topic: str) -> int:
        """_check_topic, remembered per topic (a producer sends to few topics many times),
        with the topic's plain-message limit: a message without properties whose body is at
        most this long cannot exceed the stored-size limit once its unique id is added, so it
        needs no check beyond its body (-1 for a retry topic, whose sends take the long way)."""
        limit = self._checked_topics.get(topic)
        if limit is not None:
            return limit
        _check_topic(topic)
        if len(self._checked_topics) >= MAX_CHECKED_TOPICS:
            self._checked_topics.clear()
        limit = -1 if is_retry_topic(topic) else self.max_message_size - BROKER_PROPERTY_HEADROOM - record_size(
            0, 4 * len(topic), UNIQ_PROPERTY_BYTES)
        self._checked_topics[topic] = limit
        return limit

    def _check_delay_level(self, msg: Message) -> None:
        if P.PROPERTY_DELAY_TIME_LEVEL in msg.properties and not 0 <= msg.delay_level <= self.delay_levels:
            raise MessageValidationError(
                "delay_level", f"is {msg.delay_level}; the broker has levels 1..{self.delay_levels} "
                "(0 = no delay); set the producer's delay_levels if it is configured with more")

    def _prepare(self, msg: Message) -> Outgoing:
        if self._closing:
            raise ClientClosedError(self.kind, "send")
        topic = msg.topic
        body = _body_bytes(msg)
        if not msg.properties and body and len(body) <= self._valid_topic(topic):
            # The common message: a body and nothing else. Its one property is its id.
            _check_flag(msg.flag)
            uniq = self._new_id()
            msg.properties[P.PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX] = uniq
            body, sys_flag = self._compressed(body)
            return Outgoing(topic, body, sys_flag, msg.flag, _UNIQ_PREFIX + uniq + P.PROPERTY_SEPARATOR,
                            uniq, False, None, None, {P.PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX: uniq})
        self._valid_topic(topic)
        text = _check_content(msg, self.max_message_size)
        self._check_delay_level(msg)
        given = msg.properties.get(P.PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX)
        if given:
            uniq = given
        else:
            uniq = self._new_id()
            text = _with_uniq(msg.properties, text, uniq)
        props = dict(msg.properties)
        reconsume = max_reconsume = None
        if is_retry_topic(topic):
            # Straight to a retry topic (DLQ re-drive): the counters travel in the header.
            value = props.pop(P.PROPERTY_RECONSUME_TIME, None)
            reconsume = int(value) if value and value.isdigit() else 0
            value = props.pop(P.PROPERTY_MAX_RECONSUME_TIMES, None)
            max_reconsume = int(value) if value and value.isdigit() else None
            text = P.properties_to_string(props)
        body, sys_flag = self._compressed(body)
        self._check_stored_size(topic, len(body), text)
        return Outgoing(topic, body, sys_flag, msg.flag, text, uniq, False, reconsume,
                        max_reconsume, props)

    def _compressed(self, body: bytes) -> tuple[bytes, int]:
        """The body to send and its sysFlag: zlib-compressed when that is smaller."""
        if self.compress_over > 0 and len(body) > self.compress_over:
            packed = zlib.compress(body, COMPRESS_LEVEL)
            if len(packed) < len(body):
                return packed, SYSFLAG_COMPRESSED
        return body, 0

    def _check_stored_size(self, topic: str, body_len: int, properties: str) -> None:
        """The broker limits each stored record, not the body: refuse here what it would."""
        stored = record_size(body_len, len(topic.encode()), len(properties.encode()))
        if stored + BROKER_PROPERTY_HEADROOM > self.max_message_size:
            raise MessageValidationError(
                "body", f"the stored message would be about {stored + BROKER_PROPERTY_HEADROOM} "
                f"bytes (body {body_len} after compression, topic, properties and the broker's "
                f"own fields); the limit is {self.max_message_size}")

    def _prepare_batch(self, msgs: Sequence[Message]) -> Outgoing:
        if self._closing:
            raise ClientClosedError(self.kind, "send")
        if not msgs:
            raise MessageValidationError("batch", "is empty")
        topic = msgs[0].topic
        plain_limit = self._valid_topic(topic)
        retry = is_retry_topic(topic)
        max_size = self.max_message_size
        texts: list[str | None] = []  # None: a plain message, as above
        missing = 0
        for m in msgs:
            body = _body_bytes(m)
            props = m.properties
            if (m.topic == topic and not props and body and len(body) <= plain_limit
                    and FLAG_MIN <= m.flag <= FLAG_MAX):
                texts.append(None)
                missing += 1
                continue
            self._valid_topic(m.topic)
            texts.append(_check_content(m, max_size))
            if m.topic != topic:
                raise MessageValidationError("batch", "all messages of a batch need the same topic")
            if P.PROPERTY_DELAY_TIME_LEVEL in props and m.delay_level > 0:
                raise MessageValidationError("batch", "a batch cannot carry delayed messages")
            if retry:
                raise MessageValidationError("batch", "a batch cannot go to a retry topic")
            if not props.get(P.PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX):
                missing += 1
        # The ids a batch lacks are taken in one go (one lock, one clock read).
        fresh = iter(new_uniq_ids(missing))
        uniqs: list[str] = []
        for m, text in zip(msgs, texts, strict=True):
            props = m.properties
            if text is None:
                uniq = props[P.PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX] = next(fresh)
                uniqs.append(uniq)
                continue
            given = props.get(P.PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX)
            if given:
                uniq = given
            else:
                uniq = next(fresh)
                text = _with_uniq(props, text, uniq)
            uniqs.append(uniq)
            # Each entry becomes a record of its own on the broker, limited like a single send.
            self._check_stored_size(topic, len(m.body), text)
        # Encoded at once, so the entries may share the callers' property maps.
        body = encode_batch(msgs)
        if len(body) > self.max_message_size:
            raise MessageValidationError(
                "batch", f"encodes to {len(body)} bytes; the limit is {self.max_message_size}"
            )
        return Outgoing(topic, body, 0, 0, "", ",".join(uniqs), True)

    def _prepare_encoded_batch(self, topic: str, body: bytes, uniq_ids: str) -> Outgoing:
        """A SEND_BATCH_MESSAGE body its caller encoded (encode_batch's layout, every entry
        with its UNIQ_KEY), for callers that make entries faster than Message objects allow
        (the Spark sink encodes Arrow columns); `uniq_ids`: their UNIQ_KEYs, comma-separated.
        Only the topic and the total size are checked."""
        if self._closing:
            raise ClientClosedError(self.kind, "send")
        if not body or not uniq_ids:
            raise MessageValidationError("batch", "is empty")
        if self._valid_topic(topic) < 0:
            raise MessageValidationError("batch", "a batch cannot go to a retry topic")
        if len(body) > self.max_message_size:
            raise MessageValidationError(
                "batch", f"encodes to {len(body)} bytes; the limit is {self.max_message_size}"
            )
        return Outgoing(topic, body, 0, 0, "", uniq_ids, True)


def entry_outgoing(topic: str, flag: int, body: bytes, props: bytes, uniq: str) -> Outgoing:
    """The Outgoing of one message of a batch, from its entry as the batch encoded it (for
    when it must be sent on its own)."""
    text = props.decode()
    return Outgoing(topic, body, 0, flag, text, uniq, False, None, None, P.string_to_properties(text))
