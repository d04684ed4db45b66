"""A Spark driver run as a child process by test_stream_kill_restart: streams a topic into a
Parquet file sink and prints one line per completed micro-batch, so the test can kill it
(-9, the whole process group) at a known point without sleeping.

usage: stream_child.py NAMESRV TOPIC OUT_DIR CHECKPOINT_DIR MAX_PER_TRIGGER(0: none)
       (run|available-now)"""

from __future__ import annotations

import sys
from typing import Any

from pyspark.sql import SparkSession
from pyspark.sql.streaming import StreamingQueryListener

import ferrymq.spark


class Printer(StreamingQueryListener):  # type: ignore[misc]
    def onQueryStarted(self, event: Any) -> None:
        print("started", flush=True)

    def onQueryProgress(self, event: Any) -> None:
        p = event.progress
        print(f"batch {p.batchId} rows {p.numInputRows}", flush=True)

    def onQueryIdle(self, event: Any) -> None:
        pass

    def onQueryTerminated(self, event: Any) -> None:
        print("terminated", flush=True)


def main() -> int:
    namesrv, topic, out_dir, checkpoint, per_trigger, mode = sys.argv[1:7]
    spark = (
        SparkSession.builder.master("local[2]")
        .appName("ferrymq-kill-test")
        .config("spark.sql.shuffle.partitions", "2")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    ferrymq.spark.register(spark)
    spark.streams.addListener(Printer())
    df = (
        spark.readStream.format("ferrymq")
        .option("namesrv", namesrv)
        .option("topic", topic)
        .option("group", "kill-test")
        .option("startingOffsets", "earliest")
        .options(**({"maxOffsetsPerTrigger": per_trigger} if int(per_trigger) else {}))
        .load()
        .selectExpr("queue_id", "queue_offset", "msg_id", "cast(body as string) as body")
    )
    writer = df.writeStream.format("parquet").option("checkpointLocation", checkpoint)
    writer = (
        writer.trigger(availableNow=True)
        if mode == "available-now"
        else writer.trigger(processingTime="200 milliseconds")
    )
    query = writer.start(out_dir)
    query.awaitTermination()
    ferrymq.spark.wait_committed(query)
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
