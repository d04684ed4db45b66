"""Kafka's conventions in the connector's pure parts (no JVM, no broker): unknown option names
are refused with the closest valid one, the reader's and writer's names differ, Spark's own
sink options pass; the `headers` column (includeHeaders) in Kafka's shape; what a
DataLossError says."""

from __future__ import annotations

import pytest

pa = pytest.importorskip("pyarrow")
pytest.importorskip("pyspark")

from pyspark.sql.pandas.types import to_arrow_schema  # noqa: E402

from ferrymq.common.props import properties_to_string  # noqa: E402
from ferrymq.common.record import encode_record, pack_host  # noqa: E402
from ferrymq.spark.decode import decode_to_batch, with_headers  # noqa: E402
from ferrymq.spark.errors import DataLossError, OptionError, UnknownOptionError  # noqa: E402
from ferrymq.spark.options import (  # noqa: E402
    BATCH_READER_OPTIONS,
    READER_OPTIONS,
    STREAM_READER_OPTIONS,
    reader_options,
    writer_options,
)
from ferrymq.spark.schema import (  # noqa: E402
    ARROW_SCHEMA,
    ARROW_SCHEMA_WITH_HEADERS,
    SPARK_SCHEMA_WITH_HEADERS,
)
from ferrymq.spark.source import FerryMQDataSource  # noqa: E402


def test_a_misspelt_reader_option_is_refused_with_the_closest_name() -> None:
    # Spark lower-cases every key before the source sees it.
    with pytest.raises(UnknownOptionError) as info:
        reader_options({"topic": "a", "startingoffset": "earliest"}, streaming=True)
    err = info.value
    assert err.option == "startingoffset" and err.value == "earliest"
    assert err.suggestion == "startingOffsets"
    assert set(err.valid) == set(READER_OPTIONS + STREAM_READER_OPTIONS)
    text = str(err)
    assert "'startingoffset'" in text and "did you mean 'startingOffsets'?" in text
    assert "maxOffsetsPerTrigger" in text and "endingOffsets" not in text
    assert isinstance(err, OptionError)
    with pytest.raises(UnknownOptionError) as info:
        reader_options({"topic": "a", "zzz": "1"}, streaming=False)
    assert info.value.suggestion is None
    assert set(info.value.valid) == set(READER_OPTIONS + BATCH_READER_OPTIONS)


def test_known_names_pass_in_any_case() -> None:
    opts = reader_options(
        {"TOPIC": "a", "startingoffsets": "earliest", "FailOnDataLoss": "false",
         "includeheaders": "true", "maxoffsetspertrigger": "5"},
        streaming=True,
    )
    assert not opts.fail_on_data_loss and opts.include_headers
    assert opts.max_offsets_per_trigger == 5
    assert not reader_options({"topic": "a"}, streaming=False).include_headers


def test_options_of_the_other_mode_say_so() -> None:
    with pytest.raises(OptionError, match="batch reads only"):
        reader_options({"topic": "a", "endingoffsetsbytimestamp": "5"}, streaming=True)
    with pytest.raises(OptionError, match="streaming reads only"):
        reader_options({"topic": "a", "maxoffsetspertrigger": "5"}, streaming=False)
    with pytest.raises(OptionError, match="batch writes only"):
        writer_options({"topic": "a", "batchid": "3"}, streaming=True)


def test_a_malformed_namesrv_is_refused_when_the_query_is_defined() -> None:
    # Before, "foo" passed and every task attempt failed on the executors instead.
    for bad in ("foo", "127.0.0.1", "host:port", ":9876", ";"):
        with pytest.raises(OptionError, match="expected HOST:PORT") as info:
            writer_options({"topic": "a", "namesrv": bad})
        assert info.value.option == "namesrv" and info.value.value == bad
        with pytest.raises(OptionError, match="expected HOST:PORT"):
            reader_options({"topic": "a", "namesrv": bad}, streaming=True)
    assert writer_options({"topic": "a", "namesrv": "ns1:9876;ns2:9876"}).namesrv == "ns1:9876;ns2:9876"
    assert reader_options({"topic": "a", "namesrv": " 127.0.0.1:9876 "}, streaming=False).namesrv == "127.0.0.1:9876"


