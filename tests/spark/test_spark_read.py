"""The executor-side range reader against a fake broker: windowed pulls, short answers,
data loss with and without failOnDataLoss."""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import Future

import pytest

from ferrymq.client.results import PullStatus, RawPullResult
from ferrymq.common.message import MessageQueue
from ferrymq.common.props import properties_to_string
from ferrymq.common.record import encode_record, pack_host
from ferrymq.spark import read as R
from ferrymq.spark.errors import DataLossError
from ferrymq.spark.offsets import QueueKey

KEY = QueueKey("t", "broker-a", 0)


def rec(offset: int) -> bytes:
    return encode_record(
        topic=b"t",
        queue_id=0,
        flag=0,
        body=b"m%d" % offset,
        properties=properties_to_string({"UNIQ_KEY": f"{offset:032X}"}).encode(),
        sys_flag=0,
        born_timestamp=1,
        born_host=pack_host("127.0.0.1", 1),
        store_timestamp=2,
        store_host=pack_host("127.0.0.1", 2),
        queue_offset=offset,
    )


class FakeAdmin:
    """Messages [low, high); answers at most `cap` messages per pull (a short answer)."""

    def __init__(self, low: int, high: int, cap: int = 10**9) -> None:
        self.low, self.high, self.cap = low, high, cap
        self.calls: list[tuple[int, int]] = []

    def pull_raw(
        self, mq: MessageQueue, offset: int, max_nums: int, *, expression: str = "*",
        expression_type: str = "TAG",
    ) -> RawPullResult:
        # Filtering (tags, SQL92) is the broker's, tested end to end.
        assert expression == "*" and expression_type == "TAG"
        self.calls.append((offset, max_nums))
        if offset < self.low:
            return RawPullResult(PullStatus.OFFSET_ILLEGAL, b"", offset, self.low, self.high, "b")
        if offset >= self.high:
            return RawPullResult(PullStatus.NO_NEW_MSG, b"", offset, self.low, self.high, "b")
        end = min(offset + max_nums, self.high, offset + self.cap)
        body = b"".join(rec(o) for o in range(offset, end))
        return RawPullResult(PullStatus.FOUND, body, end, self.low, self.high, "b")

    def submit_pull_raw(
        self, mq: MessageQueue, offset: int, max_nums: int = 32, *, expression: str = "*",
        expression_type: str = "TAG",
    ) -> Future[RawPullResult]:
        future: Future[RawPullResult] = Future()
        future.set_result(
            self.pull_raw(mq, offset, max_nums, expression=expression,
                          expression_type=expression_type)
        )
        return future


def read(admin: FakeAdmin, start: int, end: int, fail: bool = True) -> list[int]:
    part = R.QueueRange("ns", KEY, start, end, fail, pull_batch_size=7, rows_per_batch=20)
    out: list[int] = []
    for batch in R._read(part, admin):
        out.extend(batch.column(3).to_pylist())
    return out


def test_every_offset_once_in_order_with_pulls_in_flight() -> None:
    admin = FakeAdmin(0, 1000)
    assert read(admin, 5, 105) == list(range(5, 105))
    assert all(n <= 7 for _o, n in admin.calls)


def test_short_answers_are_filled_in() -> None:
    admin = FakeAdmin(0, 1000, cap=3)
    assert read(admin, 0, 50) == list(range(50))


def test_deleted_offsets_fail_or_are_skipped() -> None:
    with pytest.raises(DataLossError) as info:
        read(FakeAdmin(30, 100), 10, 60)
    assert info.value.first_available == 30
    assert read(FakeAdmin(30, 100), 10, 60, fail=False) == list(range(30, 60))


def test_a_truncated_queue_fails_or_ends_early() -> None:
    with pytest.raises(DataLossError):
        read(FakeAdmin(0, 40), 0, 60)
    assert read(FakeAdmin(0, 40), 0, 60, fail=False) == list(range(40))


def test_an_abandoned_read_stops_its_puller() -> None:
    admin = FakeAdmin(0, 10_000)
    part = R.QueueRange("ns", KEY, 0, 10_000, True, pull_batch_size=7, rows_per_batch=20)
    it: Iterator[object] = R._read(part, admin)
    next(it)
    it.close()  # type: ignore[attr-defined]
    calls = len(admin.calls)
    assert calls < 10_000 // 7  # it did not go on pulling the whole range
