"""What the operations commands of the admin client return: brokers with their runtime
state, and a topic's change on each broker."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

# GET_BROKER_RUNTIME_INFO keys shown as columns (RocketMQ's clusterList shows a similar few).
RUNTIME_SUMMARY = (
    "brokerVersionDesc",
    "bootTimestamp",
    "commitLogMaxOffset",
    "commitLogDiskRatio",
    "topicCount",
    "consumerGroupCount",
)


@dataclass(frozen=True, slots=True)
class BrokerStatus:
    """One broker (master or slave) as the name server lists it, with its runtime table, or
    the reason that table could not be read."""

    cluster: str
    broker: str
    broker_id: int
    addr: str
    runtime: dict[str, str] = field(default_factory=dict)
    error: str | None = None

    @property
    def role(self) -> str:
        return "MASTER" if self.broker_id == 0 else "SLAVE"

    def to_json(self) -> dict[str, Any]:
        return {
            "cluster": self.cluster,
            "broker": self.broker,
            "broker_id": self.broker_id,
            "role": self.role,
            "addr": self.addr,
            "runtime": dict(self.runtime),
            "error": self.error,
        }


@dataclass(frozen=True, slots=True)
class MessageTrack:
    """Where one group stands with one stored message (RocketMQ's MessageTrack): CONSUMED,
    CONSUMED_BUT_FILTERED (its subscription skips the tag), NOT_CONSUME_YET, PULL (a pull
    consumer: its progress is its own), NOT_ONLINE (no member connected; `consumed` still
    says what the committed offset shows)."""

    topic: str
    queue_id: int
    queue_offset: int
    group: str
    track: str
    consumed: bool
    consumer_offset: int

    def to_json(self) -> dict[str, Any]:
        return {
            "topic": self.topic,
            "queue_id": self.queue_id,
            "queue_offset": self.queue_offset,
            "group": self.group,
            "track": self.track,
            "consumed": self.consumed,
            "consumer_offset": self.consumer_offset,
        }
