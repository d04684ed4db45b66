"""The demo's write-back stage: reads `orders`, enriches each order (its revenue, and whether it
parsed) and writes it to `orders-enriched` through the ferrymq sink with
`guarantee=exactly-once`, keyed as the order was (`order-<id>`).

The demo runs the query's first attempt as a child process (`python -m
examples.pipeline.enrich_job NAMESRV CHECKPOINT PER_TRIGGER`) with the sink's fault hook
set, so its driver is SIGKILLed right after it committed micro-batch 0 and before Spark
recorded that in its checkpoint: the case where an at-least-once sink writes the batch twice.
The demo then restarts the query from the checkpoint in its own Spark session, as soon as the
first attempt is dead (EnrichStage: beside the main pipeline, not after it)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

import ferrymq.spark
from ferrymq import ConsumeFromWhere, ConsumeStatus, MessageExt, PushConsumer
from ferrymq.spark.exactly_once import FAULT_ENV

from .spark_job import ORDER_SCHEMA, SOURCE_TOPIC

ENRICHED_TOPIC = "orders-enriched"
# Where the first attempt dies: after the commit of batch 0, before Spark's commit log.
KILL_POINT = "after-commit:0"
# The demo's JVMs live for a few small micro-batches: C2's compilations never pay back there.
# With the client compiler alone (one thread) and the serial collector, the first attempt's
# JVM took 21 s of CPU instead of 44, CPU the two Spark sessions compete for on two cores.
SHORT_JVM = "-XX:TieredStopAtLevel=1 -XX:CICompilerCount=1 -XX:+UseSerialGC"


def short_lived_jvm() -> dict[str, str]:
    """The environment that gives a Spark JVM started from it SHORT_JVM (JAVA_TOOL_OPTIONS:
    PySpark starts its JVM as a child process, which reads it)."""
    given = os.environ.get("JAVA_TOOL_OPTIONS", "")
    return {"JAVA_TOOL_OPTIONS": given if SHORT_JVM in given else f"{given} {SHORT_JVM}".strip()}


def start(spark: SparkSession, namesrv: str, checkpoint: str, max_per_trigger: int) -> Any:
    orders = (
        spark.readStream.format("ferrymq")
        .option("namesrv", namesrv)
        .option("topic", SOURCE_TOPIC)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", str(max_per_trigger))
        .load()
    )
    o = F.from_json(F.col("body").cast("string"), ORDER_SCHEMA, {"mode": "PERMISSIVE"})
    enriched = orders.select("keys", o.alias("o")).select(
        "keys",
        F.to_json(
            F.struct(
                F.col("o.order_id").alias("order_id"),
                F.col("o.product").alias("product"),
                (F.col("o.quantity") * F.col("o.price")).alias("revenue"),
                F.col("o.order_id").isNotNull().alias("valid"),
            )
        ).alias("body"),
    )
    return (
        enriched.writeStream.format("ferrymq")
        .option("namesrv", namesrv)
        .option("topic", ENRICHED_TOPIC)
        .option("guarantee", "exactly-once")
        .option("checkpointLocation", checkpoint)
        .trigger(availableNow=True)
        .start()
    )


def main() -> int:
    namesrv, checkpoint, per_trigger = sys.argv[1:4]
    spark = (
        SparkSession.builder.master("local[2]")
        .appName("ferrymq-demo-enrich")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.ui.showConsoleProgress", "false")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    ferrymq.spark.register(spark)
    start(spark, namesrv, checkpoint, int(per_trigger)).awaitTermination()
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())


# --- the demo's side (run.py) -----------------------------------------------------------------
def start_first_attempt(namesrv: str, checkpoint: Path, per_trigger: int, log: Path) -> subprocess.Popen[bytes]:
    """The first attempt, as a child process whose driver the sink kills at KILL_POINT."""
    env = {**os.environ, FAULT_ENV: KILL_POINT, **short_lived_jvm()}
    with log.open("wb") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "examples.pipeline.enrich_job", namesrv, str(checkpoint),
             str(per_trigger)],
            cwd=Path(__file__).resolve().parents[2], env=env, stdout=out, stderr=subprocess.STDOUT,
            start_new_session=True,  # its JVM and Python workers die with it
        )


@dataclass
class Arrivals:
    """What a consumer of orders-enriched received: every delivery of every order key."""

    keys: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def listener(self, msgs: list[MessageExt], ctx: Any) -> ConsumeStatus:
        with self.lock:
            self.keys.extend(m.keys or "" for m in msgs)
        return ConsumeStatus.CONSUME_SUCCESS

    def count(self) -> int:
        with self.lock:
            return len(self.keys)


class EnrichStage:
    """The write-back stage beside the main pipeline. Run after it, the stage added 23 s to the
    demo, most of it waiting: the restarted query's three micro-batches and a consumer's start
    and first rebalance came after the audit's retries had been waited for, while the query
    and the consumer need no more than the first attempt's death. So the consumer of
    orders-enriched starts with the first attempt, the restart begins (in the demo's session)
    as soon as the first attempt is dead, beside the main query and the audit's retries, and
    takes the rest of the orders in one micro-batch after the replayed batch 0."""

    def __init__(self, namesrv: str, checkpoint: Path, per_trigger: int, log: Path) -> None:
        self.namesrv = namesrv
        self.checkpoint = checkpoint
        self.per_trigger = per_trigger
        self.first_attempt = start_first_attempt(namesrv, checkpoint, per_trigger, log)
        self.arrivals = Arrivals()
        # Reads orders-enriched from its start: what the killed attempt committed, and all after.
        self.consumer = PushConsumer("orders-enriched-check", namesrv,
                                     consume_from_where=ConsumeFromWhere.FIRST_OFFSET)
        self.consumer.subscribe(ENRICHED_TOPIC)
        self.consumer.register_listener(self.arrivals.listener)
        self.consumer.start()
        self.query: Any = None
        self.killed: int | None = None

    def step(self, spark: SparkSession, orders: int) -> None:
        """Restart the query once the first attempt is dead; after the replayed batch 0 it may
        take every order left in one micro-batch."""
        if self.query is None and self.first_attempt.poll() is not None:
            self.killed = self.first_attempt.returncode
            self.query = start(spark, self.namesrv, str(self.checkpoint), orders)

    def finish(self, spark: SparkSession, orders: int, timeout: float) -> int:
        """Wait for the restarted query's end; returns the first attempt's exit status (-9:
        SIGKILL)."""
        if self.query is None:
            self.first_attempt.wait(timeout=180)
            self.step(spark, orders)
        self.query.awaitTermination(timeout)
        if self.query.isActive or self.query.exception() is not None:
            raise RuntimeError(f"the enrich query failed: {self.query.exception() or 'timed out'}")
        assert self.killed is not None
        return self.killed

    def received(self, expected: int, timeout: float) -> Arrivals:
        """What the consumer received once `expected` messages arrived (or at the deadline);
        exactly-once leaves no duplicate to show."""
        deadline = time.monotonic() + timeout
        while self.arrivals.count() < expected and time.monotonic() < deadline:
            time.sleep(0.1)  # polling a count; the deadline bounds it
        return self.arrivals

    def close(self) -> None:
        """The consumer stops; a first attempt still alive (the demo failed early) is killed."""
        if self.first_attempt.poll() is None:
            os.killpg(self.first_attempt.pid, signal.SIGKILL)
            self.first_attempt.wait()
        self.consumer.shutdown()
