"""The executor-side reader against a real standalone broker, without Spark's JVM: tag-filtered
reads (the broker filters by tag hash, the reader by the tag itself, a filtered answer may
reach past the slice it was pulled for, and no offset is read twice or skipped), and SQL92
reads (the broker evaluates the selector; the reader keeps each slice exact)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from concurrent.futures import Future
from typing import Any

import pytest

pytest.importorskip("pyarrow")
pytest.importorskip("pyspark")

from conftest import Standalone
from ferrymq import AdminClient, Message, Producer
from ferrymq.client.results import RawPullResult
from ferrymq.common.message import MessageQueue
from ferrymq.common.record import decode_records
from ferrymq.spark import read as R
from ferrymq.spark.offsets import QueueKey
from ferrymq.spark.options import parse_sub_expression, parse_tags

# "Aa" and "BB" have the same Java hash code: the broker cannot tell them apart.
TAGS = ["Aa", "BB", "c", None, "d", "c", "c", "c"]


@pytest.fixture
def admin(standalone: Standalone) -> Iterator[AdminClient]:
    with AdminClient(standalone.namesrv) as client:
        yield client


def produce(namesrv: str, topic: str, n: int, *, start: int = 0) -> None:
    with Producer("spark-broker-test", namesrv) as producer:
        for lo in range(start, start + n, 200):
            producer.send_batch(
                [
                    Message(topic, b"m%d" % i, tags=TAGS[i % len(TAGS)])
                    for i in range(lo, min(lo + 200, start + n))
                ]
            )


class SpyAdmin:
    """The real client, recording the tags of every message the broker sent."""

    def __init__(self, admin: AdminClient) -> None:
        self.admin = admin
        self.sent_tags: list[str | None] = []

        self.seen: list[Callable[[MessageQueue, RawPullResult], None]] = [self._tags]

    def _tags(self, mq: MessageQueue, res: RawPullResult) -> None:
        self.sent_tags.extend(m.tags for m in decode_records(res.body, broker=mq.broker_name))

    def submit_pull_raw(
        self, mq: MessageQueue, offset: int, max_nums: int = 32, **kw: Any
    ) -> Future[RawPullResult]:
        """The real client's pull in flight; the answer is looked at before the reader
        gets it."""
        out: Future[RawPullResult] = Future()

        def done(pulled: Future[RawPullResult]) -> None:
            if out.cancelled():  # the reader re-planned; nobody waits for this answer
                return
            try:
                res = pulled.result()
                for look in self.seen:
                    look(mq, res)
            except BaseException as exc:  # cancelled or failed: the reader sees why
                out.set_exception(exc)
            else:
                out.set_result(res)

        self.admin.submit_pull_raw(mq, offset, max_nums, **kw).add_done_callback(done)
        return out


@pytest.mark.parametrize(("lo", "hi"), [(0, 3000), (101, 2899)])
def test_tag_filtered_read(standalone: Standalone, admin: AdminClient, lo: int, hi: int) -> None:
    admin.create_topic("tagged", 1)
    produce(standalone.namesrv, "tagged", 3000)
    key = QueueKey("tagged", "broker-a", 0)
    spy = SpyAdmin(admin)
    expression, tags = parse_tags("Aa || d")
    # 7 per pull: the broker scans far past 7 offsets for 7 matches, beyond the planned slice.
    part = R.QueueRange(
        standalone.namesrv, key, lo, hi, True, pull_batch_size=7, rows_per_batch=50,
        expression=expression, tags=tags,
    )
    rows: list[dict[str, Any]] = []
    for batch in R._read(part, spy):
        rows.extend(batch.select(["queue_offset", "tags"]).to_pylist())
    offsets = [r["queue_offset"] for r in rows]
    assert offsets == [i for i in range(lo, hi) if TAGS[i % len(TAGS)] in ("Aa", "d")]
    assert {r["tags"] for r in rows} == {"Aa", "d"}
    # The broker did the filtering (by hash: "BB" came along, "c" and untagged never did);
    # the reader dropped "BB".
    assert set(spy.sent_tags) == {"Aa", "BB", "d"}


@pytest.mark.parametrize(("lo", "hi"), [(0, 2000), (37, 1801)])
def test_sql92_filtered_read(standalone: Standalone, admin: AdminClient, lo: int, hi: int) -> None:
    admin.create_topic("priced", 1)
    with Producer("spark-broker-test", standalone.namesrv) as producer:
        for start in range(0, 2000, 200):
            producer.send_batch([Message("priced", b"m%d" % i, properties={"price": str(i % 97)})
                                 for i in range(start, start + 200)])
    key = QueueKey("priced", "broker-a", 0)
    spy = SpyAdmin(admin)
    bodies: list[bytes] = []
    spy.seen.append(
        lambda mq, res: bodies.extend(
            m.body for m in decode_records(res.body, broker=mq.broker_name)
        )
    )
    expression, tags, expression_type = parse_sub_expression("price >= 90", "SQL92")
    part = R.QueueRange(
        standalone.namesrv, key, lo, hi, True, pull_batch_size=5, rows_per_batch=50,
        expression=expression, tags=tags, expression_type=expression_type,
    )
    rows: list[dict[str, Any]] = []
    for batch in R._read(part, spy):
        rows.extend(batch.select(["queue_offset", "properties"]).to_pylist())
    assert [r["queue_offset"] for r in rows] == [i for i in range(lo, hi) if i % 97 >= 90]
    # The broker sent nothing else (small pulls reach past their slice, never below the filter).
    assert bodies and all(int(b[1:]) % 97 >= 90 for b in bodies)
