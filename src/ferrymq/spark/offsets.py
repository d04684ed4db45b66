"""Offsets per (topic, broker, queue) and their JSON forms.

The same nested shape serves the user's per-queue options and Spark's checkpoint:
`{"orders": {"broker-a": {"0": 42, "1": 17}}}`. In `startingOffsets` / `endingOffsets`,
-2 means the queue's earliest offset and -1 its latest (Kafka's convention); in
`startingOffsetsByTimestamp`, values are epoch milliseconds.

Spark's checkpoint stores what `SourceOffset.to_json()` returns: the queue offsets under
"queues" plus the name server and group, so a query listener that only sees the progress
event can commit the group's offsets without any shared state."""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from ..common.message import MessageQueue
from .errors import OffsetFormatError

EARLIEST = -2
LATEST = -1
MARKER = "ferrymq"  # key present in every offset document this source writes
VERSION = 1


@dataclass(frozen=True, slots=True, order=True)
class QueueKey:
    topic: str
    broker: str
    queue_id: int

    @property
    def mq(self) -> MessageQueue:
        return MessageQueue(self.topic, self.broker, self.queue_id)

    @classmethod
    def of(cls, mq: MessageQueue) -> QueueKey:
        return cls(mq.topic, mq.broker_name, mq.queue_id)

    def __str__(self) -> str:
        return f"{self.topic}@{self.broker}:{self.queue_id}"


def nest(values: Mapping[QueueKey, int]) -> dict[str, dict[str, dict[str, int]]]:
    out: dict[str, dict[str, dict[str, int]]] = {}
    for key in sorted(values):
        out.setdefault(key.topic, {}).setdefault(key.broker, {})[str(key.queue_id)] = int(
            values[key]
        )
    return out


def unnest(doc: Any, text: str = "") -> dict[QueueKey, int]:
    """The nested shape back to a flat map; raises OffsetFormatError on anything else."""
    if not isinstance(doc, dict):
        raise OffsetFormatError(text or str(doc), "expected {topic: {broker: {queue: offset}}}")
    out: dict[QueueKey, int] = {}
    for topic, brokers in doc.items():
        if not isinstance(brokers, dict):
            raise OffsetFormatError(text or str(doc), f"topic {topic!r} needs {{broker: ...}}")
        for broker, queues in brokers.items():
            if not isinstance(queues, dict):
                raise OffsetFormatError(text or str(doc), f"broker {broker!r} needs {{queue: n}}")
            for qid, value in queues.items():
                try:
                    key = QueueKey(str(topic), str(broker), int(qid))
                except ValueError as exc:
                    raise OffsetFormatError(text or str(doc), f"queue id {qid!r}") from exc
                if isinstance(value, bool) or not isinstance(value, int):
                    raise OffsetFormatError(text or str(doc), f"offset of {key} is not an integer")
                out[key] = value
    return out


def parse_queue_json(text: str) -> dict[QueueKey, int]:
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise OffsetFormatError(text, f"not JSON: {exc}") from exc
    return unnest(doc, text)


@dataclass(frozen=True)
class SourceOffset:
    """One position of the source: the next offset to read on every known queue."""

    queues: Mapping[QueueKey, int]
    namesrv: str = ""
    group: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            MARKER: VERSION,
            "namesrv": self.namesrv,
            "group": self.group,
            "queues": nest(self.queues),
        }

    @classmethod
    def from_json(cls, doc: Any) -> SourceOffset:
        if not isinstance(doc, dict) or doc.get(MARKER) != VERSION or "queues" not in doc:
            raise OffsetFormatError(json.dumps(doc), "not an offset written by this source")
        group = doc.get("group")
        return cls(
            unnest(doc["queues"]),
            str(doc.get("namesrv") or ""),
            str(group) if group else None,
        )

    def get(self, key: QueueKey, default: int | None = None) -> int | None:
        return self.queues.get(key, default)

    def __iter__(self) -> Iterator[QueueKey]:
        return iter(sorted(self.queues))

    def with_queues(self, queues: Mapping[QueueKey, int]) -> SourceOffset:
        return SourceOffset(dict(queues), self.namesrv, self.group)


def is_source_offset(doc: Any) -> bool:
    return isinstance(doc, dict) and doc.get(MARKER) == VERSION


def topics_of(keys: Iterable[QueueKey]) -> set[str]:
    return {k.topic for k in keys}
