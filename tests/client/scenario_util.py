"""Helpers for the scenario tests: fast client settings and thread-safe recorders."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any

from ferrymq import AdminClient, MessageExt, MessageQueue

# Every interval a scenario would otherwise wait for, shortened; behaviour is unchanged.
FAST_CONSUMER: dict[str, Any] = dict(
    rebalance_interval=0.3,
    persist_interval=0.2,
    route_refresh_interval=0.3,
    heartbeat_interval=1.0,
    pull_suspend_timeout=1.0,
    pull_delay_on_error=0.2,
    local_retry_delay=0.3,
    lock_interval=0.3,
    lock_retry_delay=0.1,
    suspend_current_queue_time=0.05,
    shutdown_timeout=20.0,
)
FAST_PRODUCER: dict[str, Any] = dict(route_refresh_interval=0.3, heartbeat_interval=1.0)


@dataclass
class Recorder:
    """Everything a listener saw, from any consume thread."""

    messages: list[MessageExt] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, msgs: list[MessageExt]) -> None:
        with self.lock:
            self.messages.extend(msgs)

    def count(self) -> int:
        with self.lock:
            return len(self.messages)

    def bodies(self) -> list[bytes]:
        with self.lock:
            return [m.body for m in self.messages]

    def snapshot(self) -> list[MessageExt]:
        with self.lock:
            return list(self.messages)


def committed(admin: AdminClient, group: str, topic: str) -> dict[int, int]:
    return {
        mq.queue_id: admin.query_consumer_offset(group, mq) for mq in admin.message_queues(topic)
    }


def single_queue(topic: str, queue_id: int = 0, broker: str = "broker-a") -> MessageQueue:
    return MessageQueue(topic, broker, queue_id)
