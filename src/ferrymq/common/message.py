"""The message model shared by clients, broker and store (RocketMQ's Message / MessageExt)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from . import props as P


class Message:
    """A message to send. Tags, keys, the delay level and the delivery time live in the
    property map, exactly as RocketMQ carries them on the wire, so what a client sets is what
    every peer reads.

    Delivery at a time (RocketMQ 5's timer messages): `deliver_time_ms` (epoch milliseconds,
    TIMER_DELIVER_MS), or `delay_time_ms` / `delay_time_sec` counted from the broker's receipt
    (TIMER_DELAY_MS / TIMER_DELAY_SEC). A time not ahead is delivered at once; the broker
    refuses one further than its timer_max_delay_sec (3 days by default)."""

    __slots__ = ("body", "flag", "properties", "topic")

    def __init__(
        self,
        topic: str,
        body: bytes,
        *,
        tags: str | None = None,
        keys: str | list[str] | tuple[str, ...] | None = None,
        delay_level: int = 0,
        properties: dict[str, str] | None = None,
        flag: int = 0,
        deliver_time_ms: int | None = None,
    ) -> None:
        # Exact bytes, the common body, are kept as they are without a call: a producer makes
        # a Message per send, and bytes(body) and dict(properties or {}) were a fifth of it.
        if type(body) is not bytes:
            if not isinstance(body, (bytes, bytearray, memoryview)):
                raise TypeError(f"message body must be bytes, not {type(body).__name__}")
            body = bytes(body)
        self.topic = topic
        self.body = body
        self.flag = flag
        self.properties: dict[str, str] = dict(properties) if properties else {}
        if tags:
            self.tags = tags
        if keys:
            self.keys = keys if isinstance(keys, str) else P.KEY_SEPARATOR.join(keys)
        if delay_level:
            self.delay_level = delay_level
        if deliver_time_ms is not None:
            self.deliver_time_ms = deliver_time_ms

    @property
    def tags(self) -> str | None:
        return self.properties.get(P.PROPERTY_TAGS)

    @tags.setter
    def tags(self, value: str | None) -> None:
        if value:
            self.properties[P.PROPERTY_TAGS] = value
        else:
            self.properties.pop(P.PROPERTY_TAGS, None)

    @property
    def keys(self) -> str | None:
        return self.properties.get(P.PROPERTY_KEYS)

    @keys.setter
    def keys(self, value: str | None) -> None:
        if value:
            self.properties[P.PROPERTY_KEYS] = value
        else:
            self.properties.pop(P.PROPERTY_KEYS, None)

    @property
    def key_list(self) -> list[str]:
        keys = self.keys
        return [k for k in keys.split(P.KEY_SEPARATOR) if k] if keys else []

    @property
    def delay_level(self) -> int:
        try:
            return int(self.properties.get(P.PROPERTY_DELAY_TIME_LEVEL, "0"))
        except ValueError:
            return 0

    @delay_level.setter
    def delay_level(self, level: int) -> None:
        if level > 0:
            self.properties[P.PROPERTY_DELAY_TIME_LEVEL] = str(level)
        else:
            self.properties.pop(P.PROPERTY_DELAY_TIME_LEVEL, None)

    def _timer(self, name: str) -> int | None:
        text = self.properties.get(name)
        try:
            return int(text) if text is not None else None
        except ValueError:
            return None

    def _set_timer(self, name: str, value: int | None) -> None:
        if value is None:
            self.properties.pop(name, None)
            return
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ValueError(f"{name} must be a whole number >= 0, not {value!r}")
        self.properties[name] = str(value)

    @property
    def deliver_time_ms(self) -> int | None:
        """When to deliver, in epoch milliseconds (None: at once)."""
        return self._timer(P.PROPERTY_TIMER_DELIVER_MS)

    @deliver_time_ms.setter
    def deliver_time_ms(self, value: int | None) -> None:
        self._set_timer(P.PROPERTY_TIMER_DELIVER_MS, value)

    @property
    def delay_time_ms(self) -> int | None:
        return self._timer(P.PROPERTY_TIMER_DELAY_MS)

    @delay_time_ms.setter
    def delay_time_ms(self, value: int | None) -> None:
        self._set_timer(P.PROPERTY_TIMER_DELAY_MS, value)

    @property
    def delay_time_sec(self) -> int | None:
        return self._timer(P.PROPERTY_TIMER_DELAY_SEC)

    @delay_time_sec.setter
    def delay_time_sec(self, value: int | None) -> None:
        self._set_timer(P.PROPERTY_TIMER_DELAY_SEC, value)

    @property
    def timer_out_ms(self) -> int | None:
        """On a delivered timer message: the delivery time the broker settled on."""
        return self._timer(P.PROPERTY_TIMER_OUT_MS)

    @property
    def uniq_key(self) -> str | None:
        return self.properties.get(P.PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX)

    def user_properties(self) -> dict[str, str]:
        return {k: v for k, v in self.properties.items() if k not in P.SYSTEM_PROPERTIES}

    def __repr__(self) -> str:
        return (
            f"Message(topic={self.topic!r}, tags={self.tags!r}, keys={self.keys!r}, "
            f"body={len(self.body)} bytes)"
        )


class MessageExt(Message):
    """A stored message as read back from a broker."""

    __slots__ = (
        "body_crc",
        "born_host",
        "born_timestamp",
        "broker",
        "commit_log_offset",
        "msg_id",
        "offset_msg_id",
        "prepared_transaction_offset",
        "queue_id",
        "queue_offset",
        "reconsume_times",
        "store_host",
        "store_size",
        "store_timestamp",
        "sys_flag",
    )

    def __init__(
        self,
        topic: str,
        body: bytes,
        *,
        properties: dict[str, str] | None = None,
        flag: int = 0,
        queue_id: int = 0,
        queue_offset: int = 0,
        commit_log_offset: int = 0,
        sys_flag: int = 0,
        born_timestamp: int = 0,
        born_host: str = "",
        store_timestamp: int = 0,
        store_host: str = "",
        reconsume_times: int = 0,
        prepared_transaction_offset: int = 0,
        body_crc: int = 0,
        store_size: int = 0,
        msg_id: str = "",
        offset_msg_id: str = "",
        broker: str = "",
    ) -> None:
        super().__init__(topic, body, properties=properties, flag=flag)
        self.queue_id = queue_id
        self.queue_offset = queue_offset
        self.commit_log_offset = commit_log_offset
        self.sys_flag = sys_flag
        self.born_timestamp = born_timestamp
        self.born_host = born_host
        self.store_timestamp = store_timestamp
        self.store_host = store_host
        self.reconsume_times = reconsume_times
        self.prepared_transaction_offset = prepared_transaction_offset
        self.body_crc = body_crc
        self.store_size = store_size
        self.msg_id = msg_id
        self.offset_msg_id = offset_msg_id
        self.broker = broker

    def __repr__(self) -> str:
        return (
            f"MessageExt(topic={self.topic!r}, queue_id={self.queue_id}, "
            f"queue_offset={self.queue_offset}, msg_id={self.msg_id!r}, tags={self.tags!r}, "
            f"reconsume_times={self.reconsume_times}, body={len(self.body)} bytes)"
        )


@dataclass(frozen=True, slots=True, order=True)
class MessageQueue:
    """One queue of one topic on one broker (RocketMQ's MessageQueue)."""

    topic: str
    broker_name: str
    queue_id: int

    def __str__(self) -> str:
        return f"{self.topic}@{self.broker_name}:{self.queue_id}"


class BatchEntry(Protocol):
    """What a SEND_BATCH_MESSAGE body is encoded from, message by message (MessageBatchItem,
    or the producer's prepared message itself)."""

    @property
    def flag(self) -> int: ...

    @property
    def body(self) -> bytes: ...

    @property
    def properties(self) -> dict[str, str]: ...


@dataclass(slots=True)
class MessageBatchItem:
    """One message of a SEND_BATCH_MESSAGE body, before the broker stores it."""

    flag: int
    body: bytes
    properties: dict[str, str] = field(default_factory=dict)
