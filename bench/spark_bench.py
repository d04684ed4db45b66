"""Spark connector benchmark: rows/s through the `ferrymq` source of a real `ferrymq
standalone` broker into Spark's noop sink and into Parquet, for 100 B and 1 KiB messages
(4M of each in micro-batches of 500k; quick mode: 300k in micro-batches of 75k), local[2].

Steady state: the read is split into micro-batches (maxOffsetsPerTrigger) and the first one,
which pays for Python worker start-up, is left out: rows of the remaining batches over their
trigger execution time, as Spark reports them. Every micro-batch also pays Spark's fixed
costs (planning, two checkpoint writes, task scheduling: a few hundred ms on two cores), so
the batches are large enough for per-row costs to dominate; with tens of thousands of rows
per trigger the figure measures Spark's per-trigger overhead instead. One unmeasured query of
each source runs first, so neither pays for the JVM's warm-up, and the two alternate which
goes first from run to run.

Both sources run PARTITIONS (2) Spark tasks per micro-batch: ours groups its 8 queues with
the `maxPartitions` option, as one would on a two-core machine.

Peer, in the same run and session: a toy in-memory source with the same schema, partitions,
micro-batches and Arrow record batches (8192 rows, built once per task with whole-array
constructors): Spark's ceiling for a Python data source on this machine; the broker, the
network and decoding are what we add to it. Each row also gives the CPU time per row of the
steady micro-batches by process, ours and the peer's: the JVM, the Python workers, the
broker. CPU time is what the two cores have to share, and it is less disturbed
by other work on the machine than the rates are. `run(quick)` returns one row per
measurement, median of 3 runs (1 in quick mode)."""

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
# Spark tasks per micro-batch, ours (maxPartitions) and the toy's: local[2] runs two at a time,
# and every task costs Spark a fixed amount of JVM and Python work (one per queue cost ours
# 10.3 CPU us per row against 7.9 with two, in micro-batches of 100k rows of 100 B).
PARTITIONS = 2
TARGET = 1_000_000.0
PEER = "toy in-memory Arrow source (same schema and batches, same Spark)"
TOPIC = "spark-bench-{size}"
WARMUP_TOPIC = "spark-bench-warmup"


@dataclass(frozen=True)
class Sizes:
    messages: int
    runs: int
    per_trigger: int
    # Rows each source reads before the measured runs: the JVM compiles its Arrow-to-row code
    # over the first few million rows (CPU per row of the first 4M-row query of a fresh JVM
    # 1.4-1.6 us, of later ones 0.9-1.0), and 100k rows left most of that to the first
    # measured query, one source's. The two sources share that code, so each reads 4M here.
    warmup: int


def sizes(quick: bool) -> Sizes:
    return Sizes(300_000, 1, 75_000, 100_000) if quick else Sizes(4_000_000, 3, 500_000, 4_000_000)


_TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def _kind(cmd: str) -> str:
    if "standalone" in cmd:
        return "broker"
    if "java" in cmd:
        return "jvm"
    return "python" if "pyspark" in cmd else "other"


