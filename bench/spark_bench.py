"""Spark connector benchmark: rows/s through the `ferrymq` source of a real `ferrymq
standalone` broker into Spark's noop sink and into Parquet, for 100 B and 1 KiB messages
(4M of each; quick mode: 200k), local[2].

Steady state: the read is split into micro-batches (maxOffsetsPerTrigger = total / 8) and
the first micro-batch, which pays for Python worker start-up, is left out: rows of the
remaining batches over their trigger execution time, as Spark reports them.

Peer, in the same run and session: a toy in-memory source with the same schema, partitions,
batch sizes and Arrow record batches built once per task (Spark's ceiling for a Python data
source on this machine; the broker, the network and decoding are what we add to it).
`run(quick)` returns one row per measurement, median of 3 runs (1 in quick mode)."""

from __future__ import annotations

import contextlib
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import ferrymq.spark  # sets PYSPARK_PYTHON and friends before the session starts
from ferrymq import AdminClient, Message, Producer
from ferrymq.embedded import standalone as run_standalone

QUEUES = 8
TARGET = 1_000_000.0
PEER = "toy in-memory Arrow source (same schema and batches, same Spark)"
TOPIC = "spark-bench-{size}"


@dataclass(frozen=True)
class Sizes:
    messages: int
    runs: int


def sizes(quick: bool) -> Sizes:
    return Sizes(200_000, 1) if quick else Sizes(4_000_000, 3)


@contextlib.contextmanager
def standalone() -> Iterator[str]:
    store = Path(tempfile.mkdtemp(prefix="ferrymq-spark-bench-"))
    try:
        with run_standalone(store) as server:
            yield server.namesrv
    finally:
        shutil.rmtree(store, ignore_errors=True)


