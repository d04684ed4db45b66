"""The bounded reader: `spark.read.format("ferrymq")`, any topic (retry and DLQ topics
included) between starting and ending offsets or timestamps. The ranges are fixed when Spark
plans the read, so the result does not change while it runs."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import pyarrow as pa
from pyspark.sql.datasource import DataSourceReader, InputPartition

from .cluster import Cluster, check_loss
from .options import ReaderOptions
from .planning import plan_partitions
from .read import read_partition


class FerryMQBatchReader(DataSourceReader):  # type: ignore[misc]
    def __init__(self, options: ReaderOptions) -> None:
        self.options = options

    def partitions(self) -> Sequence[InputPartition]:
        cluster = Cluster(self.options.namesrv)
        keys = cluster.queues(self.options.topics)
        if not keys:
            return []
        start = cluster.resolve(self.options.starting, keys, self.options.group)
        end = cluster.resolve(self.options.ending, keys, self.options.group)
        bounds = cluster.bounds(keys)
        begin = {
            k: check_loss(k, start[k], bounds[k][0], self.options.fail_on_data_loss) for k in keys
        }
        return plan_partitions(self.options, begin, end)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return read_partition(partition)
