"""Consumer-facing enums and the contexts a listener receives (RocketMQ's names)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from enum import Enum
from typing import Any

from ...common.message import MessageExt, MessageQueue


class ConsumeStatus(Enum):
    CONSUME_SUCCESS = "CONSUME_SUCCESS"
    RECONSUME_LATER = "RECONSUME_LATER"


class ConsumeOrderlyStatus(Enum):
    SUCCESS = "SUCCESS"
    SUSPEND_CURRENT_QUEUE_A_MOMENT = "SUSPEND_CURRENT_QUEUE_A_MOMENT"
    # RocketMQ's deprecated manual-commit variants, accepted as SUCCESS and suspend.
    COMMIT = "COMMIT"
    ROLLBACK = "ROLLBACK"


class MessageModel(Enum):
    CLUSTERING = "CLUSTERING"
    BROADCASTING = "BROADCASTING"


class ConsumeFromWhere(Enum):
    LAST_OFFSET = "CONSUME_FROM_LAST_OFFSET"
    FIRST_OFFSET = "CONSUME_FROM_FIRST_OFFSET"
    TIMESTAMP = "CONSUME_FROM_TIMESTAMP"


# A batch has this ack index until the listener narrows it: "everything succeeded".
ACK_ALL = 2**31 - 1


@dataclass(slots=True)
class ConsumeConcurrentlyContext:
    message_queue: MessageQueue
    # On CONSUME_SUCCESS, messages after this index are treated as failed (partial success).
    ack_index: int = ACK_ALL
    # 0: the broker picks 3 + reconsume_times; -1: straight to the DLQ; >0: this level.
    delay_level_when_next_consume: int = 0


@dataclass(slots=True)
class ConsumeOrderlyContext:
    message_queue: MessageQueue
    auto_commit: bool = True
    # -1: use the consumer's suspend_current_queue_time.
    suspend_current_queue_time_millis: int = -1


ConcurrentListener = Callable[[list[MessageExt], ConsumeConcurrentlyContext], Any]
OrderlyListener = Callable[[list[MessageExt], ConsumeOrderlyContext], Any]
AsyncListener = Callable[[list[MessageExt], Any], Awaitable[Any]]
