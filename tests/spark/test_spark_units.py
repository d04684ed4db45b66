"""Connector pieces that need neither Spark's JVM nor a broker: schema, decoding, options,
offsets, admission control, UNIQ_KEY."""

from __future__ import annotations

import zlib

import pytest

pa = pytest.importorskip("pyarrow")
pytest.importorskip("pyspark")

from pyspark.sql.pandas.types import to_arrow_schema  # noqa: E402

from ferrymq.common.props import properties_to_string  # noqa: E402
from ferrymq.common.record import decode_records, encode_record, pack_host  # noqa: E402
from ferrymq.spark import decode  # noqa: E402
from ferrymq.spark.admission import TriggerGate, split_limit  # noqa: E402
from ferrymq.spark.decode import decode_to_batch, messages_to_batch, record_starts  # noqa: E402
from ferrymq.spark.errors import OptionError  # noqa: E402
from ferrymq.spark.offsets import QueueKey, SourceOffset, parse_queue_json  # noqa: E402
from ferrymq.spark.options import (  # noqa: E402
    StartKind,
    parse_duration_ms,
    reader_options,
    writer_options,
)
from ferrymq.spark.schema import ARROW_SCHEMA, SPARK_SCHEMA  # noqa: E402
from ferrymq.spark.writer import uniq_key  # noqa: E402


def record(
    i: int,
    *,
    body: bytes | None = None,
    props: dict[str, str] | None = None,
    compress: bool = False,
    v6: bool = False,
    topic: bytes = b"orders",
) -> bytes:
    body = body if body is not None else b"body-%d" % i
    if props is None:
        props = {"UNIQ_KEY": f"{i:032X}", "KEYS": f"k{i}", "WAIT": "true"}
        if i % 2:
            props["TAGS"] = f"t{i}"
    sys_flag = 0
    if compress:
        body, sys_flag = zlib.compress(body), 1
    host = pack_host("::1", 1) if v6 else pack_host("127.0.0.1", 5555)
    return encode_record(
        topic=topic,
        queue_id=3,
        flag=0,
        body=body,
        properties=properties_to_string(props).encode(),
        sys_flag=sys_flag,
        born_timestamp=1_700_000_000_000 + i,
        born_host=host,
        store_timestamp=1_700_000_000_500 + i,
        store_host=pack_host("127.0.0.1", 10911),
        reconsume_times=i % 3,
        queue_offset=100 + i,
        physical_offset=1000 * i,
    )


def exact(buf: bytes) -> pa.RecordBatch:
    return messages_to_batch(decode_records(buf, broker="broker-a"), "broker-a")


def test_arrow_schema_is_what_spark_checks() -> None:
    assert to_arrow_schema(SPARK_SCHEMA, timezone="UTC").equals(ARROW_SCHEMA)
    assert [f.name for f in SPARK_SCHEMA.fields] == ARROW_SCHEMA.names


@pytest.mark.parametrize("n", [1, 7, 1024, 3000])
def test_fast_decoding_equals_the_exact_codec(n: int) -> None:
    buf = b"".join(record(i, body=bytes([i % 251]) * (i % 300)) for i in range(n))
    # An empty body is legal on the wire; keep one to cover zero-length gathers.
    fast = decode.fast_batch(buf, "broker-a", None)  # no fallback allowed here
    assert fast.schema.equals(ARROW_SCHEMA)
    assert fast.equals(exact(buf))
    if n == 1:
        return
    row = fast.slice(1, 1).to_pylist()[0]
    assert row["msg_id"] == f"{1:032X}" and row["keys"] == "k1" and row["tags"] == "t1"
    assert row["queue_offset"] == 101 and row["queue_id"] == 3 and row["reconsume_times"] == 1
    assert row["store_timestamp"].timestamp() == pytest.approx(1_700_000_000.501)


def test_batches_of_every_size_decode_alike() -> None:
    # The gather indexes are kept at the largest size seen and sliced: a small batch after a
    # large one, and sizes just past a power of two, read the same as the exact path.
    for n in (5000, 3, 4097, 1, 4096, 2):
        buf = b"".join(record(i) for i in range(n))
        assert decode.fast_batch(buf, "broker-a", None).equals(exact(buf)), n


@pytest.mark.parametrize(
    "special",
    [
        {"compress": True},
        {"v6": True},
        {"props": {}},
        {"props": {"KEYS": "no-uniq-key"}},
        {"props": {"UNIQ_KEY": "X", "Ü": "ö\u00e9"}},
    ],
)
def test_unusual_records_fall_back_to_the_exact_path(special: dict[str, object]) -> None:
    buf = record(0) + record(1, **special) + record(2)  # type: ignore[arg-type]
    batch = decode_to_batch(buf, "broker-a")
    assert batch.schema.equals(ARROW_SCHEMA)
    assert batch.equals(exact(buf))
    if special.get("compress"):
        assert batch.column(7)[1].as_py() == b"body-1"


def test_truncated_response_is_an_error() -> None:
    buf = record(0) + record(1)
    with pytest.raises(ValueError):
        record_starts(buf[:-3])
    assert decode_to_batch(b"", "b").num_rows == 0


