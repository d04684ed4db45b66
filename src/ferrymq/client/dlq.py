"""Re-driving a group's dead-letter queue: what is pending in %DLQ%<group>, a DLQ message as a
fresh retry of its group, and the bookkeeping that keeps anything from being re-driven twice.
`ferrymq dlq list|resend` and the dashboard's DLQ page both use it.

Progress of the re-drive is the tools group's offset on %DLQ%<group>, with the acknowledged
ranges above it (a ferrymq broker keeps them) for messages re-driven out of order."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..common import props as P
from ..common.message import Message, MessageExt, MessageQueue
from ..common.names import TOOLS_CONSUMER_GROUP, dlq_topic, retry_topic
from ..common.progress import Ranges, normalize_ranges
from .admin import AdminClient
from .errors import NoRouteError
from .message_json import preview
from .results import PullStatus

# Properties the broker sets on the way to the DLQ; a re-driven message starts clean.
_BROKER_PROPERTIES = frozenset(
    {
        P.PROPERTY_CLUSTER,
        P.PROPERTY_REAL_TOPIC,
        P.PROPERTY_REAL_QUEUE_ID,
        P.PROPERTY_DELAY_TIME_LEVEL,
        P.PROPERTY_CONSUME_START_TIMESTAMP,
        P.PROPERTY_MSG_REGION,
        P.PROPERTY_TRACE_SWITCH,
        P.PROPERTY_WAIT_STORE_MSG_OK,
        P.PROPERTY_MAX_RECONSUME_TIMES,
        P.PROPERTY_MIN_OFFSET,
        P.PROPERTY_MAX_OFFSET,
    }
)


@dataclass(slots=True)
class DlqEntry:
    mq: MessageQueue
    msg: MessageExt

    @property
    def original_msg_id(self) -> str:
        return self.msg.properties.get(P.PROPERTY_ORIGIN_MESSAGE_ID) or self.msg.msg_id

    @property
    def original_topic(self) -> str:
        return self.msg.properties.get(P.PROPERTY_RETRY_TOPIC, "")

    def matches(self, ids: set[str]) -> bool:
        return bool(ids & {self.msg.msg_id, self.msg.offset_msg_id, self.original_msg_id})

    def to_json(self) -> dict[str, Any]:
        return {
            "msg_id": self.msg.msg_id,
            "original_msg_id": self.original_msg_id,
            "original_topic": self.original_topic,
            "reconsume_times": self.msg.reconsume_times,
            "store_timestamp": self.msg.store_timestamp,
            "body_preview": preview(self.msg.body),
        }


@dataclass(slots=True)
class QueueProgress:
    """Where the re-drive stands on one DLQ queue: the tools offset (everything below it was
    handled) and the [start, end) ranges above it already re-driven."""

    offset: int
    acked: Ranges

    def handled(self, offset: int) -> bool:
        return offset < self.offset or any(a <= offset < b for a, b in self.acked)


def pending(admin: AdminClient, group: str) -> tuple[list[DlqEntry], dict[MessageQueue, QueueProgress]]:
    """DLQ messages not re-driven yet, and the progress of each DLQ queue."""
    try:
        mqs = admin.message_queues(dlq_topic(group))
    except NoRouteError:
        return [], {}
    entries: list[DlqEntry] = []
    progress: dict[MessageQueue, QueueProgress] = {}
    for mq in mqs:
        offset, acked = admin.acknowledged(TOOLS_CONSUMER_GROUP, mq)
        if offset < 0:
            offset = admin.min_offset(mq)
        progress[mq] = state = QueueProgress(offset, acked)
        end = admin.max_offset(mq)
        while offset < end:
            result = admin.pull(mq, offset, 32)
            if result.status is PullStatus.FOUND:
                entries += [
                    DlqEntry(mq, m) for m in result.messages if not state.handled(m.queue_offset)
                ]
            if result.next_begin_offset <= offset:
                break
            offset = result.next_begin_offset
    return entries, progress


def redrive_message(group: str, entry: DlqEntry) -> Message:
    """The DLQ message as a fresh retry of its group: original topic and id kept, reconsume
    count back to zero, no delay."""
    props = {k: v for k, v in entry.msg.properties.items() if k not in _BROKER_PROPERTIES}
    props[P.PROPERTY_RECONSUME_TIME] = "0"
    props.setdefault(P.PROPERTY_ORIGIN_MESSAGE_ID, entry.original_msg_id)
    return Message(retry_topic(group), entry.msg.body, properties=props, flag=entry.msg.flag)


def advance(state: QueueProgress, done: set[int]) -> tuple[int, Ranges]:
    """The new tools offset and the ranges above it once the offsets `done` are handled too:
    the offset moves over every handled run that starts at it."""
    ranges = normalize_ranges(state.acked + [(o, o + 1) for o in done], state.offset - 1)
    offset = state.offset
    while ranges and ranges[0][0] <= offset:
        offset = max(offset, ranges.pop(0)[1])
    return offset, ranges


def record_redriven(
    admin: AdminClient,
    progress: dict[MessageQueue, QueueProgress],
    done: set[tuple[MessageQueue, int]],
) -> int:
    """Store what was re-driven. Returns how many re-driven messages stay listed because the
    broker keeps no acknowledged ranges (Apache RocketMQ) and they lie beyond an unsent one."""
    held_back = 0
    for mq, state in progress.items():
        sent = {off for q, off in done if q == mq}
        if not sent:
            continue
        offset, ranges = advance(state, sent)
        if not admin.acknowledge(TOOLS_CONSUMER_GROUP, mq, offset, ranges):
            admin.update_consumer_offset(TOOLS_CONSUMER_GROUP, mq, offset)
            held_back += sum(1 for off in sent if off >= offset)
    return held_back
