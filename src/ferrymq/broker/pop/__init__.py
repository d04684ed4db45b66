"""Pop consumption: per-message invisibility and acknowledgement for a consumer group on a
queue (RocketMQ 5's POP_MESSAGE / ACK_MESSAGE / CHANGE_MESSAGE_INVISIBLETIME). state.py is the
state machine, service.py the broker-side service any front end calls (processors/pop.py
answers the remoting requests)."""

from .service import (
    INIT_MAX,
    INIT_MIN,
    ChangeResult,
    PoppedMessage,
    PopRefused,
    PopResult,
    PopService,
    pop_service,
)
from .state import AckOutcome, ChangeOutcome, QueuePop

__all__ = [
    "INIT_MAX",
    "INIT_MIN",
    "AckOutcome",
    "ChangeOutcome",
    "ChangeResult",
    "PopRefused",
    "PopResult",
    "PopService",
    "PoppedMessage",
    "QueuePop",
    "pop_service",
]
