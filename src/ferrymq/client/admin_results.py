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
