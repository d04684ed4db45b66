"""The one way a message enters the store, whoever sends it (a producer, the gRPC front, pop's
and a consumer's send-back, the delay schedule, the timer wheel, transactions, the trace
recorder):

    role gate (a slave, or a master that lost its lease, refuses)
      -> route (a delay level to the schedule topic, TIMER_* to the timer topic)
      -> the store's coalesced append
      -> the replication wait (SYNC_MASTER answers once an in-sync slave has the batch)
      -> traffic stats and STORED events.

The stages see narrow protocols, so the pipeline knows nothing of the broker that owns it."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol

from ..common import props as P
from ..common.names import REVIVE_LOG_TOPIC_PREFIX, SCHEDULE_TOPIC
from ..common.record import properties_map, property_value
from ..store import MessageStore, PutResult, PutStatus, StoreMessage
from .events import MessageEvent, MessageEventKind, MessageEvents
from .schedule import to_scheduled
from .stats import TrafficStats
from .timer import TimerMessageError, asks_for_timer, to_timer
from .trace.codec import TRACE_TOPIC

# What a message's encoded properties must contain to ask for a delay level or a timer: a put
# whose messages contain neither needs no property lookup (TIMER_* are the timer's requests).
_DELAY_MARK = P.PROPERTY_DELAY_TIME_LEVEL.encode() + b"\x01"
_TIMER_MARK = b"TIMER_"

# The broker's own trace records and pop checkpoints are not traffic: neither counted nor
# traced.
_NOT_TRAFFIC = frozenset({TRACE_TOPIC})


class WriteGate(Protocol):
    """Replication's part of a put: whether this broker takes writes, and the wait after one."""

    def refuse_reason(self) -> str: ...

    async def after_put(self, result: PutResult) -> PutResult: ...


class Routing:
    """Where a message asking for a delay level or a timer is stored instead of its topic."""

    def __init__(self, delay_levels: int, timer_max_delay_ms: int | None,
                 clock: Callable[[], int]) -> None:
        self.delay_levels = delay_levels
        self.timer_max_delay_ms = timer_max_delay_ms  # None: the timer wheel is off
        self._clock = clock

    def route(self, msg: StoreMessage) -> StoreMessage:
        """`msg`, or its copy for the schedule or timer topic; TimerMessageError when it asks
        for a timer the broker cannot honour."""
        props = msg.properties
        if isinstance(props, bytes) and _DELAY_MARK not in props and _TIMER_MARK not in props:
            return msg  # as sent by a producer, asking for neither: two scans of C speed
        if asks_for_timer(props):
            if self.timer_max_delay_ms is not None:
                msg = to_timer(msg, self._clock(), self.timer_max_delay_ms)
            elif asks_for_timer(properties_map(props)):
                # The quick test only found TIMER_ somewhere (a key, a tag or a value may
                # contain it); without a wheel only a real request is refused.
                raise TimerMessageError("TIMER_*", "", "cannot be honoured: the broker's timer "
                                        "wheel is off (timer_wheel_enable)")
        level_text = property_value(msg.properties, P.PROPERTY_DELAY_TIME_LEVEL)
        if not level_text or msg.topic == SCHEDULE_TOPIC:
            return msg
        try:
            level = int(level_text)
        except ValueError:
            return msg
        if level <= 0:
            return msg
        return to_scheduled(msg, level, self.delay_levels)


class PutPipeline:
    def __init__(self, store: Callable[[], MessageStore | None], gate: WriteGate,
                 routing: Routing, stats: TrafficStats, events: MessageEvents) -> None:
        self._store = store
        self._gate = gate
        self.routing = routing
        self._stats = stats
        self._events = events

    async def put(self, msgs: Sequence[StoreMessage], *, route: bool = True) -> PutResult:
        """Store `msgs`; `route=False` stores them in the topics they name (what the schedule,
        the timer and transactions write has been routed already)."""
        store = self._store()
        if store is None:
            return PutResult(PutStatus.SERVICE_NOT_AVAILABLE, [], 0, "the store is not started")
        refused = self._gate.refuse_reason()
        if refused:
            return PutResult(PutStatus.SERVICE_NOT_AVAILABLE, [], store.max_phy_offset, refused)
        if route:
            try:
                msgs = [self.routing.route(m) for m in msgs]
            except TimerMessageError as exc:
                return PutResult(PutStatus.MESSAGE_ILLEGAL, [], store.max_phy_offset, str(exc))
        result = await self._gate.after_put(await store.put_messages_async(msgs))
        if (result.status.stored and msgs and msgs[0].topic not in _NOT_TRAFFIC
                and not msgs[0].topic.startswith(REVIVE_LOG_TOPIC_PREFIX)):
            self._stats.add_put(len(msgs))
            self._stats.count_put(msgs, result)
            if self._events.wants_stored:
                for m, a in zip(msgs, result.messages, strict=False):
                    self._events.emit(MessageEvent(
                        MessageEventKind.STORED, m.topic, m.queue_id, a.queue_offset,
                        msg_id=property_value(m.properties,
                                              P.PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX) or ""))
        return result
