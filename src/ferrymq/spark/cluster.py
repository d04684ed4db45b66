"""Driver side: which queues exist, where they start and end, and the group's offsets.

Calls go through the blocking AdminClient, created on first use (never in a constructor:
Spark pickles readers and runs constructors in planning workers)."""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping

from ..client.errors import NoRouteError
from .errors import DataLossError
from .offsets import EARLIEST, LATEST, QueueKey
from .options import Position, StartKind
from .read import admin_for, drop_admin

log = logging.getLogger("ferrymq.spark")


class Cluster:
    def __init__(self, namesrv: str) -> None:
        self.namesrv = namesrv

    def queues(self, topics: Iterable[str]) -> list[QueueKey]:
        """Readable queues of the topics; a topic that does not exist yet has none."""
        admin = admin_for(self.namesrv)
        out: list[QueueKey] = []
        for topic in topics:
            try:
                out.extend(QueueKey.of(mq) for mq in admin.message_queues(topic))
            except NoRouteError:
                log.info("topic %s has no route yet; it is read once it exists", topic)
        return sorted(out)

    def bounds(self, keys: Iterable[QueueKey]) -> dict[QueueKey, tuple[int, int]]:
        """(min, max) offset per queue: one topic-status request per topic, not per queue."""
        wanted = set(keys)
        admin = admin_for(self.namesrv)
        out: dict[QueueKey, tuple[int, int]] = {}
        try:
            for topic in sorted({k.topic for k in wanted}):
                for row in admin.topic_status(topic):
                    key = QueueKey(row.topic, row.broker, row.queue_id)
                    if key in wanted:
                        out[key] = (row.min_offset, row.max_offset)
        except Exception:
            drop_admin(self.namesrv)
            raise
        for key in wanted - out.keys():  # a queue the route has but the stats missed
            mq = key.mq
            out[key] = (admin.min_offset(mq), admin.max_offset(mq))
        return out

    def resolve(
        self, position: Position, keys: Iterable[QueueKey], group: str | None
    ) -> dict[QueueKey, int]:
        """Concrete offsets for a starting or ending position."""
        keys = sorted(set(keys))
        bounds = self.bounds(keys)
        admin = admin_for(self.namesrv)
        out: dict[QueueKey, int] = {}
        for key in keys:
            low, high = bounds[key]
            if position.kind is StartKind.EARLIEST:
                out[key] = low
            elif position.kind is StartKind.LATEST:
                out[key] = high
            elif position.kind is StartKind.GROUP:
                assert group is not None
                committed = admin.query_consumer_offset(group, key.mq)
                # Never committed: start at the beginning rather than skip what is stored.
                out[key] = low if committed < 0 else min(max(committed, low), high)
            elif position.kind is StartKind.OFFSETS:
                value = position.offsets.get(key, EARLIEST)
                out[key] = low if value == EARLIEST else high if value == LATEST else value
            else:
                ts = position.timestamps.get(key, position.timestamp)
                out[key] = low if ts is None else admin.search_offset(key.mq, ts)
        return out

    def commit_group(self, group: str, offsets: Mapping[QueueKey, int]) -> None:
        commit_group(self.namesrv, group, offsets)


def commit_group(namesrv: str, group: str, offsets: Mapping[QueueKey, int]) -> None:
    """Write the group's consumer offsets (the next offset to consume, as RocketMQ stores
    them). A failure is logged, not raised: Spark's checkpoint, not the broker, decides where
    the query resumes; the group offsets are for lag tools and other readers."""
    admin = admin_for(namesrv)
    try:
        for key in sorted(offsets):
            admin.update_consumer_offset(group, key.mq, offsets[key])
    except Exception as exc:
        drop_admin(namesrv)
        log.warning("committing offsets of group %s failed: %s", group, exc)


def check_loss(key: QueueKey, start: int, low: int, fail: bool) -> int:
    """The offset to read from when `start` may have been deleted by retention."""
    if start >= low:
        return start
    if fail:
        raise DataLossError(key.topic, key.broker, key.queue_id, start, low)
    log.warning(
        "data loss on %s: offsets %d..%d were removed by retention; continuing from %d"
        " (failOnDataLoss=false)", key, start, low - 1, low,
    )
    return low
