"""Who is connected: producer and consumer groups, their channels and subscriptions
(RocketMQ's ProducerManager and ConsumerManager), and queue locks for orderly consumers."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..common.errors import FerryMQError
from ..common.names import java_string_hash
from ..common.sql92 import Selector, SelectorError, compile_selector

SUB_ALL = "*"


@dataclass(slots=True)
class Subscription:
    topic: str
    expression: str
    tags: frozenset[str]
    codes: frozenset[int]
    sub_version: int
    expression_type: str = "TAG"
    selector: Selector | None = None  # SQL92: evaluated on each stored message's properties

    @property
    def matches_all(self) -> bool:
        """No tag filter (an SQL92 subscription filters by `selector` instead)."""
        return not self.tags

    def accepts(self, tag_code: int) -> bool:
        return not self.codes or tag_code in self.codes

    def to_json(self) -> dict[str, Any]:
        return {
            "classFilterMode": False,
            "codeSet": sorted(self.codes),
            "expressionType": self.expression_type,
            "subString": self.expression,
            "subVersion": self.sub_version,
            "tagsSet": sorted(self.tags),
            "topic": self.topic,
        }


class UnsupportedFilterError(FerryMQError):
    """A subscription filters by properties (SQL92) on a broker where enable_property_filter
    is off: serving it as a tag expression would match nothing, silently."""

    def __init__(self, topic: str, expression_type: str) -> None:
        # RocketMQ's words when enablePropertyFilter is off, so clients and operators know them.
        super().__init__(f"The broker does not support consumer to filter message by {expression_type} "
                         f"(topic {topic}); enable_property_filter is off")
        self.topic = topic
        self.expression_type = expression_type


class SubscriptionParseError(FerryMQError):
    """A subscription the broker cannot read: an invalid SQL92 selector or an unknown
    expression type (answered with SUBSCRIPTION_PARSE_FAILED)."""

    def __init__(self, topic: str, expression: str, expression_type: str, reason: str) -> None:
        super().__init__(f"subscription of topic {topic} ({expression_type} {expression!r}): {reason}")
        self.topic = topic
        self.expression = expression
        self.expression_type = expression_type
        self.reason = reason


TAG, SQL92 = "TAG", "SQL92"


def parse_subscription(topic: str, expression: str | None, sub_version: int = 0,
                       expression_type: str | None = TAG, *,
                       property_filter: bool = True) -> Subscription:
    """'TagA || TagB' -> tags and their Java hash codes; '*' or empty matches everything.
    An SQL92 expression is compiled (SubscriptionParseError when invalid, UnsupportedFilterError
    when `property_filter` is off); any other expression type is a SubscriptionParseError."""
    kind = (expression_type or TAG).strip().upper()
    if kind == SQL92:
        if not property_filter:
            raise UnsupportedFilterError(topic, SQL92)
        text = expression or ""
        try:
            selector = compile_selector(text)
        except SelectorError as exc:
            raise SubscriptionParseError(topic, text, SQL92, str(exc)) from None
        return Subscription(topic, text, frozenset(), frozenset(), sub_version, SQL92, selector)
    if kind != TAG:
        raise SubscriptionParseError(topic, expression or "", str(expression_type),
                                     "unknown expression type (TAG or SQL92)")
    expr = (expression or "").strip()
    if not expr or expr == SUB_ALL:
        return Subscription(topic, SUB_ALL, frozenset(), frozenset(), sub_version, TAG)
    tags = frozenset(t.strip() for t in expr.split("||") if t.strip())
    return Subscription(topic, expr, tags, frozenset(java_string_hash(t) for t in tags),
                        sub_version, TAG)


@dataclass(slots=True)
class ClientChannel:
    client_id: str
    conn: Any
    language: str
    version: int
    last_update_ms: int
    # The client sends a release with its last commit of a queue it gives up (ferrymq's own
    # clients announce it in their heartbeat): a new owner may wait for that (handover.py).
    releases_queues: bool = False

    @property
    def addr(self) -> str:
        return str(getattr(self.conn, "remote_addr", ""))


@dataclass(slots=True)
class ConsumerGroupInfo:
    group: str
    consume_type: str = "CONSUME_PASSIVELY"
    message_model: str = "CLUSTERING"
    consume_from_where: str = "CONSUME_FROM_LAST_OFFSET"
    subscriptions: dict[str, Subscription] = field(default_factory=dict)
    channels: dict[int, ClientChannel] = field(default_factory=dict)  # id(conn) -> channel

    def client_ids(self) -> list[str]:
        return sorted({c.client_id for c in self.channels.values()})


class ClientRegistry:
    def __init__(self, *, channel_expired_ms: int = 120_000,
                 on_consumer_change: Callable[[str], None] | None = None) -> None:
        self._lock = threading.RLock()
        self.consumers: dict[str, ConsumerGroupInfo] = {}
        self.producers: dict[str, dict[int, ClientChannel]] = {}
        self.channel_expired_ms = channel_expired_ms
        self.on_consumer_change = on_consumer_change

    def register_producer(self, group: str, channel: ClientChannel) -> None:
        with self._lock:
            self.producers.setdefault(group, {})[id(channel.conn)] = channel

    def register_consumer(self, group: str, channel: ClientChannel, *, consume_type: str,
                          message_model: str, consume_from_where: str,
                          subscriptions: list[Subscription]) -> bool:
        """Returns True when the group's membership changed (members must rebalance)."""
        with self._lock:
            info = self.consumers.get(group)
            if info is None:
                info = self.consumers[group] = ConsumerGroupInfo(group)
            info.consume_type = consume_type
            info.message_model = message_model
            info.consume_from_where = consume_from_where
            old = info.channels.get(id(channel.conn))
            info.channels[id(channel.conn)] = channel
            changed = old is None or old.client_id != channel.client_id
            new_subs = {s.topic: s for s in subscriptions}
            for topic, sub in new_subs.items():
                prev = info.subscriptions.get(topic)
                if (prev is None or prev.sub_version < sub.sub_version or prev.expression != sub.expression
                        or prev.expression_type != sub.expression_type):
                    info.subscriptions[topic] = sub
        if changed and self.on_consumer_change is not None:
            self.on_consumer_change(group)
        return changed

    def unregister(self, conn: Any, *, producer_group: str | None = None,
                   consumer_group: str | None = None) -> None:
        notify: list[str] = []
        with self._lock:
            if producer_group:
                self.producers.get(producer_group, {}).pop(id(conn), None)
            if consumer_group:
                info = self.consumers.get(consumer_group)
                if info is not None and info.channels.pop(id(conn), None) is not None:
                    notify.append(consumer_group)
                    if not info.channels:
                        del self.consumers[consumer_group]
        for group in notify:
            if self.on_consumer_change is not None:
                self.on_consumer_change(group)

    def drop_connection(self, conn: Any) -> None:
        """A closed connection leaves every group it was in."""
        notify: list[str] = []
        with self._lock:
            for producers in self.producers.values():
                producers.pop(id(conn), None)
            for group, info in list(self.consumers.items()):
                if info.channels.pop(id(conn), None) is not None:
                    notify.append(group)
                    if not info.channels:
                        del self.consumers[group]
        for group in notify:
            if self.on_consumer_change is not None:
                self.on_consumer_change(group)

    def scan_expired(self, now_ms: int) -> list[Any]:
        with self._lock:
            stale = []
            for info in self.consumers.values():
                stale += [c.conn for c in info.channels.values()
                          if now_ms - c.last_update_ms > self.channel_expired_ms]
            for producers in self.producers.values():
                stale += [c.conn for c in producers.values()
                          if now_ms - c.last_update_ms > self.channel_expired_ms]
        for conn in stale:
            self.drop_connection(conn)
        return stale

    def consumer_group(self, group: str) -> ConsumerGroupInfo | None:
        return self.consumers.get(group)

    def is_member(self, group: str, conn: Any) -> bool:
        info = self.consumers.get(group)
        return info is not None and id(conn) in info.channels

    def releases_queues(self, group: str, conn: Any, asker: Any) -> bool:
        """`conn` is an open member connection of `group` whose client releases queues, and
        another client than `asker`'s (a client that reconnected is not waited for by itself)."""
        info = self.consumers.get(group)
        if info is None:
            return False
        channel = info.channels.get(id(conn))
        if channel is None or channel.conn is not conn or not channel.releases_queues:
            return False
        if getattr(conn, "closed", False):
            return False
        mine = info.channels.get(id(asker))
        return mine is None or mine.client_id != channel.client_id

    def member_connections(self, group: str) -> list[Any]:
        with self._lock:
            info = self.consumers.get(group)
            return [c.conn for c in info.channels.values()] if info is not None else []

    def producer_connection(self, group: str, turn: int = 0) -> Any | None:
        """One open connection of a producer of `group`, taking turns (ProducerManager's
        getAvailableChannel): where the broker asks about a transaction."""
        with self._lock:
            conns = [c.conn for _, c in sorted(self.producers.get(group, {}).items())
                     if not getattr(c.conn, "closed", False)]
        return conns[turn % len(conns)] if conns else None

    def groups_subscribed_to(self, topic: str) -> list[str]:
        with self._lock:
            return [g for g, info in self.consumers.items() if topic in info.subscriptions]


