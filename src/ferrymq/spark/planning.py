"""Turning (start, end) offsets into Spark partitions: one per queue with something to read,
split further when `maxRowsPerPartition` is set (more parallelism on few queues)."""

from __future__ import annotations

from collections.abc import Mapping

from .offsets import QueueKey
from .options import ReaderOptions
from .read import QueueRange


def plan_ranges(
    options: ReaderOptions, start: Mapping[QueueKey, int], end: Mapping[QueueKey, int]
) -> list[QueueRange]:
    ranges: list[QueueRange] = []
    step = options.max_rows_per_partition
    for key in sorted(end):
        lo, hi = start[key], end[key]
        if hi <= lo:
            continue
        cuts = range(lo, hi, step) if step else range(lo, lo + 1)
        for a in cuts:
            b = min(a + step, hi) if step else hi
            ranges.append(
                QueueRange(
                    namesrv=options.namesrv,
                    key=key,
                    start=a,
                    end=b,
                    fail_on_data_loss=options.fail_on_data_loss,
                    pull_batch_size=options.pull_batch_size,
                    rows_per_batch=options.rows_per_batch,
                    expression=options.sub_expression,
                    tags=options.tags,
                    expression_type=options.expression_type,
                )
            )
    return ranges
