"""What request processors may use of the broker.

Processors depend on this protocol, not on the Broker class, so the controller imports the
processors without the processors importing the controller back, and a processor's reach into
broker state is listed in one place."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol

from ..store import MessageStore, PutResult, StoreMessage
from .clients import ClientRegistry, QueueLocks
from .config import BrokerConfig
from .events import MessageEvents
from .handover import Handover
from .longpoll import PullWaiters
from .offsets import DelayOffsetManager, OffsetManager
from .stats import TrafficStats
from .topics import TopicManager

if TYPE_CHECKING:
    from .trace import TraceRecorder
    from .transaction import TransactionService


class BrokerContext(Protocol):
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
    def delay_offsets(self) -> DelayOffsetManager: ...

    @property
    def clients(self) -> ClientRegistry: ...

    @property
    def locks(self) -> QueueLocks: ...

    @property
    def handover(self) -> Handover: ...

    @property
    def events(self) -> MessageEvents: ...

    @property
    def trace(self) -> TraceRecorder | None:
        """The message trace recorder; None when trace_enable is off."""

    @property
    def waiters(self) -> PullWaiters | None: ...

    @property
    def stats(self) -> TrafficStats: ...

    @property
    def started_ms(self) -> int: ...

    @property
    def transactions(self) -> TransactionService:
        """Half messages and END_TRANSACTION; running only while the broker is a master."""

    def reconfigure(self, config: BrokerConfig) -> None:
        """Replace the configuration while running (UPDATE_BROKER_CONFIG): only keys read on
        each request take effect, so callers change only those."""
        ...

    def now_ms(self) -> int: ...

    def suggest_broker_id(self, topic: str, queue_id: int, next_offset: int) -> int:
        """Which broker of the group the consumer should pull this queue from next."""
        ...

    def refuse_writes(self) -> str:
        """Why this broker takes no writes now (a slave, or a master that lost its lease);
        "" when it does."""
        ...

    def timer_position(self) -> tuple[int, int] | None:
        """(read time, enqueue offset) of the timer wheel; None when it is off."""
        ...

    def ha_table(self) -> dict[str, str]:
        """The replication keys of the runtime table (docs/replication.md)."""
        ...

    def connection_table(self) -> dict[str, str]:
        """Connection bounds at work (docs/protocol.md 6a), for GET_BROKER_RUNTIME_INFO."""
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
