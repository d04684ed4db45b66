"""A Spark driver run as a child process by test_spark_exactly_once: copies a topic into
another through the exactly-once sink (Trigger.AvailableNow, maxOffsetsPerTrigger) and exits
0 once everything available is written. The test places its death with the sink's fault hook
(FERRYMQ_SPARK_SINK_FAULT in this process's environment), which SIGKILLs this driver.

usage: eos_child.py NAMESRV IN_TOPIC OUT_TOPIC CHECKPOINT_DIR MAX_PER_TRIGGER [SEND_BATCH_SIZE]"""

from __future__ import annotations

import sys

from pyspark.sql import SparkSession

import ferrymq.spark


def main() -> int:
    namesrv, in_topic, out_topic, checkpoint, per_trigger = sys.argv[1:6]
    send_batch = sys.argv[6] if len(sys.argv) > 6 else "4096"
    spark = (
        SparkSession.builder.master("local[2]")
        .appName("ferrymq-eos-test")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.ui.enabled", "false")
        # How long a Python worker may take to connect back: on a loaded two-core machine
        # the default (15 s) has run out before a driver committed its first batch.
        .config("spark.python.authenticate.socketTimeout", "120s")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    ferrymq.spark.register(spark)
    query = (
        spark.readStream.format("ferrymq")
        .option("namesrv", namesrv)
        .option("topic", in_topic)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", per_trigger)
        .load()
        .selectExpr("concat('enriched:', cast(body as string)) as body", "keys")
        .writeStream.format("ferrymq")
        .option("namesrv", namesrv)
        .option("topic", out_topic)
        .option("guarantee", "exactly-once")
        .option("sendBatchSize", send_batch)
        .option("checkpointLocation", checkpoint)
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
