"""What request processors may use of the broker.

Processors depend on this protocol, not on the Broker class, so the controller imports the
processors without the processors importing the controller back, and a processor's reach into
broker state is listed here and in BrokerCore (core.py), the part the broker's own services use
too."""

from __future__ import annotations

from typing import Protocol

from .clients import QueueLocks
from .config import BrokerConfig
from .core import BrokerCore
from .handover import Handover
from .longpoll import PullWaiters
from .stats import TrafficStats
from .trace import TraceRecorder
from .transaction import TransactionService


class BrokerContext(BrokerCore, Protocol):
    @property
    def locks(self) -> QueueLocks: ...

    @property
    def handover(self) -> Handover: ...

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

    def suggest_broker_id(self, topic: str, queue_id: int, next_offset: int, slow_broker_id: int = 1) -> int:
        """Which broker of the group the consumer should pull this queue from next;
        `slow_broker_id` is the one a consumer far behind is sent to when it is in sync (the
        group's which_broker_when_consume_slowly)."""
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