class CpuMeter:
    """CPU seconds (user + system) of this process's descendants by kind: the Spark JVM,
    Spark's Python processes (workers, planners), the broker. Read from /proc (Linux; empty
    elsewhere) each time `sample` is called; a process keeps the last figure seen, so one that
    exits between samples (Spark starts and stops Python planners per query) still counts."""

    def __init__(self) -> None:
        self.seen: dict[int, tuple[str, float]] = {}

    def sample(self) -> dict[int, tuple[str, float]]:
        parents: dict[int, list[int]] = {}
        stats: dict[int, tuple[str, float]] = {}
        for name in os.listdir("/proc") if os.path.isdir("/proc") else []:
            if not name.isdigit():
                continue
            try:
                stat = Path(f"/proc/{name}/stat").read_text()
                cmd = Path(f"/proc/{name}/cmdline").read_bytes().replace(b"\0", b" ").decode()
            except OSError:  # exited meanwhile
                continue
            fields = stat[stat.rfind(")") + 2 :].split()
            parents.setdefault(int(fields[1]), []).append(int(name))
            stats[int(name)] = (_kind(cmd), (int(fields[11]) + int(fields[12])) / _TICK)
        todo = list(parents.get(os.getpid(), []))
        while todo:
            pid = todo.pop()
            todo.extend(parents.get(pid, []))
            if pid in stats:
                self.seen[pid] = stats[pid]
        return dict(self.seen)

    def since(self, base: dict[int, tuple[str, float]]) -> dict[str, float]:
        out: dict[str, float] = {}
        for pid, (kind, seconds) in self.sample().items():
            out[kind] = out.get(kind, 0.0) + seconds - base.get(pid, (kind, 0.0))[1]
        return out


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


@dataclass(frozen=True)
class Run:
    rate: float  # steady rows/s
    cpu_us_per_row: dict[str, float]  # steady micro-batches, by process kind


def run_query(spark: Any, df: Any, sink: str, workdir: Path) -> Run:
    checkpoint = Path(tempfile.mkdtemp(prefix="cp-", dir=workdir))
    writer = df.writeStream.format(sink).option("checkpointLocation", str(checkpoint))
    if sink == "parquet":
        writer = writer.option("path", str(workdir / f"out-{checkpoint.name}"))
    meter = CpuMeter()
    query = writer.trigger(availableNow=True).start()
    # CPU from the end of the first micro-batch (worker start-up) to the end; polled, so the
    # start is late by at most the polling interval.
    first: dict[int, tuple[str, float]] | None = None
    polls = 0
    while not query.awaitTermination(0.02):
        polls += 1
        if first is None and query.lastProgress is not None:
            first = meter.sample()
        elif first is not None and polls % 10 == 0:
            meter.sample()
    if query.exception() is not None:
        raise RuntimeError(str(query.exception()))
    used = meter.since(first) if first is not None else {}
    progress = [p for p in query.recentProgress if p.get("numInputRows")]
    rows = sum(p["numInputRows"] for p in progress[1:])
    cpu = {k: round(v / rows * 1e6, 2) for k, v in sorted(used.items()) if rows and k != "other"}
    rate = steady_rate(query.recentProgress)
    shutil.rmtree(checkpoint, ignore_errors=True)
    shutil.rmtree(workdir / f"out-{checkpoint.name}", ignore_errors=True)
    return Run(rate, cpu)


