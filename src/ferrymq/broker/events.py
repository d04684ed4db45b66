"""Every change in a message's life on this broker passes through MessageEvents: stored,
delivered to a consumer, acknowledged (offset committed), sent back for retry, scheduled,
dead-lettered. Message trace, metrics and the status view subscribe here instead of each
processor growing its own hooks."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import Enum

log = logging.getLogger("ferrymq.broker.events")


class MessageEventKind(Enum):
    STORED = "stored"
    DELIVERED = "delivered"
    COMMITTED = "committed"
    SENT_BACK = "sent_back"
    SCHEDULED_DELIVERY = "scheduled_delivery"
    DEAD_LETTERED = "dead_lettered"
    # Pop consumption: handed out invisible (detail "offsets"), acknowledged, new deadline.
    POPPED = "popped"
    ACKED = "acked"
    INVISIBLE_CHANGED = "invisible_changed"
    ROLLED_BACK = "rolled_back"  # a transaction's half message, ended by a rollback

    # Identity hash, as PutStatus's: kinds are looked up in sets on every put.
    __hash__ = object.__hash__


@dataclass(frozen=True, slots=True)
class MessageEvent:
    kind: MessageEventKind
    topic: str
    queue_id: int
    queue_offset: int = -1
    count: int = 1
    group: str = ""
    client: str = ""
    msg_id: str = ""
    detail: dict[str, str] = field(default_factory=dict)


Listener = Callable[[MessageEvent], None]


class MessageEvents:
    def __init__(self) -> None:
        self._listeners: list[tuple[Listener, frozenset[MessageEventKind] | None]] = []
        self._wanted: set[MessageEventKind] = set()

    def subscribe(self, listener: Listener, *,
                  kinds: frozenset[MessageEventKind] | None = None) -> None:
        """kinds: only these are passed to the listener, and emitters of other kinds need not
        build an event for it (a put need not build one per message, a pull none)."""
        self._listeners.append((listener, kinds))
        self._wanted.update(MessageEventKind if kinds is None else kinds)

    @property
    def active(self) -> bool:
        return bool(self._listeners)

    def wants(self, kind: MessageEventKind) -> bool:
        return kind in self._wanted

    @property
    def wants_stored(self) -> bool:
        return MessageEventKind.STORED in self._wanted

    def emit(self, event: MessageEvent) -> None:
        for listener, kinds in self._listeners:
            if kinds is not None and event.kind not in kinds:
                continue
            try:
                listener(event)
            except Exception:  # a broken observer must never fail a send or a pull
                log.exception("message event listener failed on %s", event.kind.value)
