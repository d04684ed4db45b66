"""What the broker's own services (message traces, transactions, delayed and timer delivery,
replication and the controller agent) use of the broker.

They depend on these protocols, not on the Broker class, so the controller builds them without
their importing it back; BrokerContext (context.py) adds what request processors use besides."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from ..remoting import RemotingClient
from ..store import MessageStore, PutResult, StoreMessage
from .clients import ClientRegistry
from .config import BrokerConfig
from .events import MessageEvents
from .groups import GroupManager
from .offsets import DelayOffsetManager, OffsetManager
from .topics import TopicManager


class BrokerCore(Protocol):
    @property
    def config(self) -> BrokerConfig: ...

    @property
    def store(self) -> MessageStore | None:
        """None until the store has started; processors answer SYSTEM_BUSY until then."""

    @property
    def topics(self) -> TopicManager: ...

    @property
    def offsets(self) -> OffsetManager: ...

    @property
    def groups(self) -> GroupManager:
        """The subscription group table (RocketMQ's SubscriptionGroupManager)."""

    @property
    def delay_offsets(self) -> DelayOffsetManager: ...

    @property
    def clients(self) -> ClientRegistry: ...

    @property
    def events(self) -> MessageEvents: ...

    def now_ms(self) -> int: ...

    def refuse_writes(self) -> str:
        """Why this broker takes no writes now (a slave, or a master that lost its lease);
        "" when it does."""
        ...

    async def put(self, msgs: Sequence[StoreMessage], *, allow_delay: bool = True) -> PutResult:
        """Store messages (delayed ones go to the schedule topic) and emit STORED events."""
        ...

    async def persist_topics(self) -> None:
        """Return once topics.json holds every topic change made so far (a no-op when it does)."""
        ...

    async def register_once(self) -> bool:
        """Tell the name servers the current topic set now (not on the next periodic beat)."""
        ...


class ReplicatedBroker(BrokerCore, Protocol):
    """What replication and the controller agent use besides: the broker's address, its
    connection to the name servers (and the controller), and the services only a master runs."""

    @property
    def addr(self) -> str: ...

    @property
    def namesrv_client(self) -> RemotingClient: ...

    def request_registration(self) -> None:
        """Register with the name servers soon (the periodic loop wakes up)."""
        ...

    def start_master_services(self) -> None: ...

    def stop_master_services(self) -> None: ...