def toy_source(body_size: int, total: int, per_trigger: int) -> type:
    """A stream source that serves `total` rows from memory, shaped like ours."""
    import pyarrow as pa
    from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
    from pyspark.sql.streaming.datasource import (
        ReadAllAvailable,
        ReadMaxRows,
        SupportsTriggerAvailableNow,
    )

    from ferrymq.spark.schema import ARROW_SCHEMA, SPARK_SCHEMA

    rows_per_batch = 8192

    def template() -> pa.RecordBatch:
        # Built with whole-array constructors (a few ms), not per-row Python: the peer is
        # Spark's cost, not the cost of making its input. Properties as ferrymq's producers
        # write them (UNIQ_KEY, CLUSTER).
        n = rows_per_batch
        ts = pa.repeat(pa.scalar(1_700_000_000_000_000, pa.int64()), n).cast(
            ARROW_SCHEMA.field(9).type
        )
        ids = pa.array([f"{i:032X}" for i in range(n)], pa.string())
        keys = pa.repeat(pa.scalar("UNIQ_KEY"), 2 * n)
        keys = pa.concat_arrays([keys.slice(0, n), pa.repeat(pa.scalar("CLUSTER"), n)])
        order = pa.array([i + j * n for i in range(n) for j in (0, 1)], pa.int32())
        items = pa.concat_arrays([ids, pa.repeat(pa.scalar("DefaultCluster"), n)])
        props = pa.MapArray.from_arrays(
            pa.array(range(0, 2 * n + 1, 2), pa.int32()),
            keys.take(order),
            items.take(order),
            type=ARROW_SCHEMA.field(8).type,
        )
        cols = [
            pa.repeat(pa.scalar("bench"), n),
            pa.repeat(pa.scalar("broker-a"), n),
            pa.repeat(pa.scalar(0, pa.int32()), n),
            pa.array(range(n), pa.int64()),
            ids,
            pa.nulls(n, pa.string()),
            pa.nulls(n, pa.string()),
            pa.repeat(pa.scalar(b"x" * body_size, pa.binary()), n),
            props,
            ts,
            ts,
            pa.repeat(pa.scalar(0, pa.int32()), n),
        ]
        return pa.RecordBatch.from_arrays(cols, schema=ARROW_SCHEMA)

    # SupportsTriggerAvailableNow as ours: without it Spark reads everything available in one
    # micro-batch under Trigger.AvailableNow, ignoring the read limit.
    class ToyReader(DataSourceStreamReader, SupportsTriggerAvailableNow):  # type: ignore[misc]
        def prepareForTriggerAvailableNow(self) -> None:
            pass

        def initialOffset(self) -> dict[str, int]:
            return {"n": 0}

        def getDefaultReadLimit(self) -> Any:
            return ReadMaxRows(per_trigger)

        def latestOffset(self, start: dict[str, int], limit: Any) -> dict[str, int]:
            if isinstance(limit, ReadAllAvailable):
                return {"n": total}
            return {"n": min(total, start["n"] + limit.max_rows)}

        def partitions(self, start: dict[str, int], end: dict[str, int]) -> list[InputPartition]:
            lo, hi = start["n"], end["n"]
            step = max(1, -(-(hi - lo) // PARTITIONS))
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


def open_source(spark: Any, which: str, namesrv: str, topic: str, per_trigger: int) -> Any:
    if which == "toy":
        return spark.readStream.format("ferrymq_bench_toy").load()
    return (
        spark.readStream.format("ferrymq")
        .option("namesrv", namesrv)
        .option("topic", topic)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", str(per_trigger))
        .option("maxPartitions", str(PARTITIONS))
        .load()
    )


SinkFigures = tuple[dict[str, list["Run"]], list[float]]


def measure(
    quick: bool, *, source: bool = True,
) -> tuple[dict[str, list[Run]], dict[str, list[Run]], dict[str, float], SinkFigures]:
    from pyspark import cloudpickle
    from pyspark.sql import SparkSession

    # The toy source is defined here; Spark's workers must get it by value, not by import.
    cloudpickle.register_pickle_by_value(sys.modules[__name__])  # type: ignore[no-untyped-call]
    sz = sizes(quick)
    ours: dict[str, list[Run]] = {}
    theirs: dict[str, list[Run]] = {}
    produce_rates: dict[str, float] = {}
    sink_runs: dict[str, list[Run]] = {}
    sink_puts: list[float] = []
    workdir = Path(tempfile.mkdtemp(prefix="ferrymq-spark-bench-work-"))
    spark = (
        SparkSession.builder.master("local[2]")
        .appName("ferrymq-spark-bench")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.ui.showConsoleProgress", "false")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    ferrymq.spark.register(spark)
    try:
        with standalone() as namesrv:
            sink_runs, sink_puts = measure_sink(spark, namesrv, quick)
            if not source:
                return ours, theirs, produce_rates, (sink_runs, sink_puts)
            # Warm-up on a topic of its own: the JVM's JIT and both sources' Python workers.
            produce(namesrv, WARMUP_TOPIC, sz.warmup, 100)
            spark.dataSource.register(toy_source(100, sz.warmup, sz.warmup // 4))
            for which in ("ours", "toy"):
                df = open_source(spark, which, namesrv, WARMUP_TOPIC, sz.warmup // 4)
                run_query(spark, df, "noop", workdir)
            for body_size in (100, 1024):
                topic = TOPIC.format(size=body_size)
                produce_rates[str(body_size)] = produce(namesrv, topic, sz.messages, body_size)
                spark.dataSource.register(toy_source(body_size, sz.messages, sz.per_trigger))
                label = "100 B" if body_size == 100 else "1 KiB"
                for sink in ("noop", "parquet"):
                    key = f"{sink} {label}"
                    for i in range(sz.runs):
                        for which in ("ours", "toy") if i % 2 == 0 else ("toy", "ours"):
                            df = open_source(spark, which, namesrv, topic, sz.per_trigger)
                            result = run_query(spark, df, sink, workdir)
                            (ours if which == "ours" else theirs).setdefault(key, []).append(
                                result
                            )
    finally:
        spark.stop()
        shutil.rmtree(workdir, ignore_errors=True)
    return ours, theirs, produce_rates, (sink_runs, sink_puts)


# --- the sink ------------------------------------------------------------------------------------
SINK_TARGET = 300_000.0  # rows/s at-least-once; exactly-once's target is 0.7x at-least-once's
SINK_TOPIC = "spark-bench-sink"
GUARANTEES = ("at-least-once", "exactly-once")


def sink_rows(quick: bool) -> int:
    return 100_000 if quick else 500_000


def sink_frame(spark: Any, rows: int) -> Any:
    """`rows` rows of a 100 B body in PARTITIONS partitions, made by the JVM (no Python input)."""
    return spark.range(rows, numPartitions=PARTITIONS).selectExpr(
        "lpad(cast(id as string), 100, 'x') as body"
    )


NULL_SINK = "ferrymq_bench_null"


def null_sink() -> type:
    """A Python data source whose writer reads every Arrow batch and keeps nothing: what Spark
    itself costs a Python sink per row here (the JVM's Arrow export, the worker's import), the
    ceiling every Python sink shares on this machine."""
    from pyspark.sql.datasource import DataSource, DataSourceArrowWriter, WriterCommitMessage

    class NullWriter(DataSourceArrowWriter):  # type: ignore[misc]
        def write(self, iterator: Iterator[Any]) -> WriterCommitMessage:
            rows = 0
            for batch in iterator:
                rows += batch.num_rows
            return WriterCommitMessage()

    class NullSink(DataSource):  # type: ignore[misc]
        @classmethod
        def name(cls) -> str:
            return NULL_SINK

        def writer(self, schema: Any, overwrite: bool) -> NullWriter:
            return NullWriter()

    return NullSink


def write_rate(df: Any, namesrv: str, guarantee: str, rows: int) -> Run:
    """Rows/s of one batch write (`df.write`), wall time of the whole job: tasks and commit;
    with the CPU it took per row, by process kind (the broker's is what bounds the sink).
    `guarantee` "null": the same write into null_sink()."""
    meter = CpuMeter()
    base = meter.sample()
    started = time.perf_counter()
    if guarantee == "null":
        df.write.format(NULL_SINK).mode("append").save()
    else:
        (df.write.format("ferrymq").option("namesrv", namesrv).option("topic", SINK_TOPIC)
           .option("guarantee", guarantee).mode("append").save())
    elapsed = time.perf_counter() - started
    used = meter.since(base)
    return Run(rows / elapsed, {k: round(v / rows * 1e6, 2) for k, v in sorted(used.items())
                                if k != "other"})


def measure_sink(spark: Any, namesrv: str, quick: bool) -> tuple[dict[str, list[Run]], list[float]]:
    """Both guarantees on the same broker and session; a small write of each first (Python
    workers and their producers start, the JVM compiles), then runs alternating which goes
    first. Medians of 3 (1 in quick mode). Each round also measures the broker's put rate for
    100 B messages (produce(): four threads of batched sends), the ceiling the sink shares."""
    with AdminClient(namesrv) as admin:
        admin.create_topic(SINK_TOPIC, QUEUES)
    spark.dataSource.register(null_sink())
    kinds = (*GUARANTEES, "null")
    for guarantee in kinds:
        write_rate(sink_frame(spark, 20_000), namesrv, guarantee, 20_000)
    rows = sink_rows(quick)
    df = sink_frame(spark, rows)
    runs: dict[str, list[Run]] = {g: [] for g in kinds}
    puts: list[float] = []
    for i in range(sizes(quick).runs):
        for guarantee in kinds if i % 2 == 0 else kinds[::-1]:
            runs[guarantee].append(write_rate(df, namesrv, guarantee, rows))
        puts.append(produce(namesrv, f"{SINK_TOPIC}-put", rows, 100))
    return runs, puts


def sink_results(runs: dict[str, list[Run]], puts: list[float], quick: bool) -> list[dict[str, Any]]:
    plain = statistics.median(r.rate for r in runs["at-least-once"])
    out = []
    for guarantee in GUARANTEES:
        value = statistics.median(r.rate for r in runs[guarantee])
        out.append({
            "area": "spark connector",
            "measurement": f"sink {guarantee}, 100 B rows, batch write (rows/s)",
            "value": value,
            "unit": "rows/s",
            "target": SINK_TARGET if guarantee == "at-least-once" else round(0.7 * plain),
            "runs": [round(r.rate) for r in runs[guarantee]],
            "ratio_to_at_least_once": round(value / plain, 2),
            "rows": sink_rows(quick),
            "cpu_us_per_row": median_cpu(runs[guarantee]),
            "broker_put_msgs_per_s": round(statistics.median(puts)),
            "broker_put_runs": [round(p) for p in puts],
            "peer_name": "the same write into a Python sink that keeps nothing (Spark's own cost)",
            "peer": statistics.median(r.rate for r in runs["null"]),
            "peer_runs": [round(r.rate) for r in runs["null"]],
            "peer_cpu_us_per_row": median_cpu(runs["null"]),
        })
    return out


def median_cpu(runs: list[Run]) -> dict[str, float]:
    kinds = sorted({k for r in runs for k in r.cpu_us_per_row})
    return {k: round(statistics.median(r.cpu_us_per_row.get(k, 0.0) for r in runs), 2)
            for k in kinds}


def run(quick: bool, *, source: bool = True) -> list[dict[str, Any]]:
    ours, theirs, produce_rates, (sink_runs, sink_puts) = measure(quick, source=source)
    rows: list[dict[str, Any]] = sink_results(sink_runs, sink_puts, quick)
    for key in ours:
        sink, size = key.split(" ", 1)
        rows.append(
            {
                "area": "spark connector",
                "measurement": f"source -> {sink}, {size} messages (steady rows/s)",
                "value": statistics.median(r.rate for r in ours[key]),
                "unit": "rows/s",
                "target": TARGET,
                "peer": statistics.median(r.rate for r in theirs[key]),
                "runs": [round(r.rate) for r in ours[key]],
                "peer_name": PEER,
                "peer_runs": [round(r.rate) for r in theirs[key]],
                "cpu_us_per_row": median_cpu(ours[key]),
                "peer_cpu_us_per_row": median_cpu(theirs[key]),
                "messages": sizes(quick).messages,
                "rows_per_trigger": sizes(quick).per_trigger,
                "produce_msgs_per_s": round(produce_rates["100" if size == "100 B" else "1024"]),
            }
        )
    return rows


def main(argv: list[str] | None = None) -> int:
    import json

    args = argv if argv is not None else sys.argv[1:]
    # --sink-only: the sink's two rows alone (a few minutes less than the whole bench).
    for row in run("--quick" in args, source="--sink-only" not in args):
        print(json.dumps(row))
    return 0


if __name__ == "__main__":
    threading.current_thread().name = "spark-bench"
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
