"""Kafka's conventions through Spark (local[2]) and a real standalone broker: save modes of
batch writes, misspelt options refused, includeHeaders, and failOnDataLoss against a queue
whose head the broker's retention really removed (64 KiB commit-log segments kept for a
fraction of a second; the broker's cleanup runs on its own every 10 s)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from spark_fixtures import admin as admin
from spark_fixtures import spark as spark

from conftest import Standalone, start_standalone
from ferrymq import AdminClient, Message, Producer
from waits import wait_until

pytestmark = [pytest.mark.spark, pytest.mark.timeout(600)]

TOPIC = "lossy"
BODY = b"x" * 1000  # about 60 messages to a 64 KiB segment


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Standalone]:
    root = tmp_path_factory.mktemp("spark-retention")
    config = root / "broker.toml"
    # Segments older than ~0.4 s (all but the one being written) go at the next cleanup.
    config.write_text("mapped_file_size_commitlog = 65536\nfile_reserved_time = 0.0001\n")
    s = start_standalone(root / "store", "--config", str(config))
    try:
        yield s
    finally:
        s.stop()


def produce(namesrv: str, topic: str, n: int, *, start: int = 0, body: bytes = BODY,
            properties: dict[str, str] | None = None) -> None:
    with Producer("spark-conventions-producer", namesrv) as producer:
        for lo in range(start, start + n, 20):
            producer.send_batch([
                Message(topic, body + b"%d" % i, keys=f"k{i}", properties=properties or {})
                for i in range(lo, min(lo + 20, start + n))
            ])


def bounds(admin: AdminClient, topic: str) -> tuple[int, int]:
    (row,) = admin.topic_status(topic)
    return row.min_offset, row.max_offset


def read_batch(spark: Any, server: Standalone, topic: str, **options: str) -> Any:
    reader = spark.read.format("ferrymq").option("namesrv", server.namesrv)
    reader = reader.option("topic", topic)
    for k, v in options.items():
        reader = reader.option(k, v)
    return reader.load()


def run_stream(spark: Any, server: Standalone, topic: str, out: Path, cp: Path,
               **options: str) -> Any:
    reader = spark.readStream.format("ferrymq").option("namesrv", server.namesrv)
    reader = reader.option("topic", topic)
    for k, v in options.items():
        reader = reader.option(k, v)
    query = (
        reader.load().select("queue_offset").writeStream.format("parquet")
        .option("checkpointLocation", str(cp)).trigger(availableNow=True).start(str(out))
    )
    try:
        query.awaitTermination()
    except Exception:  # the failure is asserted by the caller through query.exception()
        pass
    return query


@pytest.fixture(scope="module")
def lossy(spark: Any, server: Standalone, admin: AdminClient, tmp_path_factory: pytest.TempPathFactory
          ) -> dict[str, Any]:
    """One queue; two stream checkpoints that read its first 10 messages; then enough
    messages for several segments, and a wait until retention removed those first 10."""
    admin.create_topic(TOPIC, 1)
    produce(server.namesrv, TOPIC, 10)
    base = tmp_path_factory.mktemp("lossy")
    runs = {}
    for name in ("fail", "skip"):
        out, cp = base / f"{name}-out", base / f"{name}-cp"
        query = run_stream(spark, server, TOPIC, out, cp, startingOffsets="earliest")
        assert query.exception() is None
        assert sorted(r.queue_offset for r in spark.read.parquet(str(out)).collect()) == list(
            range(10))
        runs[name] = (out, cp)
    produce(server.namesrv, TOPIC, 400, start=10)
    wait_until(lambda: bounds(admin, TOPIC)[0] > 10, timeout=120,
               what="retention to remove the queue's first segments")
    return runs


def test_failOnDataLoss_true_fails_a_stream_that_retention_overtook(
    spark: Any, server: Standalone, admin: AdminClient, lossy: dict[str, Any]
) -> None:
    out, cp = lossy["fail"]
    query = run_stream(spark, server, TOPIC, out, cp)  # failOnDataLoss defaults to true
    error = str(query.exception())
    assert "DataLossError" in error
    assert f"topic '{TOPIC}', broker 'broker-a', queue 0" in error
    assert "offsets 10.." in error  # the checkpoint's next offset is where the gap starts
    assert len(spark.read.parquet(str(out)).collect()) == 10  # nothing more was written


def test_failOnDataLoss_false_skips_ahead_and_the_stream_goes_on(
    spark: Any, server: Standalone, admin: AdminClient, lossy: dict[str, Any]
) -> None:
    out, cp = lossy["skip"]
    low_before, _ = bounds(admin, TOPIC)
    query = run_stream(spark, server, TOPIC, out, cp, failOnDataLoss="false")
    assert query.exception() is None
    low_after, high = bounds(admin, TOPIC)
    offsets = sorted(r.queue_offset for r in spark.read.parquet(str(out)).collect())
    assert offsets[:10] == list(range(10))
    rest = offsets[10:]
    # From the earliest offset still there when the batch was planned, to the end, each once.
    assert rest and low_before <= rest[0] <= low_after
    assert rest == list(range(rest[0], high))


def test_failOnDataLoss_in_a_batch_read(
    spark: Any, server: Standalone, admin: AdminClient, lossy: dict[str, Any]
) -> None:
    start = json.dumps({TOPIC: {"broker-a": {"0": 0}}})
    with pytest.raises(Exception, match="DataLossError") as info:
        read_batch(spark, server, TOPIC, startingOffsets=start).collect()
    assert f"topic '{TOPIC}', broker 'broker-a', queue 0" in str(info.value)
    assert "offsets 0.." in str(info.value)
    low_before, _ = bounds(admin, TOPIC)
    rows = read_batch(spark, server, TOPIC, startingOffsets=start,
                      failOnDataLoss="false").select("queue_offset").collect()
    low_after, high = bounds(admin, TOPIC)
    offsets = sorted(r.queue_offset for r in rows)
    assert offsets and low_before <= offsets[0] <= low_after
    assert offsets == list(range(offsets[0], high))


def test_batch_write_save_modes(spark: Any, server: Standalone, admin: AdminClient) -> None:
    admin.create_topic("modes", 1)
    # A batch read of a topic with no messages has no rows (it failed: Spark reads a stand-in
    # partition when the source plans none).
    assert read_batch(spark, server, "modes").count() == 0
    df = spark.createDataFrame([(f"w{i}",) for i in range(5)], "body string")

    def writer() -> Any:
        return (df.write.format("ferrymq").option("namesrv", server.namesrv)
                .option("topic", "modes").option("producerGroup", "modes-writer")
                .option("sendBatchSize", "2"))

    writer().mode("append").save()
    assert bounds(admin, "modes")[1] == 5
    # Spark refuses its default mode (and "ignore") for every Python data source before the
    # source is asked (docs/spark.md): this fails the day a pyspark takes it, so the docs can
    # say so.
    with pytest.raises(Exception, match="UNSUPPORTED_DATA_SOURCE_SAVE_MODE"):
        writer().save()
    # Overwrite cannot remove a topic's messages: refused rather than appended.
    with pytest.raises(Exception, match="SaveModeError") as info:
        writer().mode("overwrite").save()
    assert "use .mode(\"append\")" in str(info.value)
    assert bounds(admin, "modes")[1] == 5


def test_misspelt_options_are_refused_through_spark(spark: Any, server: Standalone,
                                                     tmp_path: Path) -> None:
    # At load(), before any query runs: Spark asks the source for its schema there.
    with pytest.raises(Exception, match="UnknownOptionError") as info:
        (spark.readStream.format("ferrymq").option("namesrv", server.namesrv)
         .option("topic", "modes").option("startingOffset", "earliest").load())
    assert "did you mean 'startingOffsets'?" in str(info.value)
    with pytest.raises(Exception, match="UnknownOptionError"):
        read_batch(spark, server, "modes", maxOffsetPerTrigger="5")
    df = spark.createDataFrame([("b",)], "body string")
    with pytest.raises(Exception, match="UnknownOptionError") as info:
        (df.write.format("ferrymq").option("namesrv", server.namesrv).option("topic", "modes")
         .option("sendBatchSise", "5").mode("append").save())
    assert "did you mean 'sendBatchSize'?" in str(info.value)


def test_include_headers_adds_kafkas_headers_column(spark: Any, server: Standalone,
                                                    admin: AdminClient) -> None:
    admin.create_topic("headed", 1)
    produce(server.namesrv, "headed", 3, body=b"h", properties={"trace": "t-1"})
    plain = read_batch(spark, server, "headed")
    assert "headers" not in plain.columns  # the default schema is as before
    df = read_batch(spark, server, "headed", includeHeaders="true")
    assert df.columns[-1] == "headers"
    assert df.schema["headers"].dataType.simpleString() == (
        "array<struct<key:string,value:binary>>"
    )
    rows = df.select("queue_offset", "properties", "headers").collect()
    assert len(rows) == 3
    for row in rows:
        headers = {h.key: bytes(h.value) for h in row.headers}
        assert headers == {k: v.encode() for k, v in row.properties.items()}
        assert headers["trace"] == b"t-1" and headers["KEYS"] == b"k%d" % row.queue_offset
