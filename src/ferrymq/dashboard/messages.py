"""Message lookup for the dashboard: by id (unique or offset id) or by key, and a message's
trace: the timeline the brokers recorded (AdminClient.message_trace) and where each consuming
group stands with it."""

from __future__ import annotations

import asyncio
from typing import Any

from ..client.admin_async import AsyncAdminClient
from ..client.admin_results import MessageTrace
from ..client.errors import MessageNotFoundError, NoRouteError
from ..client.message_json import message_detail
from ..client.results import PullStatus, QueueStatus
from ..common import props as P
from ..common.errors import FerryMQError
from ..common.ids import is_offset_msg_id, is_uniq_id
from ..common.message import MessageExt, MessageQueue
from ..common.names import SCHEDULE_TOPIC, is_dlq_topic, is_retry_topic
from ..common.trace_events import (
    ACKED,
    CLIENT_END_TRANSACTION,
    CLIENT_PUB,
    CLIENT_SUB_AFTER,
    CLIENT_SUB_BEFORE,
    CONSUMED,
    DEAD_LETTERED,
    DELIVERED,
    DLQ_STORED,
    FAILED,
    INVISIBLE_CHANGED,
    POPPED,
    PREPARED,
    REDRIVEN,
    RETRY,
    SCHEDULED,
    STORED,
    TIMER_SCHEDULED,
    TRANSACTION_COMMITTED,
    TRANSACTION_ROLLED_BACK,
    TraceEvent,
)

BODY_PREVIEW = 4096


async def lookup(admin: AsyncAdminClient, msg_id: str, topic: str | None) -> MessageExt:
    """The message with this unique id or offset id (its original copy when it was retried)."""
    offset_id, uniq_id = is_offset_msg_id(msg_id), is_uniq_id(msg_id)
    if not (offset_id or uniq_id):
        raise ValueError(f"{msg_id!r} is not a message id (32 or 56 hex digits: a msg_id or an offset_msg_id)")
    errors: list[str] = []
    if topic and uniq_id:
        try:
            return await admin.query_by_uniq_key(topic, msg_id)
        except FerryMQError as exc:
            errors.append(str(exc))
    if offset_id:
        try:
            return await admin.view_message(msg_id)
        except FerryMQError as exc:
            errors.append(str(exc))
    if uniq_id and not topic:
        found = await admin.find_by_uniq_key(msg_id)
        if found:
            return found[0]
        errors.append("no topic has a message with this unique id")
    raise MessageNotFoundError(f"message {msg_id}: {'; '.join(errors)}")


async def latest(admin: AsyncAdminClient, topic: str, limit: int) -> list[MessageExt]:
    """The topic's newest `limit` messages over all its queues, newest first: the last
    `limit` of each queue are read (without a group, committing nothing) and merged."""
    queues = await admin.topic_status(topic)

    async def tail(q: QueueStatus) -> list[MessageExt]:
        start = max(q.min_offset, q.max_offset - limit)
        if start >= q.max_offset:
            return []
        result = await admin.pull(MessageQueue(topic, q.broker, q.queue_id), start, limit)
        return result.messages if result.status is PullStatus.FOUND else []

    found = [m for msgs in await asyncio.gather(*(tail(q) for q in queues)) for m in msgs]
    found.sort(key=lambda m: (m.store_timestamp, m.broker, m.queue_id, m.queue_offset), reverse=True)
    return found[:limit]


def detail_json(msg: MessageExt) -> dict[str, Any]:
    out = message_detail(msg)
    out.pop("body_b64", None)
    text = msg.body[:BODY_PREVIEW].decode("utf-8", "replace")
    out["body"] = text
    out["body_size"] = len(msg.body)
    out["body_truncated"] = len(msg.body) > BODY_PREVIEW
    return out


