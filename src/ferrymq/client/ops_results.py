"""What the operator's views of the admin client return (admin_ops.py): producer connections,
a consumer's running info, a broker's consume stats and the per-topic traffic figures."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .api import mq_from_key
from .results import QueueProgress


@dataclass(frozen=True, slots=True)
class ProducerConnection:
    """One online client of a producer group (RocketMQ's Connection)."""

    client_id: str
    client_addr: str
    language: str
    version: int
    brokers: tuple[str, ...] = ()  # the brokers it is connected to, of those asked

    def to_json(self) -> dict[str, Any]:
        return {"client_id": self.client_id, "client_addr": self.client_addr,
                "language": self.language, "version": self.version, "brokers": list(self.brokers)}


@dataclass(frozen=True, slots=True)
class QueueHeld:
    """One queue a consumer holds (RocketMQ's ProcessQueueInfo, the fields it fills)."""

    topic: str
    broker: str
    queue_id: int
    cached_msg_count: int
    cached_msg_size_mib: int
    commit_offset: int
    locked: bool
    dropped: bool
    cached_msg_min_offset: int = -1
    cached_msg_max_offset: int = -1
    # Wall-clock ms of the queue's last pull answered and last listener call (0: none yet),
    # and of its last lock (orderly): what tells a stalled member from an idle one.
    last_pull_timestamp: int = 0
    last_consume_timestamp: int = 0
    last_lock_timestamp: int = 0

    def to_json(self) -> dict[str, Any]:
        return {"topic": self.topic, "broker": self.broker, "queue_id": self.queue_id,
                "cached_msg_count": self.cached_msg_count,
                "cached_msg_size_mib": self.cached_msg_size_mib,
                "cached_msg_min_offset": self.cached_msg_min_offset,
                "cached_msg_max_offset": self.cached_msg_max_offset,
                "commit_offset": self.commit_offset, "locked": self.locked, "dropped": self.dropped,
                "last_pull_timestamp": self.last_pull_timestamp,
                "last_consume_timestamp": self.last_consume_timestamp,
                "last_lock_timestamp": self.last_lock_timestamp}


@dataclass(frozen=True, slots=True)
class ConsumeFigures:
    """A consumer's figures for one topic over the last minute (RocketMQ's ConsumeStatus):
    rates per second, round trips in ms, failed messages counted over the last hour."""

    topic: str
    pull_tps: float = 0.0
    pull_rt: float = 0.0
    consume_ok_tps: float = 0.0
    consume_failed_tps: float = 0.0
    consume_rt: float = 0.0
    consume_failed_msgs: int = 0

    def to_json(self) -> dict[str, Any]:
        return {"topic": self.topic, "pull_tps": self.pull_tps, "pull_rt": self.pull_rt,
                "consume_ok_tps": self.consume_ok_tps,
                "consume_failed_tps": self.consume_failed_tps, "consume_rt": self.consume_rt,
                "consume_failed_msgs": self.consume_failed_msgs}


@dataclass(frozen=True, slots=True)
class ConsumerRunningInfo:
    """What one online consumer says of itself (GET_CONSUMER_RUNNING_INFO), or why it could
    not be asked (`error`)."""

    group: str
    client_id: str
    properties: dict[str, str] = field(default_factory=dict)
    subscriptions: dict[str, str] = field(default_factory=dict)  # topic -> expression
    queues: tuple[QueueHeld, ...] = ()
    figures: tuple[ConsumeFigures, ...] = ()
    error: str | None = None

    @classmethod
    def from_body(cls, group: str, client_id: str, body: dict[str, Any]) -> ConsumerRunningInfo:
        queues = []
        for key, v in (body.get("mqTable") or {}).items():
            mq = mq_from_key(key)
            queues.append(QueueHeld(
                mq.topic, mq.broker_name, mq.queue_id,
                int(v.get("cachedMsgCount", 0)), int(v.get("cachedMsgSizeInMiB", 0)),
                int(v.get("commitOffset", -1)), bool(v.get("locked", False)),
                bool(v.get("droped", False)), int(v.get("cachedMsgMinOffset", -1)),
                int(v.get("cachedMsgMaxOffset", -1)), int(v.get("lastPullTimestamp", 0)),
                int(v.get("lastConsumeTimestamp", 0)), int(v.get("lastLockTimestamp", 0))))
        figures = [
            ConsumeFigures(str(t), float(s.get("pullTPS", 0)), float(s.get("pullRT", 0)),
                           float(s.get("consumeOKTPS", 0)), float(s.get("consumeFailedTPS", 0)),
                           float(s.get("consumeRT", 0)), int(s.get("consumeFailedMsgs", 0)))
            for t, s in (body.get("statusTable") or {}).items()
        ]
        subs = {str(s.get("topic", "")): str(s.get("subString", "*"))
                for s in body.get("subscriptionSet") or []}
        props = {str(k): str(v) for k, v in (body.get("properties") or {}).items()}
        return cls(group, client_id, props, subs,
                   tuple(sorted(queues, key=lambda q: (q.topic, q.broker, q.queue_id))),
                   tuple(sorted(figures, key=lambda f: f.topic)))

    def to_json(self) -> dict[str, Any]:
        return {"group": self.group, "client_id": self.client_id,
                "properties": dict(self.properties), "subscriptions": dict(self.subscriptions),
                "queues": [q.to_json() for q in self.queues],
                "status": [f.to_json() for f in self.figures], "error": self.error}


@dataclass(frozen=True, slots=True)
class GroupTopicStats:
    """One group's lag on one topic of one broker (a ConsumeStats of brokerConsumeStats)."""

    group: str
    topic: str
    consume_tps: float
    queues: tuple[QueueProgress, ...]

    @property
    def lag(self) -> int:
        return sum(q.lag for q in self.queues)

    def to_json(self) -> dict[str, Any]:
        return {"group": self.group, "topic": self.topic, "consume_tps": self.consume_tps,
                "lag": self.lag, "queues": [q.to_json() for q in self.queues]}


@dataclass(frozen=True, slots=True)
class BrokerConsumeStats:
    broker: str
    addr: str
    total_diff: int
    stats: tuple[GroupTopicStats, ...]

    def to_json(self) -> dict[str, Any]:
        return {"broker": self.broker, "addr": self.addr, "total_diff": self.total_diff,
                "stats": [s.to_json() for s in self.stats]}


@dataclass(frozen=True, slots=True)
class TopicGroupTraffic:
    """One row of statsAll: a topic's traffic in, and one consuming group's out (group ""
    when no group consumes the topic); TPS over the last minute, totals over the last day,
    summed over the topic's brokers."""

    topic: str
    group: str
    lag: int
    in_tps: float
    out_tps: float
    in_msgs_24h: int
    out_msgs_24h: int

    def to_json(self) -> dict[str, Any]:
        return {"topic": self.topic, "group": self.group, "lag": self.lag,
                "in_tps": round(self.in_tps, 2), "out_tps": round(self.out_tps, 2),
                "in_msgs_24h": self.in_msgs_24h, "out_msgs_24h": self.out_msgs_24h}
