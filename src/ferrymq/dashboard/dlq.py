"""A group's dead-letter queue for the dashboard: what is pending and re-driving it, with the
same bookkeeping as `ferrymq dlq list|resend` (the tools group's offset and acknowledged
ranges on %DLQ%<group>), so the page and the command never re-drive a message twice."""

from __future__ import annotations

from typing import Any

from ..client.admin_async import AsyncAdminClient
from ..client.dlq import DlqEntry, QueueProgress, advance, redrive_message
from ..client.errors import NoRouteError
from ..client.producer_async import AsyncProducer
from ..client.results import PullStatus
from ..common.message import MessageQueue
from ..common.names import TOOLS_CONSUMER_GROUP, dlq_topic, retry_topic

DASHBOARD_PRODUCER_GROUP = "ferrymq-dashboard-dlq"


async def pending(
    admin: AsyncAdminClient, group: str, *, limit: int | None = None
) -> tuple[list[DlqEntry], dict[MessageQueue, QueueProgress]]:
    """DLQ messages not re-driven yet (at most `limit`), and the progress of each queue."""
    try:
        mqs = await admin.message_queues(dlq_topic(group))
    except NoRouteError:
        return [], {}
    entries: list[DlqEntry] = []
    progress: dict[MessageQueue, QueueProgress] = {}
    for mq in mqs:
        offset, acked = await admin.acknowledged(TOOLS_CONSUMER_GROUP, mq)
        if offset < 0:
            offset = await admin.min_offset(mq)
        progress[mq] = state = QueueProgress(offset, acked)
        end = await admin.max_offset(mq)
        while offset < end and (limit is None or len(entries) < limit):
            result = await admin.pull(mq, offset, 32)
            if result.status is PullStatus.FOUND:
                entries += [DlqEntry(mq, m) for m in result.messages if not state.handled(m.queue_offset)]
            if result.next_begin_offset <= offset:
                break
            offset = result.next_begin_offset
    return (entries if limit is None else entries[:limit]), progress


def entry_json(entry: DlqEntry) -> dict[str, Any]:
    out = entry.to_json()
    out.update(offset_msg_id=entry.msg.offset_msg_id, broker=entry.mq.broker_name,
               queue_id=entry.mq.queue_id, queue_offset=entry.msg.queue_offset,
               keys=entry.msg.keys, tags=entry.msg.tags)
    return out


async def resend(
    admin: AsyncAdminClient, producer: AsyncProducer, group: str, ids: set[str] | None
) -> dict[str, Any]:
    """Send the pending messages matching `ids` (every one when None) to the group's retry
    topic and record them as re-driven. Unknown ids are refused before anything is sent."""
    entries, states = await pending(admin, group)
    chosen = entries if ids is None else [e for e in entries if e.matches(ids)]
    if ids is not None:
        found = {i for e in chosen for i in (e.msg.msg_id, e.msg.offset_msg_id, e.original_msg_id)}
        missing = ids - found
        if missing:
            raise ValueError(f"not pending in {dlq_topic(group)}: {', '.join(sorted(missing))}")
    sent: list[dict[str, Any]] = []
    done: set[tuple[MessageQueue, int]] = set()
    for entry in chosen:
        result = await producer.send(redrive_message(group, entry))
        done.add((entry.mq, entry.msg.queue_offset))
        sent.append({"msg_id": entry.msg.msg_id, "original_msg_id": entry.original_msg_id,
                     "original_topic": entry.original_topic, "offset_msg_id": result.offset_msg_id})
    held_back = 0
    for mq, state in states.items():
        offsets = {off for q, off in done if q == mq}
        if not offsets:
            continue
        offset, ranges = advance(state, offsets)
        if not await admin.acknowledge(TOOLS_CONSUMER_GROUP, mq, offset, ranges):
            await admin.update_consumer_offset(TOOLS_CONSUMER_GROUP, mq, offset)
            held_back += sum(1 for off in offsets if off >= offset)
    return {"group": group, "retry_topic": retry_topic(group), "resent": sent, "held_back": held_back}