def test_options_parse_and_refuse() -> None:
    opts = reader_options(
        {"Topic": "a, b,a", "group": "g", "maxOffsetsPerTrigger": "10"}, streaming=True
    )
    assert opts.topics == ("a", "b") and opts.starting.kind is StartKind.GROUP
    assert opts.max_offsets_per_trigger == 10 and opts.fail_on_data_loss
    assert reader_options({"topic": "a"}, streaming=True).starting.kind is StartKind.LATEST
    assert reader_options({"topic": "a"}, streaming=False).starting.kind is StartKind.EARLIEST
    js = reader_options(
        {"topic": "a", "startingOffsets": '{"a": {"broker-a": {"0": 5, "1": -2}}}'},
        streaming=True,
    )
    assert js.starting.offsets == {
        QueueKey("a", "broker-a", 0): 5,
        QueueKey("a", "broker-a", 1): -2,
    }
    ts = reader_options(
        {"topic": "a", "startingOffsetsByTimestamp": "1700000000000"}, streaming=False
    )
    assert ts.starting.kind is StartKind.TIMESTAMP and ts.starting.timestamp == 1_700_000_000_000
    for bad in (
        {},
        {"topic": "bad topic"},
        {"topic": "a", "startingOffsets": "group"},
        {"topic": "a", "startingOffsets": "{nope"},
        {"topic": "a", "maxOffsetsPerTrigger": "0"},
        {"topic": "a", "failOnDataLoss": "maybe"},
    ):
        with pytest.raises(OptionError):
            reader_options(bad, streaming=True)
    assert writer_options({"topic": "out"}).topic == "out"


def test_trigger_options_parse_and_refuse() -> None:
    opts = reader_options(
        {"topic": "a", "minOffsetsPerTrigger": "100", "maxOffsetsPerTrigger": "100"},
        streaming=True,
    )
    assert opts.min_offsets_per_trigger == 100
    assert opts.max_trigger_delay_ms == 15 * 60_000  # Kafka's default
    assert (
        reader_options(
            {"topic": "a", "minOffsetsPerTrigger": "5", "MaxTriggerDelay": "30s"}, streaming=True
        ).max_trigger_delay_ms
        == 30_000
    )
    for text, ms in (("100ms", 100), ("30s", 30_000), ("15m", 900_000), ("2 h", 7_200_000),
                     ("1d", 86_400_000), ("250", 250), ("3min", 180_000)):
        assert parse_duration_ms("maxTriggerDelay", text) == ms
    for bad_text in ("-5s", "5x", "", "s", "1.5s"):
        with pytest.raises(OptionError) as info:
            parse_duration_ms("maxTriggerDelay", bad_text)
        assert info.value.args and "maxTriggerDelay" in str(info.value)
    for bad in (
        {"topic": "a", "minOffsetsPerTrigger": "0"},
        {"topic": "a", "minOffsetsPerTrigger": "-3"},
        {"topic": "a", "minOffsetsPerTrigger": "50", "maxOffsetsPerTrigger": "10"},
        {"topic": "a", "minOffsetsPerTrigger": "5", "maxTriggerDelay": "soon"},
        {"topic": "a", "subExpression": "||"},
    ):
        with pytest.raises(OptionError):
            reader_options(bad, streaming=True)
    with pytest.raises(OptionError, match="streaming"):
        reader_options({"topic": "a", "minOffsetsPerTrigger": "5"}, streaming=False)


def test_tag_expression_option() -> None:
    every = reader_options({"topic": "a"}, streaming=True)
    assert every.sub_expression == "*" and every.tags == frozenset()
    star = reader_options({"topic": "a", "subExpression": " * "}, streaming=False)
    assert star.tags == frozenset()
    two = reader_options({"topic": "a", "subExpression": "red || blue ||"}, streaming=False)
    assert two.tags == frozenset({"red", "blue"})
    tag_type = {"topic": "a", "subExpression": "red", "expressionType": "tag"}
    assert reader_options(tag_type, streaming=False).tags == frozenset({"red"})


@pytest.mark.parametrize(
    ("bad", "option"),
    [
        ({"subExpression": "a > 5"}, "subExpression"),
        ({"subExpression": "color IN ('red')"}, "subExpression"),
        ({"subExpression": "a=1"}, "subExpression"),
        ({"subExpression": "TAGS is not null"}, "subExpression"),
        ({"subExpression": "red || *"}, "subExpression"),
        ({"subExpression": "a > 'x'", "expressionType": "SQL92"}, "subExpression"),
        ({"subExpression": " ", "expressionType": "sql92"}, "subExpression"),
        ({"subExpression": "a > 5", "expressionType": "XPATH"}, "expressionType"),
    ],
)
def test_selectors_without_sql92_or_invalid_ones_are_refused(bad: dict[str, str], option: str) -> None:
    with pytest.raises(OptionError, match=r"SQL92|cannot be combined|TAG or SQL92") as info:
        reader_options({"topic": "a", **bad}, streaming=True)
    assert info.value.option == option


