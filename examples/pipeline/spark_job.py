"""The Spark Structured Streaming job of the demo.

Reads `orders` as the consumer group `orders-pipeline`, parses the JSON events, and per
micro-batch (foreachBatch):
- appends revenue per minute and product to Parquet, in a folder per batch id written with
  mode overwrite, so a replayed batch replaces its own output instead of doubling it;
- sends rows that do not parse to `orders-bad` through the ferrymq sink, with UNIQ_KEYs
  derived from the batch id, so a replay is recognisable downstream.

The summary sums the per-batch partial aggregates (`read_aggregates`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import DoubleType, IntegerType, LongType, StringType, StructField, StructType

GROUP = "orders-pipeline"
SOURCE_TOPIC = "orders"
BAD_TOPIC = "orders-bad"

ORDER_SCHEMA = StructType(
    [
        StructField("order_id", LongType()),
        StructField("product", StringType()),
        StructField("quantity", IntegerType()),
        StructField("price", DoubleType()),
        StructField("ts", LongType()),
    ]
)


def parsed_orders(spark: SparkSession, namesrv: str, max_per_trigger: int) -> DataFrame:
    raw = (
        spark.readStream.format("ferrymq")
        .option("namesrv", namesrv)
        .option("topic", SOURCE_TOPIC)
        .option("group", GROUP)  # resumes where the group left off; lag visible to ferrymq
        .option("maxOffsetsPerTrigger", str(max_per_trigger))
        .load()
    )
    text = F.col("body").cast("string")
    return raw.select(
        "msg_id",
        "keys",
        "body",
        F.from_json(text, ORDER_SCHEMA, {"mode": "PERMISSIVE"}).alias("o"),
    )


def process_batch(namesrv: str, out_dir: Path) -> Any:
    def handle(batch: DataFrame, batch_id: int) -> None:
        valid = F.col("o.order_id").isNotNull() & F.col("o.product").isNotNull()
        good = batch.where(valid).select("o.*")
        bad = batch.where(~valid | F.col("o").isNull()).select("body", "keys")
        aggregates = (
            good.withColumn("minute", F.date_trunc("minute", F.timestamp_millis("ts")))
            .groupBy("minute", "product")
            .agg(
                F.sum(F.col("quantity") * F.col("price")).alias("revenue"),
                F.count("*").alias("orders"),
            )
        )
        aggregates.write.mode("overwrite").parquet(str(out_dir / f"batch_id={batch_id}"))
        (
            bad.write.format("ferrymq")
            .option("namesrv", namesrv)
            .option("topic", BAD_TOPIC)
            .option("queryId", GROUP)
            .option("batchId", str(batch_id))
            .mode("append")
            .save()
        )

    return handle


def start(
    spark: SparkSession, namesrv: str, out_dir: Path, checkpoint: Path, max_per_trigger: int
) -> Any:
    orders = parsed_orders(spark, namesrv, max_per_trigger)
    return (
        orders.writeStream.foreachBatch(process_batch(namesrv, out_dir))
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )


def read_aggregates(spark: SparkSession, out_dir: Path) -> DataFrame:
    partials = spark.read.parquet(str(out_dir))
    return partials.groupBy("minute", "product").agg(
        F.sum("revenue").alias("revenue"), F.sum("orders").alias("orders")
    )
