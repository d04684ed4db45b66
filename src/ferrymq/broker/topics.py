"""Topic configuration (config/topics.json, RocketMQ's TopicConfigManager format)."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..common import topic_types
from ..common.errors import FerryMQError
from ..common.headers import PERM_INHERIT, PERM_READ, PERM_WRITE
from ..common.names import (
    AUTO_CREATE_TOPIC_KEY_TOPIC,
    SCHEDULE_TOPIC,
    SELF_TEST_TOPIC,
    TIMER_TOPIC,
    is_dlq_topic,
    is_retry_topic,
    validate_topic,
)
from ..store import read_json_file
from . import topic_journal
from .topic_journal import JournaledTable


@dataclass(slots=True)
class TopicConfig:
    topic_name: str
    read_queue_nums: int = 4
    write_queue_nums: int = 4
    perm: int = PERM_READ | PERM_WRITE
    topic_sys_flag: int = 0
    order: bool = False
    # RocketMQ's topic attributes, stored without their +/- sign (message.type).
    attributes: dict[str, str] = field(default_factory=dict)

    @property
    def message_type(self) -> str:
        """The message type the topic accepts (common/topic_types.py)."""
        return topic_types.topic_type(self.attributes, self.order)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "order": self.order,
            "perm": self.perm,
            "readQueueNums": self.read_queue_nums,
            "topicFilterType": "SINGLE_TAG",
            "topicName": self.topic_name,
            "topicSysFlag": self.topic_sys_flag,
            "writeQueueNums": self.write_queue_nums,
        }
        if self.attributes:
            out["attributes"] = dict(self.attributes)
        return out

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> TopicConfig:
        return cls(
            topic_name=str(data["topicName"]),
            read_queue_nums=int(data.get("readQueueNums", 4)),
            write_queue_nums=int(data.get("writeQueueNums", 4)),
            perm=int(data.get("perm", PERM_READ | PERM_WRITE)),
            topic_sys_flag=int(data.get("topicSysFlag", 0)),
            order=bool(data.get("order", False)),
            attributes={str(k): str(v) for k, v in (data.get("attributes") or {}).items()},
        )


@dataclass(frozen=True, slots=True)
class StrandedQueue:
    """A read queue a change would remove, and how many of its messages some group of the
    topic has not consumed yet."""

    queue_id: int
    messages: int


class ReadShrinkRefused(FerryMQError):
    """Lowering the topic's read queues would leave unconsumed messages where no consumer
    reads any more; refused unless forced."""

    def __init__(self, topic: str, read_queue_nums: int, new_read_queue_nums: int,
                 stranded: tuple[StrandedQueue, ...]) -> None:
        self.topic = topic
        self.read_queue_nums = read_queue_nums
        self.new_read_queue_nums = new_read_queue_nums
        self.stranded = stranded
        total = sum(s.messages for s in stranded)
        where = ", ".join(f"queue {s.queue_id}: {s.messages}" for s in stranded)
        super().__init__(
            f"lowering topic {topic}'s read queues from {read_queue_nums} to {new_read_queue_nums} "
            f"would strand {total} unconsumed message(s) ({where}). Lower the write queues first, "
            f"let every group consume queues {new_read_queue_nums}-{read_queue_nums - 1}, then "
            f"lower the read queues; or force it")


def check_read_shrink(topic: str, old_read: int, new_read: int,
                      bounds: Callable[[int], tuple[int, int]],
                      committed: Callable[[int], Iterable[int]]) -> None:
    """Raise ReadShrinkRefused when queues new_read..old_read-1 hold messages some group has
    not consumed: above the least advanced group's committed offset (bounds(q) = the queue's
    (min, max) offset; committed(q) = each group's committed offset on it, -1 where it has
    none). With no group at all every message counts: a group starting later from the first
    offset would not see them either."""
    stranded = []
    for q in range(new_read, old_read):
        low, high = bounds(q)
        if high <= low:
            continue
        start = min((max(o, low) for o in committed(q)), default=low)
        if high > start:
            stranded.append(StrandedQueue(q, high - start))
    if stranded:
        raise ReadShrinkRefused(topic, old_read, new_read, tuple(stranded))


@dataclass(frozen=True, slots=True)
class TopicChanges:
    """The topic table's changes up to `data_version`: changed topics' configs (JSON) and
    the names of deleted topics."""

    data_version: dict[str, int]
    changed: dict[str, Any]
    deleted: list[str]


class TopicManager(JournaledTable):
    def __init__(self, config_dir: Path, *, default_queue_nums: int = 8,
                 on_change: Callable[[], None] | None = None) -> None:
        # Changes are staged for the journal only while on_dirty is set.
        super().__init__(config_dir / "topics.json", config_dir / topic_journal.JOURNAL_NAME)
        self.topics: dict[str, TopicConfig] = {}
        self.default_queue_nums = default_queue_nums
        # Topic -> the version that last changed it (deleted ones too), oldest first: what
        # changed since a version is read from the end, in time proportional to the changes.
        self._touched: OrderedDict[str, int] = OrderedDict()
        self.on_change = on_change
        # When set, a change calls this instead of writing topics.json here (the broker writes
        # coalesced snapshots in a worker thread); without it each change is written at once.
        self.on_dirty: Callable[[], None] | None = None

    def load(self) -> None:
        data = read_json_file(self._path, None)
        if isinstance(data, dict):
            for name, cfg in (data.get("topicConfigTable") or {}).items():
                self.topics[str(name)] = TopicConfig.from_json(cfg)
            self._load_version(data)
        self._replay(self._apply)
        # The system topics always exist. TBW102 inherits into auto-created topics.
        self.topics.setdefault(
            AUTO_CREATE_TOPIC_KEY_TOPIC,
            TopicConfig(AUTO_CREATE_TOPIC_KEY_TOPIC, self.default_queue_nums,
                        self.default_queue_nums, PERM_READ | PERM_WRITE | PERM_INHERIT),
        )
        self.topics.setdefault(SCHEDULE_TOPIC, TopicConfig(SCHEDULE_TOPIC, 18, 18, PERM_READ | PERM_WRITE))
        self.topics.setdefault(TIMER_TOPIC, TopicConfig(TIMER_TOPIC, 1, 1, PERM_READ | PERM_WRITE))
        # RocketMQ's TopicConfigManager makes it too: what `cluster send-rt` probes each broker with.
        self.topics.setdefault(SELF_TEST_TOPIC, TopicConfig(SELF_TEST_TOPIC, 1, 1, PERM_READ | PERM_WRITE))

    def _apply(self, name: str, config: dict[str, Any] | None) -> None:
        if config is None:
            self.topics.pop(name, None)
        else:
            self.topics[name] = TopicConfig.from_json(config)

    def _changed(self, *names: str) -> None:
        version, stamp = self._bump()
        for name in names:
            self._touched[name] = version
            self._touched.move_to_end(name)
        if self.on_dirty is not None:
            for name in names:
                cfg = self.topics.get(name)
                self.stage(version, stamp, name, None if cfg is None else cfg.to_json())
            self.on_dirty()
        else:
            self.persist()
        if self.on_change is not None:
            self.on_change()

    def get(self, topic: str) -> TopicConfig | None:
        return self.topics.get(topic)

    def upsert(self, cfg: TopicConfig) -> TopicConfig:
        validate_topic(cfg.topic_name)
        with self._lock:
            self.topics[cfg.topic_name] = cfg
            self._changed(cfg.topic_name)
        return cfg

    def delete(self, topic: str) -> bool:
        with self._lock:
            if self.topics.pop(topic, None) is None:
                return False
            self._changed(topic)
            return True

    def adopt(self, table: dict[str, Any]) -> int:
        """Make this table the master's (a slave's copy); returns how many topics changed."""
        wanted = {str(name): TopicConfig.from_json(cfg) for name, cfg in table.items()}
        changed: list[str] = []
        with self._lock:
            for name in [n for n in self.topics if n not in wanted]:
                del self.topics[name]
                changed.append(name)
            for name, cfg in wanted.items():
                if self.topics.get(name) != cfg:
                    self.topics[name] = cfg
                    changed.append(name)
            if changed:
                self._changed(*changed)
        return len(changed)

    def create_in_send(self, topic: str, default_topic: str, requested_queue_nums: int) -> TopicConfig | None:
        """Auto-create `topic` from `default_topic` (TBW102) when that topic allows inheriting."""
        with self._lock:
            existing = self.topics.get(topic)
            if existing is not None:
                return existing
            base = self.topics.get(default_topic)
            if base is None or not base.perm & PERM_INHERIT:
                return None
            nums = max(1, min(requested_queue_nums or self.default_queue_nums, base.write_queue_nums))
            cfg = TopicConfig(topic, nums, nums, base.perm & ~PERM_INHERIT)
            self.topics[topic] = cfg
            self._changed(topic)
            return cfg

    def create_group_topic(self, topic: str, queue_nums: int = 1, perm: int = PERM_READ | PERM_WRITE) -> TopicConfig:
        """Retry and DLQ topics: created on first use with one queue, as RocketMQ does."""
        with self._lock:
            existing = self.topics.get(topic)
            if existing is not None:
                return existing
            cfg = TopicConfig(topic, queue_nums, queue_nums, perm)
            self.topics[topic] = cfg
            self._changed(topic)
            return cfg

    def wrapper_json(self) -> dict[str, Any]:
        with self._lock:
            return {
                "dataVersion": dict(self.data_version),
                "topicConfigTable": {n: t.to_json() for n, t in sorted(self.topics.items())},
            }

    def changes_since(self, counter: int) -> TopicChanges:
        """What changed after version `counter` (for an incremental registration): the
        current configs of the topics changed since, the names of those deleted since."""
        with self._lock:
            changed: dict[str, Any] = {}
            deleted: list[str] = []
            for name in reversed(self._touched):
                if self._touched[name] <= counter:
                    break
                cfg = self.topics.get(name)
                if cfg is None:
                    deleted.append(name)
                else:
                    changed[name] = cfg.to_json()
            return TopicChanges(dict(self.data_version), changed, sorted(deleted))

    @staticmethod
    def is_group_topic(topic: str) -> bool:
        return is_retry_topic(topic) or is_dlq_topic(topic)