def test_sql92_sub_expressions_are_taken() -> None:
    opts = reader_options({"topic": "a", "subExpression": "amount > 5 AND region = 'EU'",
                           "expressionType": "SQL92"}, streaming=False)
    assert (opts.sub_expression, opts.expression_type, opts.tags) == (
        "amount > 5 AND region = 'EU'", "SQL92", frozenset())


def test_max_partitions_groups_ranges_by_rows_and_keeps_every_range_once() -> None:
    from ferrymq.spark.planning import plan_partitions
    from ferrymq.spark.read import QueueRange, QueueRanges

    keys = [QueueKey("t", "broker-a", q) for q in range(8)]
    start = {k: 100 * k.queue_id for k in keys}
    sizes = [50, 10, 40, 0, 30, 30, 20, 20]
    end = {k: start[k] + n for k, n in zip(keys, sizes, strict=True)}
    base = {"namesrv": "127.0.0.1:9876", "topic": "t"}
    ranges = plan_partitions(reader_options(base, streaming=False), start, end)
    assert len(ranges) == 7 and all(isinstance(r, QueueRange) for r in ranges)
    opts = reader_options({**base, "maxPartitions": "3"}, streaming=False)
    groups = plan_partitions(opts, start, end)
    assert len(groups) == 3 and all(isinstance(g, QueueRanges) for g in groups)
    flat = [r for g in groups for r in g.ranges]  # type: ignore[union-attr]
    assert sorted(flat, key=lambda r: r.key) == ranges  # each range once, none split
    # Largest first into the emptiest group: 50+20, 40+20+10, 30+30.
    assert sorted(sum(r.end - r.start for r in g.ranges) for g in groups) == [60, 70, 70]  # type: ignore[union-attr]
    assert plan_partitions(opts, start, end) == groups  # the same plan every time
    assert len(plan_partitions(reader_options({**base, "maxPartitions": "16"}, streaming=False),
                               start, end)) == 7
    with pytest.raises(OptionError):
        reader_options({**base, "maxPartitions": "0"}, streaming=False)


def test_trigger_gate_waits_for_min_rows_or_the_delay() -> None:
    now = [1000.0]
    gate = TriggerGate(100, 30_000, clock=lambda: now[0])
    assert not gate.admit(0)  # nothing new: never a trigger, and the clock does not start
    assert gate.admit(5)  # the first trigger with data runs (Kafka's clock starts at zero)
    now[0] += 10
    assert not gate.admit(50)  # too few, and 10 s < 30 s since the last trigger
    assert gate.admit(100)  # enough rows
    now[0] += 29.999
    assert not gate.admit(99)
    now[0] += 0.001
    assert gate.admit(1)  # the delay has passed since the last trigger that ran
    assert not gate.admit(1)  # ... and the clock restarted there
    now[0] += 3600
    assert not gate.admit(0)  # idle time alone never triggers
    assert gate.admit(1)


def test_offsets_round_trip_through_json() -> None:
    q = {QueueKey("t", "broker-a", 0): 3, QueueKey("%DLQ%g", "broker-b", 1): 9}
    doc = SourceOffset(q, "127.0.0.1:9876", "g").to_json()
    import json

    back = SourceOffset.from_json(json.loads(json.dumps(doc)))
    assert back.queues == q and back.group == "g" and back.namesrv == "127.0.0.1:9876"
    assert parse_queue_json('{"t": {"broker-a": {"0": 3}}}') == {QueueKey("t", "broker-a", 0): 3}


def test_split_limit_is_proportional_exact_and_deterministic() -> None:
    a, b, c = (QueueKey("t", "b", i) for i in range(3))
    start = {a: 0, b: 100, c: 5}
    latest = {a: 900, b: 200, c: 5}  # backlogs 900, 100, 0
    ends = split_limit(start, latest, 100)
    assert ends == {a: 90, b: 110, c: 5}
    assert split_limit(start, latest, 10_000) == latest
    odd = split_limit({a: 0, b: 0, c: 0}, {a: 1, b: 1, c: 1}, 2)
    assert sum(odd.values()) == 2 and odd == split_limit({a: 0, b: 0, c: 0}, {a: 1, b: 1, c: 1}, 2)
    # never backwards, never past latest
    assert split_limit({a: 50}, {a: 40}, 5) == {a: 50}


def test_uniq_key_is_deterministic_and_shaped_like_rocketmq_ids() -> None:
    k = uniq_key("q", 3, 1, 7)
    assert k == uniq_key("q", 3, 1, 7) and len(k) == 32 and k == k.upper()
    assert len({uniq_key("q", b, p, r) for b in range(3) for p in range(3) for r in range(3)}) == 27


def test_stream_writer_commit_is_idempotent_and_abort_after_commit_is_harmless() -> None:
    from ferrymq.spark.writer import FerryMQStreamWriter, WriteReport

    w = FerryMQStreamWriter(writer_options({"topic": "out"}))
    msgs = [WriteReport(0, 3, "K")]
    w.commit(msgs, 4)
    w.commit(msgs, 4)  # replayed batch
    w.abort(msgs, 4)  # after a commit that took effect: nothing to undo
    assert w._committed == {4}
