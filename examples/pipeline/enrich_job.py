"""The demo's write-back stage: reads `orders`, enriches each order (its revenue, and whether it
parsed) and writes it to `orders-enriched` through the ferrymq sink with
`guarantee=exactly-once`, keyed as the order was (`order-<id>`).

The demo runs the query's first attempt as a child process (`python -m
examples.pipeline.enrich_job NAMESRV CHECKPOINT PER_TRIGGER`) with the sink's fault hook
set, so its driver is SIGKILLed right after it committed micro-batch 0 and before Spark
recorded that in its checkpoint: the case where an at-least-once sink writes the batch twice.
The demo then restarts the query from the checkpoint in its own Spark session."""

from __future__ import annotations

import os
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
    env = {**os.environ, FAULT_ENV: KILL_POINT}
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


def consume_enriched(namesrv: str, expected: int, timeout: float) -> Arrivals:
    """Read orders-enriched from its start until `expected` messages arrived, then a moment
    longer would show duplicates too; exactly-once leaves none to show."""
    arrivals = Arrivals()
    consumer = PushConsumer("orders-enriched-check", namesrv,
                            consume_from_where=ConsumeFromWhere.FIRST_OFFSET)
    consumer.subscribe(ENRICHED_TOPIC)
    consumer.register_listener(arrivals.listener)
    consumer.start()
    try:
        deadline = time.monotonic() + timeout
        while arrivals.count() < expected and time.monotonic() < deadline:
            time.sleep(0.1)  # polling a count; the deadline bounds it
    finally:
        consumer.shutdown()
    return arrivals
