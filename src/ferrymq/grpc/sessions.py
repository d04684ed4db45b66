"""gRPC clients by client id (the `x-mq-client-id` header): the settings each reported on its
telemetry stream, the stream to push server commands on, and its membership in the broker's
producer and consumer groups (so `ferrymq group connections` lists gRPC consumers too)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..broker.clients import ClientChannel, ClientRegistry, Subscription, parse_subscription
from .pb import definition_pb2 as pb
from .pb import service_pb2 as spb

_CONSUME_TYPES = {pb.SIMPLE_CONSUMER: "CONSUME_ACTIVELY", pb.PUSH_CONSUMER: "CONSUME_PASSIVELY"}


@dataclass(eq=False)
class ClientSession:
    client_id: str
    remote_addr: str
    language: str = "PYTHON"
    version: str = ""
    settings: pb.Settings | None = None
    last_seen_ms: int = 0
    # Commands for the client's open telemetry stream (None closes it); replaced when the
    # client opens a new stream.
    outbox: asyncio.Queue[spb.TelemetryCommand | None] | None = None
    producer_topics: set[str] = field(default_factory=set)
    consumer_group: str = ""
    closed: bool = False
    # Turns a remoting notice of the broker into a telemetry command, or None to drop it.
    translate: Callable[[Any], spb.TelemetryCommand | None] | None = None

    async def invoke_oneway(self, request: Any) -> None:
        """The broker speaks to group members with remoting notices. A transaction check
        becomes the recover-orphaned-transaction command on the telemetry stream; the others
        (consumer ids changed, offset reset) mean nothing to a gRPC client, whose queues are
        picked at each receive, and are dropped."""
        command = self.translate(request) if self.translate is not None else None
        if command is not None:
            self.push(command)

    @property
    def client_type(self) -> int:
        return self.settings.client_type if self.settings is not None else pb.CLIENT_TYPE_UNSPECIFIED

    def push(self, command: spb.TelemetryCommand) -> bool:
        """Queue a server command on the telemetry stream; False when none is open."""
        if self.outbox is None:
            return False
        self.outbox.put_nowait(command)
        return True


def subscription_of(topic: str, expression: pb.FilterExpression, *, property_filter: bool) -> Subscription:
    """A filter expression as the broker's subscription (SQL92 compiled); raises the broker's
    SubscriptionParseError / UnsupportedFilterError when it cannot be served."""
    kind = "SQL92" if expression.type == pb.SQL else "TAG"
    return parse_subscription(topic, expression.expression or "*", 0, kind, property_filter=property_filter)


def subscriptions(settings: pb.Settings, *, property_filter: bool = True) -> list[Subscription]:
    return [subscription_of(e.topic.name, e.expression, property_filter=property_filter)
            for e in settings.subscription.subscriptions]


class Sessions:
    def __init__(self, registry: ClientRegistry, clock: Callable[[], int],
                 translate: Callable[[Any], spb.TelemetryCommand | None] | None = None) -> None:
        self._registry = registry
        self._clock = clock
        self._translate = translate
        self._by_id: dict[str, ClientSession] = {}

    def get(self, client_id: str) -> ClientSession | None:
        return self._by_id.get(client_id)

    def touch(self, client_id: str, remote_addr: str, language: str = "PYTHON", version: str = "") -> ClientSession:
        session = self._by_id.get(client_id)
        if session is None:
            session = self._by_id[client_id] = ClientSession(client_id, remote_addr, language, version,
                                                             translate=self._translate)
        session.last_seen_ms = self._clock()
        return session

    def _channel(self, session: ClientSession) -> ClientChannel:
        return ClientChannel(session.client_id, session, session.language, 0, session.last_seen_ms)

    def update_settings(self, session: ClientSession, settings: pb.Settings,
                        subs: list[Subscription] | None = None) -> None:
        session.settings = settings
        self.register(session, subs)

    def register(self, session: ClientSession, subs: list[Subscription] | None = None) -> None:
        """(Re)join the broker's groups as the settings say; heartbeats call it to stay alive."""
        settings = session.settings
        if settings is None:
            return
        session.last_seen_ms = self._clock()
        if settings.HasField("publishing"):
            topics = {t.name for t in settings.publishing.topics}
            for gone in session.producer_topics - topics:
                self._registry.unregister(session, producer_group=gone)
            session.producer_topics = topics
            for topic in topics:
                self._registry.register_producer(topic, self._channel(session))
        elif settings.HasField("subscription"):
            group = settings.subscription.group.name
            if session.consumer_group and session.consumer_group != group:
                self._registry.unregister(session, consumer_group=session.consumer_group)
            session.consumer_group = group
            self._registry.register_consumer(
                group, self._channel(session),
                consume_type=_CONSUME_TYPES.get(settings.client_type, "CONSUME_ACTIVELY"),
                message_model="CLUSTERING", consume_from_where="CONSUME_FROM_LAST_OFFSET",
                subscriptions=subs if subs is not None else subscriptions(settings))

    def remove(self, client_id: str) -> ClientSession | None:
        session = self._by_id.pop(client_id, None)
        if session is not None:
            session.closed = True
            self._registry.drop_connection(session)
            if session.outbox is not None:
                session.outbox.put_nowait(None)
        return session

    def expire(self, idle_ms: int) -> list[str]:
        now = self._clock()
        gone = [cid for cid, s in self._by_id.items() if now - s.last_seen_ms > idle_ms]
        for cid in gone:
            self.remove(cid)
        return gone

    def producers_of(self, topic: str) -> list[ClientSession]:
        """Producers of a topic with an open telemetry stream, most recently seen first."""
        found = [s for s in self._by_id.values() if topic in s.producer_topics and s.outbox is not None]
        return sorted(found, key=lambda s: -s.last_seen_ms)