@dataclass(slots=True)
class LockEntry:
    client_id: str
    last_update_ms: int


class QueueLocks:
    """Orderly consumers lock their queues on the broker; a lock lapses after its lease unless
    renewed, so a dead consumer's queues go to a live one."""

    def __init__(self, lease_ms: int = 60_000) -> None:
        self.lease_ms = lease_ms
        self._lock = threading.Lock()
        self._table: dict[str, dict[tuple[str, str, int], LockEntry]] = {}

    def try_lock_batch(self, group: str, client_id: str, mqs: list[tuple[str, str, int]],
                       now_ms: int) -> list[tuple[str, str, int]]:
        locked: list[tuple[str, str, int]] = []
        with self._lock:
            table = self._table.setdefault(group, {})
            for mq in mqs:
                entry = table.get(mq)
                if entry is None or entry.client_id == client_id or now_ms - entry.last_update_ms > self.lease_ms:
                    table[mq] = LockEntry(client_id, now_ms)
                    locked.append(mq)
        return locked

    def unlock_batch(self, group: str, client_id: str, mqs: list[tuple[str, str, int]]) -> None:
        with self._lock:
            table = self._table.get(group, {})
            for mq in mqs:
                entry = table.get(mq)
                if entry is not None and entry.client_id == client_id:
                    del table[mq]

    def has_group(self, group: str) -> bool:
        """Some member of `group` locked a queue here (an orderly consumer)."""
        return bool(self._table.get(group))

    def holder(self, group: str, mq: tuple[str, str, int], now_ms: int) -> str | None:
        entry = self._table.get(group, {}).get(mq)
        if entry is None or now_ms - entry.last_update_ms > self.lease_ms:
            return None
        return entry.client_id