def _copy_event(msg: MessageExt) -> dict[str, Any]:
    """One stored copy as a timeline event: what a broker that records no trace still shows."""
    if is_dlq_topic(msg.topic):
        kind, text = "dlq_stored", f"stored in {msg.topic} after {msg.reconsume_times} attempts"
    elif is_retry_topic(msg.topic):
        kind, text = "retry", f"retry #{msg.reconsume_times} stored in {msg.topic}"
    elif msg.topic == SCHEDULE_TOPIC:
        level = msg.properties.get(P.PROPERTY_DELAY_TIME_LEVEL, "?")
        kind, text = "scheduled", f"waiting in the delay schedule (level {level})"
    else:
        kind, text = "stored", f"stored in {msg.topic}"
    return {"t": msg.store_timestamp, "kind": kind, "text": text, "topic": msg.topic, "broker": msg.broker,
            "queue_id": msg.queue_id, "queue_offset": msg.queue_offset, "group": "", "client": "",
            "source": "store", "detail": {"offset_msg_id": msg.offset_msg_id}}


def describe(e: TraceEvent) -> str:
    """A recorded trace event in words."""
    d, who = e.detail, e.group or "a group"
    client = f" ({e.client})" if e.client else ""
    texts = {
        STORED: f"stored in {e.topic}",
        SCHEDULED: f"waiting in the delay schedule (level {d.get('delay_level', '?')})",
        TIMER_SCHEDULED: f"waiting in the timer until {d.get('deliver_ms', '?')}",
        PREPARED: "half message stored: transaction prepared",
        TRANSACTION_COMMITTED: "transaction committed",
        TRANSACTION_ROLLED_BACK: "transaction rolled back",
        DELIVERED: f"delivered to {who}{client}",
        CONSUMED: f"consumed by {who}",
        FAILED: f"{who} failed to consume it{client}; it will be retried",
        RETRY: f"retry #{d.get('retry_level', '?')} stored in {e.topic}",
        DEAD_LETTERED: f"dead-lettered by {who}: sent back too often",
        DLQ_STORED: f"stored in {e.topic}",
        REDRIVEN: f"re-driven from the dead-letter queue to {e.topic}",
        POPPED: f"popped by {who}{client}",
        ACKED: f"acknowledged by {who}{client}",
        INVISIBLE_CHANGED: f"invisible time changed by {who}{client}",
        CLIENT_PUB: f"sent by client{client or ' (RocketMQ trace)'}",
        CLIENT_SUB_BEFORE: f"handed to the listener of {who}{client}",
        CLIENT_SUB_AFTER: f"listener of {who}{client} returned "
                          f"{'success' if d.get('success', 'true') == 'true' else 'failure'}",
        CLIENT_END_TRANSACTION: f"client ended the transaction{client}",
    }
    return texts.get(e.kind, e.kind)


def _recorded_event(e: TraceEvent) -> dict[str, Any]:
    return {"t": e.ts, "kind": e.kind, "text": describe(e), "topic": e.topic, "broker": e.broker,
            "queue_id": e.queue_id, "queue_offset": e.queue_offset, "group": e.group, "client": e.client,
            "source": e.source, "detail": dict(e.detail)}


async def trace(admin: AsyncAdminClient, msg: MessageExt) -> dict[str, Any]:
    """The message's timeline as the brokers recorded it (every state change: stored,
    delivered, consumed, failed, retried, dead-lettered, re-driven, and RocketMQ clients' own
    trace data), born time first; and where each group consuming a topic it was stored in
    stands with it. A broker that records nothing gives its stored copies instead."""
    copies = (await admin.find_by_uniq_key(msg.msg_id) if is_uniq_id(msg.msg_id) else []) or [msg]
    tracks: list[dict[str, Any]] = []
    for copy in copies:
        try:
            tracks += [t.to_json() for t in await admin.message_tracks(copy)]
        except NoRouteError:
            continue  # an internal topic (the delay schedule) no group consumes
    try:
        recorded: MessageTrace | None = await admin.message_trace(msg.msg_id)
        trace_error = None
    except FerryMQError as exc:  # a broker that records no trace (Apache RocketMQ, older ferrymq)
        recorded, trace_error = None, str(exc)
    born = {"t": msg.born_timestamp, "kind": "sent", "text": f"sent by {msg.born_host or 'a producer'}",
            "topic": msg.topic, "source": "message"}
    events = [_recorded_event(e) for e in (recorded.events if recorded else ())] or [
        _copy_event(c) for c in copies]
    return {"msg_id": msg.msg_id, "events": [born, *events], "tracks": tracks, "copies": len(copies),
            "recorded": bool(recorded and recorded.events), "trace_error": trace_error,
            "trace_enable": dict(recorded.trace_enable) if recorded else {}}
