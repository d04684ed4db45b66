"""A message's trace timeline as the broker answers QUERY_MESSAGE_TRACE and the admin client
returns it (docs/trace.md): one TraceEvent per state change, oldest first."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

# The kinds a timeline holds. Broker-recorded unless the source says "client".
STORED = "stored"  # in its topic (also a transaction's commit or a delay's due time)
SCHEDULED = "scheduled"  # in the delay-level schedule (a delay message or a retry's wait)
TIMER_SCHEDULED = "timer_scheduled"  # in the timer wheel until deliver_ms
PREPARED = "prepared"  # a transaction's half message
TRANSACTION_COMMITTED = "transaction_committed"
TRANSACTION_ROLLED_BACK = "transaction_rolled_back"
DELIVERED = "delivered"  # pulled by a consumer of a group
CONSUMED = "consumed"  # the group's committed offset moved past it
FAILED = "failed"  # a consumer sent it back; a retry follows
RETRY = "retry"  # stored in the group's retry topic (detail retry_level)
DEAD_LETTERED = "dead_lettered"  # sent back too often: moved to the group's DLQ
DLQ_STORED = "dlq_stored"
REDRIVEN = "redriven"  # sent from the DLQ back to the group's retry topic
POPPED = "popped"  # handed out invisible (pop consumption)
ACKED = "acked"
INVISIBLE_CHANGED = "invisible_changed"
# RocketMQ client trace data (RMQ_SYS_TRACE_TOPIC, TraceDataEncoder).
CLIENT_PUB = "client_pub"
CLIENT_SUB_BEFORE = "client_sub_before"
CLIENT_SUB_AFTER = "client_sub_after"
CLIENT_END_TRANSACTION = "client_end_transaction"

KINDS = (STORED, SCHEDULED, TIMER_SCHEDULED, PREPARED, TRANSACTION_COMMITTED,
         TRANSACTION_ROLLED_BACK, DELIVERED, CONSUMED, FAILED, RETRY, DEAD_LETTERED, DLQ_STORED,
         REDRIVEN, POPPED, ACKED, INVISIBLE_CHANGED, CLIENT_PUB, CLIENT_SUB_BEFORE,
         CLIENT_SUB_AFTER, CLIENT_END_TRANSACTION)


@dataclass(frozen=True, slots=True)
class TraceEvent:
    """One state change. `topic`/`queue_id`/`queue_offset` say which stored copy it concerns
    (-1 when unknown, e.g. some client records); `group` and `client` who acted on it;
    `detail` the kind's own fields (retry_level, delay_level, deliver_ms, cost_ms,
    success, ...), all text."""

    ts: int
    kind: str
    msg_id: str
    broker: str = ""
    topic: str = ""
    queue_id: int = -1
    queue_offset: int = -1
    group: str = ""
    client: str = ""
    source: str = "broker"
    detail: dict[str, str] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "ts": self.ts,
            "kind": self.kind,
            "msg_id": self.msg_id,
            "broker": self.broker,
            "topic": self.topic,
            "queue_id": self.queue_id,
            "queue_offset": self.queue_offset,
            "group": self.group,
            "client": self.client,
            "source": self.source,
            "detail": dict(self.detail),
        }

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> TraceEvent:
        return cls(
            ts=int(doc.get("ts", 0)),
            kind=str(doc.get("kind", "")),
            msg_id=str(doc.get("msg_id", "")),
            broker=str(doc.get("broker", "")),
            topic=str(doc.get("topic", "")),
            queue_id=int(doc.get("queue_id", -1)),
            queue_offset=int(doc.get("queue_offset", -1)),
            group=str(doc.get("group", "")),
            client=str(doc.get("client", "")),
            source=str(doc.get("source", "broker")),
            detail={str(k): str(v) for k, v in dict(doc.get("detail") or {}).items()},
        )
