"""The streaming reader: `spark.readStream.format("ferrymq")`.

Where the methods run (measured, see the package docs): initialOffset, latestOffset,
partitions and commit in one long-lived driver-side Python process; read() in executors on
pickled copies. Spark's checkpoint holds the offsets and is the only source of truth for
resuming; the group offsets written to the broker are a report for lag tools.

Group offsets reach the broker three ways, because none covers every case alone:
- latestOffset(start) is called after the batch ending at `start` completed, so `start` is
  committed there (this covers the last batch of an AvailableNow query);
- commit(end), which Spark calls one batch late;
- the StreamingQueryListener installed by `ferrymq.spark.register`, which sees every
  completed batch's end offset, including the last batch of a stopped query."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)

from .admission import TriggerGate, split_limit
from .cluster import Cluster, check_loss
from .offsets import QueueKey, SourceOffset
from .options import ReaderOptions
from .planning import plan_partitions
from .read import read_partition

log = logging.getLogger("ferrymq.spark")


class FerryMQStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):  # type: ignore[misc]
    def __init__(
        self, options: ReaderOptions, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.options = options
        self._target: dict[QueueKey, int] | None = None  # AvailableNow: the end to reach
        self._committed: dict[QueueKey, int] | None = None
        n = options.min_offsets_per_trigger
        self._gate = TriggerGate(n, options.max_trigger_delay_ms, clock) if n else None

    # Executors get pickled copies; nothing in the state opens connections.
    @property
    def cluster(self) -> Cluster:
        return Cluster(self.options.namesrv)

    def _offset(self, queues: dict[QueueKey, int]) -> dict[str, Any]:
        return SourceOffset(queues, self.options.namesrv, self.options.group).to_json()

    def initialOffset(self) -> dict[str, Any]:
        keys = self.cluster.queues(self.options.topics)
        start = self.cluster.resolve(self.options.starting, keys, self.options.group)
        return self._offset(start)

    def getDefaultReadLimit(self) -> ReadLimit:
        n = self.options.max_offsets_per_trigger
        return ReadMaxRows(n) if n else ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        self._target = self._latest()

    def _latest(self) -> dict[QueueKey, int]:
        keys = self.cluster.queues(self.options.topics)
        return {k: high for k, (_low, high) in self.cluster.bounds(keys).items()}

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        begin = SourceOffset.from_json(start)
        self._commit(begin.queues)  # the batch that ended at `start` has completed
        latest = self._latest()
        if self._target is not None:
            # AvailableNow: nothing beyond what existed when the query started, and queues
            # created since then are left for the next run.
            latest = {k: min(v, self._target[k]) for k, v in latest.items() if k in self._target}
        starts = dict(begin.queues)
        new = [k for k in latest if k not in starts]
        if new:
            # Queues added to the topic start at their earliest offset.
            for key, (low, _high) in self.cluster.bounds(new).items():
                starts[key] = low
                log.info("new queue %s starts at offset %d", key, low)
        available = sum(max(v - starts[k], 0) for k, v in latest.items())
        # AvailableNow reads everything there is, as Kafka's source does: no trigger is skipped.
        if self._target is None and self._gate is not None and not self._gate.admit(available):
            return self._offset(dict(begin.queues))
        if isinstance(limit, ReadMaxRows):
            ends = split_limit({k: starts[k] for k in latest}, latest, limit.max_rows)
        else:
            ends = {k: max(v, starts[k]) for k, v in latest.items()}
        # Queues that vanished from the route keep their position, so nothing is re-read if
        # they come back.
        for key, value in begin.queues.items():
            ends.setdefault(key, value)
        return self._offset(ends)

    def reportLatestOffset(self) -> dict[str, Any] | None:
        return self._offset(self._latest())

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        begin = SourceOffset.from_json(start).queues
        finish = SourceOffset.from_json(end).queues
        moving = [k for k, v in finish.items() if v > begin.get(k, -1)]
        if not moving:
            return []
        bounds = self.cluster.bounds(moving)
        starts: dict[QueueKey, int] = {}
        for key in moving:
            low = bounds[key][0]
            # A queue absent from `start` was discovered by latestOffset: read it from its start.
            first = begin.get(key, low)
            starts[key] = min(
                check_loss(key, first, low, self.options.fail_on_data_loss), finish[key]
            )
        return plan_partitions(self.options, starts, {k: finish[k] for k in moving})

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return read_partition(partition)

    def commit(self, end: dict[str, Any]) -> None:
        self._commit(SourceOffset.from_json(end).queues)

    def _commit(self, queues: dict[QueueKey, int] | Any) -> None:
        group = self.options.group
        if group is None or not queues:
            return
        mine = {k: v for k, v in queues.items() if k.topic in self.options.topics}
        if mine == self._committed:
            return
        self.cluster.commit_group(group, mine)
        self._committed = mine

    def stop(self) -> None:
        log.debug("stream reader for %s stopped", ",".join(self.options.topics))
