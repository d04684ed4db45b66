"""The sink's encoder (sink_encode.encode_rows) against its twin, the Message path
(writer.row_messages + encode_batch): the same bytes for the same rows; and its bodies sent by
Producer.send_encoded_batch to a real broker read back as the rows. No Spark JVM."""

from __future__ import annotations

from typing import Any

import pytest

pa = pytest.importorskip("pyarrow")
pytest.importorskip("pyspark")

from ferrymq import AdminClient, Producer  # noqa: E402
from ferrymq.client.errors import MessageValidationError  # noqa: E402
from ferrymq.common.record import encode_batch  # noqa: E402
from ferrymq.spark.errors import OptionError  # noqa: E402
from ferrymq.spark.options import WriterOptions, writer_options  # noqa: E402
from ferrymq.spark.sink_encode import MAX_BATCH_BYTES, encode_rows, key_prefix, uniq_key  # noqa: E402
from ferrymq.spark.writer import chunks, row_messages  # noqa: E402

pytestmark = pytest.mark.shared_standalone
PREFIX = key_prefix("query", 7, 1)


def twin(options: Any, batch: Any, first_row: int) -> list[tuple[str, bytes, tuple[str, ...]]]:
    messages = row_messages(options, batch, PREFIX, first_row)
    return [(c[0].topic, encode_batch(c), tuple(m.uniq_key or "" for m in c))
            for c in chunks(options, messages)]


def encoded(options: Any, batch: Any, first_row: int) -> list[tuple[str, bytes, tuple[str, ...]]]:
    out = []
    for e in encode_rows(options, batch, PREFIX, first_row):
        keys = tuple(e.uniq_ids.split(","))
        assert e.rows == len(keys) and e.first_key == keys[0]
        out.append((e.topic, e.body, keys))
    return sorted(out, key=lambda e: (e[0], e[2]))


def test_the_encoder_writes_the_bytes_of_the_message_path() -> None:
    options = writer_options({"topic": "out", "sendBatchSize": "3"})
    plain = pa.RecordBatch.from_pydict({"body": [f"row-{i}".encode() for i in range(8)]})
    assert encoded(options, plain, 100) == twin(options, plain, 100)
    assert list(encode_rows(options, plain.slice(0, 0), PREFIX, 0)) == []
    assert encoded(options, plain.slice(3, 4), 9) == twin(options, plain.slice(3, 4), 9)
    assert [len(e[2]) for e in encoded(options, plain, 100)] == [3, 3, 2]
    # String bodies, keys and tags with nulls and empties, a topic column with nulls.
    rich = pa.RecordBatch.from_pydict({
        "body": ["a", "bé", "c", "d", "e"],
        "keys": ["k0", None, "", "k3 k3b", "k4"],
        "tags": [None, "t1", "t2", "", "t4"],
        "topic": [None, "other", "out", "other", None],
    })
    assert encoded(options, rich, 0) == sorted(twin(options, rich, 0), key=lambda e: (e[0], e[2]))
    assert encoded(options, rich, 0)[0][2][0] == uniq_key("query", 7, 1, 1)
    # Chunks cut by bytes as well as by rows.
    big = pa.RecordBatch.from_pydict({"body": [bytes([65 + i]) * (MAX_BATCH_BYTES // 3) for i in range(5)]})
    wide = writer_options({"topic": "out"})
    assert encoded(wide, big, 0) == twin(wide, big, 0)
    assert [len(e[2]) for e in encoded(wide, big, 0)] == [2, 2, 1]


def test_the_encoder_refuses_what_the_producer_would() -> None:
    options = writer_options({"topic": "out"})
    for batch, name in [
        (pa.RecordBatch.from_pydict({"body": pa.array([b"x", None], pa.binary())}), "body"),
        (pa.RecordBatch.from_pydict({"body": [b"x", b""]}), "body"),
        (pa.RecordBatch.from_pydict({"body": [b"x"], "keys": ["a\x01b"]}), "keys"),
        (pa.RecordBatch.from_pydict({"body": [b"x"], "tags": ["a\x02"]}), "tags"),
        (pa.RecordBatch.from_pydict({"body": [b"x", b"y"], "keys": ["k", "k" * 40_000]}), "keys"),
    ]:
        with pytest.raises(OptionError) as caught:
            list(encode_rows(options, batch, PREFIX, 0))
        assert caught.value.option == name
    no_topic = WriterOptions("127.0.0.1:9876", None, "g", 10)
    with pytest.raises(OptionError) as caught:
        list(encode_rows(no_topic, pa.RecordBatch.from_pydict({"body": [b"x"]}), PREFIX, 0))
    assert caught.value.option == "topic"
    with pytest.raises(OptionError) as caught:
        list(encode_rows(no_topic, pa.RecordBatch.from_pydict({"body": [b"x", b"y"], "topic": ["t", None]}),
                         PREFIX, 5))
    assert caught.value.option == "topic" and "row 6" in str(caught.value)


def test_encoded_batches_arrive_as_their_rows(standalone: Any) -> None:
    options = writer_options({"topic": "sink-encode", "sendBatchSize": "4"})
    batch = pa.RecordBatch.from_pydict({
        "body": [f"m{i}" for i in range(6)], "keys": [f"k{i}" for i in range(6)],
        "tags": ["even" if i % 2 == 0 else None for i in range(6)],
    })
    with (
        AdminClient(standalone.namesrv) as admin,
        Producer("sink-encode", standalone.namesrv) as producer,
    ):
        admin.create_topic("sink-encode", 1)
        sent = [producer.send_encoded_batch(e.topic, e.body, e.uniq_ids)
                for e in encode_rows(options, batch, PREFIX, 0)]
        assert [r.msg_id for r in sent] == [",".join(uniq_key("query", 7, 1, i) for i in rows)
                                            for rows in (range(4), range(4, 6))]
        mq = admin.message_queues("sink-encode")[0]
        got = admin.pull(mq, 0, 32).messages
        assert [(m.body, m.keys, m.tags, m.msg_id) for m in got] == [
            (f"m{i}".encode(), f"k{i}", "even" if i % 2 == 0 else None, uniq_key("query", 7, 1, i))
            for i in range(6)]
        with pytest.raises(MessageValidationError):
            producer.send_encoded_batch("%RETRY%sink-encode", b"x", "A")
        with pytest.raises(MessageValidationError):
            producer.send_encoded_batch("sink-encode", b"", "")