def test_writer_names_differ_from_the_reader_and_spark_sink_options_pass() -> None:
    with pytest.raises(UnknownOptionError) as info:
        writer_options({"topic": "a", "startingoffsets": "earliest"})
    assert info.value.kind == "batch writer" and "producerGroup" in info.value.valid
    with pytest.raises(UnknownOptionError) as info:
        writer_options({"topic": "a", "producergrp": "g"})
    assert info.value.suggestion == "producerGroup"
    # DataStreamWriter hands a sink its checkpointLocation and queryName.
    opts = writer_options(
        {"topic": "a", "checkpointlocation": "/tmp/cp", "queryname": "q"}, streaming=True
    )
    assert opts.topic == "a"
    with pytest.raises(UnknownOptionError):
        writer_options({"topic": "a", "checkpointlocation": "/tmp/cp"})
    with pytest.raises(OptionError, match="no path"):
        writer_options({"topic": "a", "path": "orders"})
    with pytest.raises(OptionError, match="no path"):
        reader_options({"topic": "a", "path": "orders"}, streaming=False)


def test_the_schema_follows_include_headers() -> None:
    assert FerryMQDataSource({"topic": "a"}).schema().names[-1] == "reconsume_times"
    with_h = FerryMQDataSource({"topic": "a", "includeheaders": "true"}).schema()
    assert with_h == SPARK_SCHEMA_WITH_HEADERS and with_h.names[-1] == "headers"
    assert to_arrow_schema(SPARK_SCHEMA_WITH_HEADERS, timezone="UTC").equals(
        ARROW_SCHEMA_WITH_HEADERS
    )
    with pytest.raises(OptionError):
        FerryMQDataSource({"topic": "a", "includeheaders": "maybe"}).schema()


def record(i: int, props: dict[str, str]) -> bytes:
    return encode_record(
        topic=b"t", queue_id=0, flag=0, body=b"m%d" % i,
        properties=properties_to_string(props).encode(), sys_flag=0, born_timestamp=1,
        born_host=pack_host("127.0.0.1", 1), store_timestamp=2,
        store_host=pack_host("127.0.0.1", 2), queue_offset=i,
    )


def test_headers_are_the_properties_in_kafka_shape() -> None:
    props = [{"UNIQ_KEY": f"{i:032X}", "n": str(i), "é": "ü" * i} for i in range(5)]
    batch = decode_to_batch(b"".join(record(i, p) for i, p in enumerate(props)), "broker-a")
    assert batch.schema.equals(ARROW_SCHEMA)
    out = with_headers(batch)
    assert out.schema.equals(ARROW_SCHEMA_WITH_HEADERS)
    assert out.select(list(ARROW_SCHEMA.names)).equals(batch)
    for row, expected in zip(out.column(12).to_pylist(), props, strict=True):
        assert {h["key"]: h["value"] for h in row} == {
            k: v.encode() for k, v in expected.items()
        }
    # A slice and a filtered batch (what the reader hands on) keep their own rows' headers.
    part = with_headers(batch.slice(2, 2))
    assert [dict((h["key"], h["value"]) for h in r)["n"] for r in part.column(12).to_pylist()] \
        == [b"2", b"3"]


def test_a_message_without_properties_has_null_headers() -> None:
    keys = pa.array([[("a", "1")], [], [("b", "2"), ("c", "3")]], ARROW_SCHEMA.field(8).type)
    columns = [keys if f.name == "properties" else pa.nulls(3, f.type) for f in ARROW_SCHEMA]
    batch = pa.RecordBatch.from_arrays(columns, names=ARROW_SCHEMA.names)
    headers = with_headers(_as_schema(batch))
    assert headers.column(12).to_pylist() == [
        [{"key": "a", "value": b"1"}], None,
        [{"key": "b", "value": b"2"}, {"key": "c", "value": b"3"}],
    ]


def _as_schema(batch: pa.RecordBatch) -> pa.RecordBatch:
    # Null placeholders in non-nullable columns: only `properties` matters to with_headers.
    return pa.RecordBatch.from_arrays(batch.columns, schema=ARROW_SCHEMA)


def test_data_loss_error_names_the_queue_and_the_missing_range() -> None:
    err = DataLossError("orders", "broker-a", 3, 10, 130)
    assert (err.topic, err.broker, err.queue_id) == ("orders", "broker-a", 3)
    assert (err.wanted, err.first_available) == (10, 130)
    assert err.queue == "orders@broker-a:3"
    text = str(err)
    assert "topic 'orders', broker 'broker-a', queue 3" in text
    assert "offsets 10..129" in text and "failOnDataLoss=false" in text
