"""The `ferrymq` data source end to end: one SparkSession (local[2]) and one standalone broker
for the module. Every wait is on a condition (query termination, listener events, broker
state), never a bare sleep."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from spark_fixtures import admin as admin
from spark_fixtures import spark as spark

import ferrymq.spark  # sets the Spark environment (before any session exists)
from conftest import Standalone, start_standalone
from ferrymq import (
    AdminClient,
    ConsumeFromWhere,
    ConsumeStatus,
    Message,
    Producer,
    PushConsumer,
)
from ferrymq.spark.sink_record import find_record
from ferrymq.spark.writer import uniq_key
from waits import wait_until

pytestmark = [pytest.mark.spark, pytest.mark.timeout(600)]

HERE = Path(__file__).parent


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Standalone]:
    s = start_standalone(tmp_path_factory.mktemp("spark-store"))
    try:
        yield s
    finally:
        s.stop()


def produce(namesrv: str, topic: str, n: int, *, start: int = 0, batch: int = 100) -> None:
    with Producer("spark-test-producer", namesrv) as producer:
        for lo in range(start, start + n, batch):
            hi = min(lo + batch, start + n)
            producer.send_batch(
                [Message(topic, f"m{i}".encode(), keys=f"k{i}", tags="t") for i in range(lo, hi)]
            )


def max_offsets(admin: AdminClient, topic: str) -> dict[tuple[str, int], int]:
    return {(r.broker, r.queue_id): r.max_offset for r in admin.topic_status(topic)}


def stream(spark: Any, server: Standalone, topic: str, **options: str) -> Any:
    reader = spark.readStream.format("ferrymq").option("namesrv", server.namesrv)
    reader = reader.option("topic", topic)
    for k, v in options.items():
        reader = reader.option(k, v)
    return reader.load()


def run_available_now(df: Any, name: str, checkpoint: Path) -> Any:
    query = (
        df.writeStream.format("memory")
        .queryName(name)
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    assert query.exception() is None
    return query


def run_to_parquet(df: Any, out: Path, checkpoint: Path) -> Any:
    query = (
        df.writeStream.format("parquet")
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start(str(out))
    )
    query.awaitTermination()
    assert query.exception() is None
    return query


def test_available_now_reads_exactly_what_is_available(
    spark: Any, server: Standalone, admin: AdminClient, tmp_path: Path
) -> None:
    admin.create_topic("an-orders", 4)
    produce(server.namesrv, "an-orders", 200)
    df = stream(spark, server, "an-orders", startingOffsets="earliest").selectExpr(
        "queue_id", "queue_offset", "msg_id", "cast(body as string) as body"
    )
    out, cp = tmp_path / "out", tmp_path / "cp"
    run_to_parquet(df, out, cp)
    rows = spark.read.parquet(str(out)).collect()
    assert len(rows) == 200
    assert len({(r.queue_id, r.queue_offset) for r in rows}) == 200
    assert sorted(r.body for r in rows) == sorted(f"m{i}" for i in range(200))
    per_queue: dict[int, list[int]] = {}
    for r in rows:
        per_queue.setdefault(r.queue_id, []).append(r.queue_offset)
    ends = max_offsets(admin, "an-orders")
    for qid, offsets in per_queue.items():
        assert sorted(offsets) == list(range(ends[("broker-a", qid)]))

    # The same checkpoint picks up exactly what was added since.
    produce(server.namesrv, "an-orders", 50, start=200)
    query = run_to_parquet(df, out, cp)
    assert sum(p["numInputRows"] for p in query.recentProgress) == 50
    rows = spark.read.parquet(str(out)).collect()
    assert sorted(r.body for r in rows) == sorted(f"m{i}" for i in range(250))


def test_max_offsets_per_trigger_splits_into_batches(
    spark: Any, server: Standalone, admin: AdminClient, tmp_path: Path
) -> None:
    admin.create_topic("limited", 4)
    produce(server.namesrv, "limited", 100)
    df = stream(spark, server, "limited", startingOffsets="earliest", maxOffsetsPerTrigger="30")
    query = run_available_now(df, "lim", tmp_path / "cp")
    sizes = [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]]
    assert sum(sizes) == 100
    assert len(sizes) >= 4 and max(sizes) <= 30
    assert spark.sql("select count(distinct queue_id, queue_offset) from lim").first()[0] == 100


def test_max_partitions_groups_queues_and_reads_every_offset_once(
    spark: Any, server: Standalone, admin: AdminClient, tmp_path: Path
) -> None:
    admin.create_topic("grouped-parts", 4)
    produce(server.namesrv, "grouped-parts", 100, batch=10)  # a batch goes to one queue
    assert sum(1 for n in max_offsets(admin, "grouped-parts").values() if n) == 4
    df = stream(
        spark, server, "grouped-parts", startingOffsets="earliest", maxOffsetsPerTrigger="30",
        maxPartitions="2",
    )
    query = run_available_now(df, "gp", tmp_path / "cp")
    sizes = [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]]
    assert sum(sizes) == 100 and max(sizes) <= 30
    rows = spark.sql("select queue_id, queue_offset, body from gp").collect()
    assert len(rows) == len({(r.queue_id, r.queue_offset) for r in rows}) == 100
    assert sorted(r.body for r in rows) == sorted(f"m{i}".encode() for i in range(100))
    batch = (
        spark.read.format("ferrymq").option("namesrv", server.namesrv)
        .option("topic", "grouped-parts").option("maxPartitions", "3").load()
    )
    from pyspark.sql.functions import spark_partition_id

    rows = batch.select(spark_partition_id().alias("p"), "queue_id", "queue_offset").collect()
    assert len({r.p for r in rows}) == 3  # 4 queues in 3 tasks
    assert len({(r.queue_id, r.queue_offset) for r in rows}) == len(rows) == 100


def test_group_offsets_reach_the_broker_after_the_query_stops(
    spark: Any, server: Standalone, admin: AdminClient, tmp_path: Path
) -> None:
    admin.create_topic("grouped", 4)
    produce(server.namesrv, "grouped", 120)
    df = stream(spark, server, "grouped", group="spark-grp", startingOffsets="earliest")
    query = run_available_now(df, "grp", tmp_path / "cp")
    assert ferrymq.spark.wait_committed(query, 30)
    ends = max_offsets(admin, "grouped")
    committed = {
        (r.broker, r.queue_id): r.consumer_offset
        for r in admin.consume_stats("spark-grp", "grouped")
    }
    assert committed == ends
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "ferrymq",
            "group",
            "progress",
            "spark-grp",
            "--json",
            "--namesrv",
            server.namesrv,
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    rows = [r for r in json.loads(out.stdout) if r["topic"] == "grouped"]
    assert len(rows) == 4 and all(r["lag"] == 0 for r in rows)


def test_batch_read_of_a_dlq_topic(spark: Any, server: Standalone, admin: AdminClient) -> None:
    produce(server.namesrv, "poison", 6)
    group = "spark-dlq-grp"
    consumer = PushConsumer(
        group,
        server.namesrv,
        consume_from_where=ConsumeFromWhere.FIRST_OFFSET,
        max_reconsume_times=1,
    )
    consumer.subscribe("poison")
    consumer.register_listener(lambda msgs, ctx: ConsumeStatus.RECONSUME_LATER)
    consumer.start()
    try:
        dlq = f"%DLQ%{group}"

        def dead_lettered() -> int:
            try:
                return sum(r.max_offset for r in admin.topic_status(dlq))
            except Exception:
                return 0

        wait_until(lambda: dead_lettered() >= 6, timeout=60, what="6 messages in the DLQ")
    finally:
        consumer.shutdown()
    df = spark.read.format("ferrymq").option("namesrv", server.namesrv).option("topic", dlq).load()
    rows = df.collect()
    assert len(rows) == 6
    assert {r.topic for r in rows} == {dlq}
    assert sorted(r.body.decode() for r in rows) == sorted(f"m{i}" for i in range(6))
    assert all(r.keys and r.keys.startswith("k") for r in rows)
    # Bounded by offsets: the first two only.
    part = (
        spark.read.format("ferrymq")
        .option("namesrv", server.namesrv)
        .option("topic", dlq)
        .option("endingOffsets", json.dumps({dlq: {"broker-a": {"0": 2}}}))
        .load()
    )
    assert part.count() == 2


def test_writer_round_trip_batch_and_stream(
    spark: Any, server: Standalone, admin: AdminClient, tmp_path: Path
) -> None:
    from pyspark.sql.types import MapType, StringType, StructField, StructType

    schema = StructType(
        [
            StructField("body", StringType()),
            StructField("keys", StringType()),
            StructField("tags", StringType()),
            StructField("properties", MapType(StringType(), StringType())),
        ]
    )
    data = [(f"w{i}", f"key{i}", "tagA" if i % 2 else None, {"n": str(i)}) for i in range(40)]
    admin.create_topic("written", 2)
    spark.createDataFrame(data, schema).repartition(2).write.format("ferrymq").option(
        "namesrv", server.namesrv
    ).option("topic", "written").mode("append").save()
    back = (
        spark.read.format("ferrymq")
        .option("namesrv", server.namesrv)
        .option("topic", "written")
        .load()
        .collect()
    )
    assert sorted(r.body.decode() for r in back) == sorted(d[0] for d in data)
    by_body = {r.body.decode(): r for r in back}
    for body, keys, tags, props in data:
        row = by_body[body]
        assert row.keys == keys and row.tags == tags and row.properties["n"] == props["n"]
    assert len({r.msg_id for r in back}) == 40

    # Stream writer: copy `written` into `copied`; UNIQ_KEYs follow (query, batch, partition, row).
    admin.create_topic("copied", 2)
    src = stream(spark, server, "written", startingOffsets="earliest").selectExpr("body", "keys")
    query = (
        src.writeStream.format("ferrymq")
        .option("namesrv", server.namesrv)
        .option("topic", "copied")
        .option("checkpointLocation", str(tmp_path / "wcp"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    assert query.exception() is None
    copied = (
        spark.read.format("ferrymq")
        .option("namesrv", server.namesrv)
        .option("topic", "copied")
        .load()
        .collect()
    )
    assert sorted(r.body for r in copied) == sorted(r.body for r in back)
    expected = {uniq_key(str(query.id), 0, p, i) for p in range(4) for i in range(40)}
    assert {r.msg_id for r in copied} <= expected


def test_exactly_once_batch_write_and_its_replay(
    spark: Any, server: Standalone, admin: AdminClient
) -> None:
    # The same queryId and batchId twice, as a foreachBatch function replayed after a crash
    # writes them: the second write finds the first one's record and rolls its own halves back.
    admin.create_topic("eos-batch", 2)
    rows = [(f"e{i}", f"k{i}") for i in range(50)]
    writer = (
        spark.createDataFrame(rows, "body string, keys string")
        .repartition(2)
        .write.format("ferrymq")
        .option("namesrv", server.namesrv)
        .option("topic", "eos-batch")
        .option("guarantee", "exactly-once")
        .option("queryId", "eos-batch-query")
        .option("batchId", "7")
        .mode("append")
    )
    writer.save()
    writer.save()
    back = (
        spark.read.format("ferrymq")
        .option("namesrv", server.namesrv)
        .option("topic", "eos-batch")
        .load()
        .collect()
    )
    assert sorted((r.body.decode(), r.keys) for r in back) == sorted(rows)
    assert len({r.msg_id for r in back}) == 50
    record = find_record(admin, "eos-batch-query", 7)
    assert record is not None and len(record.tokens) == 2
    assert {h.topic for h in record.halves} == {"eos-batch"}


def test_stream_kill_restart_no_loss_no_duplicates(
    spark: Any, server: Standalone, admin: AdminClient, tmp_path: Path
) -> None:
    n = 1500
    admin.create_topic("killed", 4)
    produce(server.namesrv, "killed", n)
    out, cp = tmp_path / "out", tmp_path / "cp"

    def child(mode: str, per_trigger: int) -> subprocess.Popen[str]:
        return subprocess.Popen(
            [
                sys.executable,
                str(HERE / "stream_child.py"),
                server.namesrv,
                "killed",
                str(out),
                str(cp),
                str(per_trigger),
                mode,
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            start_new_session=True,
        )

    first = child("run", 250)
    assert first.stdout is not None
    batches = 0
    for line in first.stdout:
        if line.startswith("batch") and not line.rstrip().endswith("rows 0"):
            batches += 1
            if batches == 2:
                break
    assert batches == 2, "the first driver never completed two micro-batches"
    os.killpg(first.pid, signal.SIGKILL)  # the driver and its JVM, mid-stream
    first.wait()

    second = child("available-now", 0)  # the rest in one batch: no limit
    assert second.wait(timeout=300) == 0
    rows = spark.read.parquet(str(out)).collect()
    assert len(rows) == n
    assert len({(r.queue_id, r.queue_offset) for r in rows}) == n
    assert sorted(r.body for r in rows) == sorted(f"m{i}" for i in range(n))
    committed = {
        (r.broker, r.queue_id): r.consumer_offset
        for r in admin.consume_stats("kill-test", "killed")
    }
    assert committed == max_offsets(admin, "killed")


def test_queues_added_to_a_topic_are_read_from_their_start(
    spark: Any, server: Standalone, admin: AdminClient, tmp_path: Path
) -> None:
    admin.create_topic("growing", 2)
    produce(server.namesrv, "growing", 40)
    df = stream(spark, server, "growing", startingOffsets="latest").selectExpr(
        "queue_id", "cast(body as string) as body"
    )
    out, cp = tmp_path / "out", tmp_path / "cp"
    run_to_parquet(df, out, cp)  # starts at latest: nothing to read yet
    admin.create_topic("growing", 4)  # two more queues
    produce(server.namesrv, "growing", 80, start=40, batch=10)  # batches spread over queues
    run_to_parquet(df, out, cp)
    rows = spark.read.parquet(str(out)).collect()
    assert sorted(r.body for r in rows) == sorted(f"m{i}" for i in range(40, 120))
    assert {2, 3} <= {r.queue_id for r in rows}


# Source options beyond offsets: minOffsetsPerTrigger, maxTriggerDelay and the subExpression
# tag filter. The time rule itself is unit-tested with an injected clock (test_spark_units.py).

COLORS = ("red", "blue", "green")


def start_memory_query(df: Any, name: str, checkpoint: Path) -> Any:
    return (
        df.writeStream.format("memory")
        .queryName(name)
        .option("checkpointLocation", str(checkpoint))
        .trigger(processingTime="200 milliseconds")
        .start()
    )


def count(spark: Any, name: str) -> int:
    return int(spark.sql(f"select count(*) from {name}").first()[0])


def triggers_since(query: Any, since: datetime) -> int:
    """Progress events of triggers that started after `since` (idle ones included, as the
    session reports every idle trigger)."""
    stamps = [
        datetime.fromisoformat(p["timestamp"].replace("Z", "+00:00"))
        for p in query.recentProgress
    ]
    return sum(1 for t in stamps if t > since)


def batch_sizes(query: Any) -> list[int]:
    return [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]]


@pytest.fixture
def idle_progress(spark: Any) -> Any:
    spark.conf.set("spark.sql.streaming.noDataProgressEventInterval", "0")
    try:
        yield spark
    finally:
        spark.conf.unset("spark.sql.streaming.noDataProgressEventInterval")


def gated_query(
    spark: Any, server: Standalone, admin: AdminClient, topic: str, cp: Path, **options: str
) -> Any:
    """A running query on a new topic, past its first batch of 10 rows: the first trigger with
    data runs whatever its size (Kafka's rule), so the gate is tested from there on."""
    admin.create_topic(topic, 2)
    produce(server.namesrv, topic, 10)
    df = stream(spark, server, topic, startingOffsets="earliest", **options)
    name = topic.replace("-", "")
    query = start_memory_query(df, name, cp)
    wait_until(lambda: count(spark, name) == 10, timeout=120, what="first batch")
    return query


def test_min_offsets_per_trigger_skips_triggers_until_enough_rows(
    idle_progress: Any, server: Standalone, admin: AdminClient, tmp_path: Path
) -> None:
    spark = idle_progress
    query = gated_query(
        spark, server, admin, "min-rows", tmp_path, minOffsetsPerTrigger="100", maxTriggerDelay="1h"
    )
    try:
        produce(server.namesrv, "min-rows", 60, start=10)
        since = datetime.now(UTC)
        wait_until(lambda: triggers_since(query, since) >= 5, timeout=120, what="triggers")
        assert count(spark, "minrows") == 10  # 60 < 100: those triggers were skipped
        produce(server.namesrv, "min-rows", 40, start=70)
        wait_until(lambda: count(spark, "minrows") == 110, timeout=120, what="second batch")
        assert batch_sizes(query) == [10, 100]
        assert query.exception() is None
    finally:
        query.stop()


def test_max_trigger_delay_runs_a_small_batch_once_the_delay_passed(
    spark: Any, server: Standalone, admin: AdminClient, tmp_path: Path
) -> None:
    query = gated_query(
        spark, server, admin, "delayed", tmp_path, minOffsetsPerTrigger="1000", maxTriggerDelay="1s"
    )
    try:
        produce(server.namesrv, "delayed", 5, start=10)
        # 5 < 1000 rows would wait forever (the default delay is 15 minutes); with a 1 s delay
        # they come in one batch of their own.
        wait_until(lambda: count(spark, "delayed") == 15, timeout=120, what="delayed batch")
        assert batch_sizes(query) == [10, 5]
        assert query.exception() is None
    finally:
        query.stop()


def produce_colored(namesrv: str, topic: str, n: int, *, start: int = 0) -> None:
    with Producer("spark-test-producer", namesrv) as producer:
        for lo in range(start, start + n, 100):
            hi = min(lo + 100, start + n)
            producer.send_batch(
                [
                    Message(topic, f"m{i}".encode(), tags=COLORS[i % 3] if i % 10 else None)
                    for i in range(lo, hi)
                ]
            )


def expected(lo: int, hi: int) -> list[str]:
    return sorted(f"m{i}" for i in range(lo, hi) if i % 10 and COLORS[i % 3] in ("red", "blue"))


def test_sub_expression_reads_only_the_named_tags(
    spark: Any, server: Standalone, admin: AdminClient, tmp_path: Path
) -> None:
    admin.create_topic("colored", 1)
    # Small pulls: a filtered pull scans past the slice it was planned for, so the reader
    # must not return those rows twice.
    produce_colored(server.namesrv, "colored", 3000)
    batch = (
        spark.read.format("ferrymq")
        .option("namesrv", server.namesrv)
        .option("topic", "colored")
        .option("subExpression", "red || blue")
        .option("pullBatchSize", "100")
        .load()
    )
    rows = batch.selectExpr("queue_offset", "tags", "cast(body as string) as body").collect()
    assert sorted(r.body for r in rows) == expected(0, 3000)
    assert len({r.queue_offset for r in rows}) == len(rows)
    assert {r.tags for r in rows} == {"red", "blue"}

    # A stream's offsets move past filtered messages: the next run reads only what is new.
    df = stream(spark, server, "colored", startingOffsets="earliest", subExpression="red || blue")
    df = df.selectExpr("cast(body as string) as body")
    out, cp = tmp_path / "out", tmp_path / "cp"
    run_to_parquet(df, out, cp)
    assert sorted(r.body for r in spark.read.parquet(str(out)).collect()) == expected(0, 3000)
    produce_colored(server.namesrv, "colored", 300, start=3000)
    query = run_to_parquet(df, out, cp)
    assert sum(p["numInputRows"] for p in query.recentProgress) == len(expected(3000, 3300))
    assert sorted(r.body for r in spark.read.parquet(str(out)).collect()) == expected(0, 3300)