def produce(namesrv: str, topic: str, n: int, body_size: int) -> float:
    """Fill the topic with batched sends from 4 threads; returns messages/s (informational)."""
    with AdminClient(namesrv) as admin:
        admin.create_topic(topic, QUEUES)
    per_batch = max(1, min(512, (512 * 1024) // body_size))
    pad = b"x" * body_size
    started = time.perf_counter()
    with Producer("spark-bench", namesrv, compress_over=0) as producer:

        def send(lo: int) -> None:
            hi = min(lo + per_batch, n)
            producer.send_batch([Message(topic, pad) for _ in range(lo, hi)])

        with ThreadPoolExecutor(4) as pool:
            list(pool.map(send, range(0, n, per_batch)))
    return n / (time.perf_counter() - started)


def steady_rate(progress: list[dict[str, Any]]) -> float:
    batches = [p for p in progress if p.get("numInputRows")]
    steady = batches[1:] or batches
    rows = sum(p["numInputRows"] for p in steady)
    seconds = sum(p["durationMs"]["triggerExecution"] for p in steady) / 1000
    return rows / seconds if seconds else float("nan")


def run_query(spark: Any, df: Any, sink: str, workdir: Path) -> float:
    checkpoint = Path(tempfile.mkdtemp(prefix="cp-", dir=workdir))
    writer = df.writeStream.format(sink).option("checkpointLocation", str(checkpoint))
    if sink == "parquet":
        writer = writer.option("path", str(workdir / f"out-{checkpoint.name}"))
    query = writer.trigger(availableNow=True).start()
    query.awaitTermination()
    if query.exception() is not None:
        raise RuntimeError(str(query.exception()))
    rate = steady_rate(query.recentProgress)
    shutil.rmtree(checkpoint, ignore_errors=True)
    shutil.rmtree(workdir / f"out-{checkpoint.name}", ignore_errors=True)
    return rate


def toy_source(body_size: int, total: int) -> type:
    """A stream source that serves `total` rows from memory, shaped like ours."""
    import pyarrow as pa
    from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
    from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows

    from ferrymq.spark.schema import ARROW_SCHEMA, SPARK_SCHEMA

    rows_per_batch = 8192

    def template() -> pa.RecordBatch:
        n = rows_per_batch
        ts = pa.array([1_700_000_000_000_000] * n, pa.int64()).cast(ARROW_SCHEMA.field(9).type)
        props = pa.array(
            [[("UNIQ_KEY", f"{i:032X}"), ("WAIT", "true")] for i in range(n)],
            ARROW_SCHEMA.field(8).type,
        )
        cols = [
            pa.array(["bench"] * n),
            pa.array(["broker-a"] * n),
            pa.array([0] * n, pa.int32()),
            pa.array(range(n), pa.int64()),
            pa.array([f"{i:032X}" for i in range(n)]),
            pa.nulls(n, pa.string()),
            pa.nulls(n, pa.string()),
            pa.array([b"x" * body_size] * n, pa.binary()),
            props,
            ts,
            ts,
            pa.array([0] * n, pa.int32()),
        ]
        return pa.RecordBatch.from_arrays(cols, schema=ARROW_SCHEMA)

    class ToyReader(DataSourceStreamReader):  # type: ignore[misc]
        def initialOffset(self) -> dict[str, int]:
            return {"n": 0}

        def getDefaultReadLimit(self) -> Any:
            return ReadMaxRows(max(1, total // 8))

        def latestOffset(self, start: dict[str, int], limit: Any) -> dict[str, int]:
            if isinstance(limit, ReadAllAvailable):
                return {"n": total}
            return {"n": min(total, start["n"] + limit.max_rows)}

        def partitions(self, start: dict[str, int], end: dict[str, int]) -> list[InputPartition]:
            lo, hi = start["n"], end["n"]
            step = max(1, -(-(hi - lo) // QUEUES))
            return [InputPartition((a, min(a + step, hi))) for a in range(lo, hi, step)]

        def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
            lo, hi = partition.value
            tpl = template()
            for a in range(lo, hi, rows_per_batch):
                yield tpl.slice(0, min(rows_per_batch, hi - a))

    class ToySource(DataSource):  # type: ignore[misc]
        @classmethod
        def name(cls) -> str:
            return "ferrymq_bench_toy"

        def schema(self) -> Any:
            return SPARK_SCHEMA

        def streamReader(self, schema: Any) -> ToyReader:
            return ToyReader()

    return ToySource


def measure(quick: bool) -> tuple[dict[str, list[float]], dict[str, list[float]], dict[str, float]]:
    from pyspark import cloudpickle
    from pyspark.sql import SparkSession

    # The toy source is defined here; Spark's workers must get it by value, not by import.
    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    sz = sizes(quick)
    ours: dict[str, list[float]] = {}
    theirs: dict[str, list[float]] = {}
    produce_rates: dict[str, float] = {}
    workdir = Path(tempfile.mkdtemp(prefix="ferrymq-spark-bench-work-"))
    spark = (
        SparkSession.builder.master("local[2]")
        .appName("ferrymq-spark-bench")
        .config("spark.sql.shuffle.partitions", "2")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    ferrymq.spark.register(spark)
    try:
        with standalone() as namesrv:
            for body_size in (100, 1024):
                topic = TOPIC.format(size=body_size)
                produce_rates[str(body_size)] = produce(namesrv, topic, sz.messages, body_size)
                spark.dataSource.register(toy_source(body_size, sz.messages))
                label = "100 B" if body_size == 100 else "1 KiB"
                for sink in ("noop", "parquet"):
                    key = f"{sink} {label}"
                    for _ in range(sz.runs):
                        df = (
                            spark.readStream.format("ferrymq")
                            .option("namesrv", namesrv)
                            .option("topic", topic)
                            .option("startingOffsets", "earliest")
                            .option("maxOffsetsPerTrigger", str(max(1, sz.messages // 8)))
                            .load()
                        )
                        ours.setdefault(key, []).append(run_query(spark, df, sink, workdir))
                        toy = spark.readStream.format("ferrymq_bench_toy").load()
                        theirs.setdefault(key, []).append(run_query(spark, toy, sink, workdir))
    finally:
        spark.stop()
        shutil.rmtree(workdir, ignore_errors=True)
    return ours, theirs, produce_rates


def run(quick: bool) -> list[dict[str, Any]]:
    ours, theirs, produce_rates = measure(quick)
    rows: list[dict[str, Any]] = []
    for key in ours:
        sink, size = key.split(" ", 1)
        rows.append(
            {
                "area": "spark connector",
                "measurement": f"source -> {sink}, {size} messages (steady rows/s)",
                "value": statistics.median(ours[key]),
                "unit": "rows/s",
                "target": TARGET,
                "peer": statistics.median(theirs[key]),
                "runs": [round(v) for v in ours[key]],
                "peer_name": PEER,
                "peer_runs": [round(v) for v in theirs[key]],
                "messages": sizes(quick).messages,
                "produce_msgs_per_s": round(produce_rates["100" if size == "100 B" else "1024"]),
            }
        )
    return rows


def main(argv: list[str] | None = None) -> int:
    import json

    quick = "--quick" in (argv if argv is not None else sys.argv[1:])
    for row in run(quick):
        print(json.dumps(row))
    return 0


if __name__ == "__main__":
    threading.current_thread().name = "spark-bench"
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
