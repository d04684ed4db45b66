"""What client calls return: send results, pull results and the admin views."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from ..common.message import MessageExt, MessageQueue


class SendStatus(Enum):
    SEND_OK = "SEND_OK"
    FLUSH_DISK_TIMEOUT = "FLUSH_DISK_TIMEOUT"
    FLUSH_SLAVE_TIMEOUT = "FLUSH_SLAVE_TIMEOUT"
    SLAVE_NOT_AVAILABLE = "SLAVE_NOT_AVAILABLE"


@dataclass(frozen=True, slots=True)
class SendResult:
    status: SendStatus
    msg_id: str  # the client's unique id (UNIQ_KEY); comma-joined for a batch
    offset_msg_id: str  # store host + commit-log offset, as the broker answered
    queue_id: int
    queue_offset: int
    broker: str  # broker name

    def to_json(self) -> dict[str, Any]:
        return {
            "status": self.status.value,
            "msg_id": self.msg_id,
            "offset_msg_id": self.offset_msg_id,
            "queue_id": self.queue_id,
            "queue_offset": self.queue_offset,
            "broker": self.broker,
        }


class PullStatus(Enum):
    FOUND = "FOUND"
    NO_NEW_MSG = "NO_NEW_MSG"
    NO_MATCHED_MSG = "NO_MATCHED_MSG"
    OFFSET_ILLEGAL = "OFFSET_ILLEGAL"


@dataclass(frozen=True, slots=True)
class RawPullResult:
    status: PullStatus
    body: bytes  # stored-message records back to back (empty unless FOUND)
    next_begin_offset: int
    min_offset: int
    max_offset: int
    broker: str
    # The broker id to pull this queue from next (a slave names its master, 0).
    suggest_which_broker_id: int = 0


@dataclass(frozen=True, slots=True)
class PullResult:
    status: PullStatus
    messages: list[MessageExt]
    next_begin_offset: int
    min_offset: int
    max_offset: int


@dataclass(frozen=True, slots=True)
class QueueStatus:
    """One row of `topic status`."""

    topic: str
    broker: str
    queue_id: int
    min_offset: int
    max_offset: int
    last_update: int  # store time (ms) of the newest message, 0 if none
    # "slave": the broker group's master is down and its slave answered.
    read_from: str = "master"

    def to_json(self) -> dict[str, Any]:
        return {
            "broker": self.broker,
            "queue_id": self.queue_id,
            "min_offset": self.min_offset,
            "max_offset": self.max_offset,
            "last_update": self.last_update,
            "read_from": self.read_from,
        }


@dataclass(frozen=True, slots=True)
class QueueProgress:
    """One row of a group's progress: how far the group is behind on one queue."""

    topic: str
    broker: str
    queue_id: int
    broker_offset: int
    consumer_offset: int
    last_timestamp: int = 0
    # "slave": the broker group's master is down and its slave answered.
    read_from: str = "master"

    @property
    def lag(self) -> int:
        return max(self.broker_offset - self.consumer_offset, 0)

    @property
    def message_queue(self) -> MessageQueue:
        return MessageQueue(self.topic, self.broker, self.queue_id)

    def to_json(self) -> dict[str, Any]:
        return {
            "topic": self.topic,
            "broker": self.broker,
            "queue_id": self.queue_id,
            "broker_offset": self.broker_offset,
            "consumer_offset": self.consumer_offset,
            "lag": self.lag,
            "read_from": self.read_from,
            # RocketMQ's OffsetWrapper.lastTimestamp (mqadmin's #LastTime): when the last
            # consumed message was stored, ms; 0 when the group consumed none here.
            "last_timestamp": self.last_timestamp,
        }


@dataclass(frozen=True, slots=True)
class ConsumerConnectionInfo:
    client_id: str
    client_addr: str
    language: str
    version: int


@dataclass(frozen=True, slots=True)
class ConsumerConnections:
    group: str
    connections: list[ConsumerConnectionInfo]
    subscriptions: dict[str, str]  # topic -> expression
    message_model: str = ""
    consume_type: str = ""
    consume_from_where: str = ""
    raw: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "group": self.group,
            "message_model": self.message_model,
            "consume_type": self.consume_type,
            "consume_from_where": self.consume_from_where,
            "connections": [
                {
                    "client_id": c.client_id,
                    "client_addr": c.client_addr,
                    "language": c.language,
                    "version": c.version,
                }
                for c in self.connections
            ],
            "subscriptions": dict(self.subscriptions),
        }
