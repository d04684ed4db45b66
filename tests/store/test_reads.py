"""Reads: get_messages statuses and nextBeginOffset as RocketMQ's getMessage, tag filtering,
contiguous reads, time search, key and unique-key lookups."""

from __future__ import annotations

import struct
from collections.abc import Callable
from pathlib import Path

import pytest
from store_util import FakeClock, msg, open_store, queue_rebuilt_by_recovery

from ferrymq.common.names import java_string_hash
from ferrymq.common.record import decode_records, locate
from ferrymq.common.record.layout import POS_QUEUEOFFSET
from ferrymq.store import GetStatus, MessageStore, PutStatus
from ferrymq.store.reads import FILTER_SCAN_ENTRIES


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def store(tmp_path: Path, clock: FakeClock) -> MessageStore:
    s = open_store(tmp_path / "s", clock=clock)
    yield s  # type: ignore[misc]
    s.shutdown()


def test_statuses_and_corrections(store: MessageStore) -> None:
    r = store.reads.get_messages("nope", 0, 5, 32)
    assert (r.status, r.next_begin_offset) == (GetStatus.NO_MATCHED_LOGIC_QUEUE, 0)
    store.put_messages([msg("T", 0, bytes([i])) for i in range(10)])
    r = store.reads.get_messages("T", 0, 0, 4)
    assert (r.status, r.count, r.next_begin_offset, r.min_offset, r.max_offset) == (
        GetStatus.FOUND, 4, 4, 0, 10)
    assert [m.body for m in decode_records(r.data)] == [bytes([i]) for i in range(4)]
    r = store.reads.get_messages("T", 0, 10, 4)
    assert (r.status, r.next_begin_offset) == (GetStatus.OFFSET_OVERFLOW_ONE, 10)
    r = store.reads.get_messages("T", 0, 11, 4)
    # min offset is 0, so RocketMQ corrects to 0 rather than to max
    assert (r.status, r.next_begin_offset) == (GetStatus.OFFSET_OVERFLOW_BADLY, 0)
    r = store.reads.get_messages("T", 0, 9, 100)
    assert (r.status, r.count, r.next_begin_offset) == (GetStatus.FOUND, 1, 10)


def test_max_bytes_returns_at_least_one(store: MessageStore) -> None:
    store.put_messages([msg(body=b"x" * 500) for _ in range(5)])
    r = store.reads.get_messages("T", 0, 0, 32, max_bytes=100)
    assert (r.count, r.next_begin_offset) == (1, 1)
    r = store.reads.get_messages("T", 0, 0, 32, max_bytes=1500)
    assert r.count == 2


def test_tag_filter(store: MessageStore) -> None:
    tags = ["A", "B", "A", "C", "B", "A"]
    store.put_messages([msg(tags=t, body=t.encode() + bytes([i])) for i, t in enumerate(tags)])
    a = java_string_hash("A")
    r = store.reads.get_messages("T", 0, 0, 32, tag_filter=lambda code: code == a)
    assert r.status is GetStatus.FOUND and r.count == 3
    assert [m.body for m in decode_records(r.data)] == [b"A\x00", b"A\x02", b"A\x05"]
    assert r.next_begin_offset == 6
    r = store.reads.get_messages("T", 0, 0, 2, tag_filter=lambda code: code == a)
    assert (r.count, r.next_begin_offset) == (2, 3)
    r = store.reads.get_messages("T", 0, 0, 32, tag_filter=lambda code: False)
    # nothing matched: the offset still moves past what was scanned
    assert (r.status, r.count, r.next_begin_offset) == (GetStatus.NO_MATCHED_MESSAGE, 0, 6)


def _even(buf: bytes, start: int, end: int) -> bool:
    """A record filter: records whose body starts with an even byte."""
    return buf[locate(buf, start, end)[2]] % 2 == 0


def test_record_filter_keeps_matching_records_and_moves_past_the_rest(store: MessageStore) -> None:
    store.put_messages([msg(body=bytes([i])) for i in range(100)])
    r = store.reads.get_messages("T", 0, 0, 10, record_filter=_even)
    assert r.status is GetStatus.FOUND
    assert [m.body[0] for m in decode_records(r.data)] == list(range(0, 20, 2))
    # Stops at the record after the tenth kept, as RocketMQ checks a full batch before filtering.
    assert (r.count, r.next_begin_offset) == (10, 19)
    r = store.reads.get_messages("T", 0, 95, 32, record_filter=_even)
    assert [m.body[0] for m in decode_records(r.data)] == [96, 98]
    assert r.next_begin_offset == 100
    r = store.reads.get_messages("T", 0, 0, 32, record_filter=lambda b, s, e: False)
    assert (r.status, r.count, r.next_begin_offset) == (GetStatus.NO_MATCHED_MESSAGE, 0, 100)
    r = store.reads.get_messages("T", 0, 100, 32, record_filter=_even)
    assert (r.status, r.next_begin_offset) == (GetStatus.OFFSET_OVERFLOW_ONE, 100)


def test_record_filter_scans_at_most_a_tag_filters_window(store: MessageStore) -> None:
    n = FILTER_SCAN_ENTRIES + 50
    for i in range(0, n, 100):
        store.put_messages([msg(body=b"\x02" if j == n - 1 else b"\x01") for j in range(i, min(i + 100, n))])
    r = store.reads.get_messages("T", 0, 0, 32, record_filter=_even)
    assert (r.status, r.next_begin_offset) == (GetStatus.NO_MATCHED_MESSAGE, FILTER_SCAN_ENTRIES)
    r = store.reads.get_messages("T", 0, r.next_begin_offset, 32, record_filter=_even)
    assert (r.status, r.count, r.next_begin_offset) == (GetStatus.FOUND, 1, n)


def test_record_filter_respects_max_bytes(store: MessageStore) -> None:
    store.put_messages([msg(body=bytes([i % 2]) * 500) for i in range(10)])
    r = store.reads.get_messages("T", 0, 0, 32, max_bytes=1500, record_filter=_even)
    # 0 and 2 are kept; 3 would pass the byte limit, so the pull stops there even though it
    # would not be kept (the limit is checked first, as in RocketMQ).
    assert r.count == 2 and r.next_begin_offset == 3


def test_interleaved_queues_read_back_exactly(store: MessageStore) -> None:
    for i in range(30):
        store.put_messages([msg("T", i % 3, f"{i}".encode()), msg("U", 0, b"noise" * 10)])
    r = store.reads.get_messages("T", 1, 0, 100)
    assert [m.body for m in decode_records(r.data)] == [f"{i}".encode() for i in range(1, 30, 3)]
    # a queue written in batches is one contiguous slice
    res = store.put_messages([msg("V", 0, bytes([i]) * 40) for i in range(20)])
    r = store.reads.get_messages("V", 0, 0, 100)
    first = res.messages[0].phys_offset
    assert r.data == store.commitlog.read(first, res.end_offset - first)


def test_offset_by_time(store: MessageStore, clock: FakeClock) -> None:
    assert store.reads.get_offset_by_time("T", 0, 0) == 0
    base = clock.now
    for i in range(10):
        store.put_messages([msg(body=bytes([i]))])
        clock.advance(1000 if i != 4 else 0)  # offsets 4 and 5 share a store time
    assert store.reads.get_offset_by_time("T", 0, base - 1) == 0
    assert store.reads.get_offset_by_time("T", 0, base) == 0
    assert store.reads.get_offset_by_time("T", 0, base + 1) == 1
    assert store.reads.get_offset_by_time("T", 0, base + 4000) == 4
    assert store.reads.get_offset_by_time("T", 0, base + 4001) == 6
    assert store.reads.get_offset_by_time("T", 0, base + 8000) == 9
    assert store.reads.get_offset_by_time("T", 0, base + 10**9) == 10
    assert store.reads.get_store_time("T", 0, 3) == base + 3000
    assert store.reads.get_store_time("T", 0, 10) == -1
    assert store.reads.get_earliest_store_time("T", 0) == base
    assert store.reads.get_earliest_store_time("T", 9) == -1


def test_store_time_never_goes_back(store: MessageStore, clock: FakeClock) -> None:
    a = store.put_messages([msg()])
    clock.advance(-5000)
    b = store.put_messages([msg()])
    assert b.messages[0].store_timestamp == a.messages[0].store_timestamp


def test_key_and_uniq_lookups(store: MessageStore, clock: FakeClock) -> None:
    t0 = clock.now
    r1 = store.put_messages([msg(keys="order-1 user-9", uniq="U1"), msg(keys="order-2", uniq="U2")])
    clock.advance(60_000)
    r2 = store.put_messages([msg(keys="order-1", uniq="U3"), msg("Other", 0, keys="order-1")])
    p = [a.phys_offset for a in r1.messages + r2.messages]
    assert store.reads.query_by_key("T", "order-1", 10, 0, 0) == [p[0], p[2]]
    assert store.reads.query_by_key("T", "order-1", 1, 0, 0) == [p[2]]  # newest first, then sorted
    assert store.reads.query_by_key("T", "order-1", 10, t0 + 1, 2**62) == [p[2]]
    assert store.reads.query_by_key("T", "order-1", 10, 0, t0) == [p[0]]
    assert store.reads.query_by_key("T", "user-9", 10, 0, 0) == [p[0]]
    assert store.reads.query_by_key("Other", "order-1", 10, 0, 0) == [p[3]]
    assert store.reads.query_by_key("T", "missing", 10, 0, 0) == []
    assert store.reads.query_by_uniq_key("T", "U2") == [p[1]]
    assert store.reads.query_by_uniq_key("T", "order-1") == []  # a KEYS value is not a unique key
    assert store.reads.query_by_uniq_key("Other", "U2") == []


def test_index_rolls_files(tmp_path: Path) -> None:
    s = open_store(tmp_path / "s", index_max_entries=50)
    try:
        res = [s.put_messages([msg(uniq=f"K{i}")]) for i in range(200)]
        assert len(list((tmp_path / "s" / "index").iterdir())) >= 4
        for i in (0, 77, 199):
            assert s.reads.query_by_uniq_key("T", f"K{i}") == [res[i].messages[0].phys_offset]
    finally:
        s.shutdown()


def test_read_queue_entries_and_delete_queue(store: MessageStore, tmp_path: Path) -> None:
    res = store.put_messages([msg("D", 1, bytes([i])) for i in range(100)])
    entries = store.reads.read_queue_entries("D", 1, 60, 10)
    assert [e.queue_offset for e in entries] == list(range(60, 70))  # crosses a 64-entry file
    assert [e.phys_offset for e in entries] == [a.phys_offset for a in res.messages[60:70]]
    assert store.reads.read_queue_entries("D", 1, 95, 10)[-1].queue_offset == 99
    assert store.reads.read_queue_entries("nope", 0, 0, 10) == []
    store.delete_queue("D")
    assert "D" not in store.reads.queues()
    assert store.reads.get_max_offset("D", 1) == 0
    assert not (tmp_path / "s" / "consumequeue" / "D").exists()
    assert store.put_messages([msg("D", 1)]).messages[0].queue_offset == 0
    assert store.put_messages([msg("D", 1)]).status is PutStatus.PUT_OK


def _flip_queue_offset_field(store_dir: Path, phys: int, value: int) -> None:
    seg = sorted((store_dir / "commitlog").iterdir())[0]
    with open(seg, "r+b") as f:
        f.seek(phys + POS_QUEUEOFFSET)
        f.write(struct.pack(">q", value))


def test_a_filtered_pull_stops_at_the_entry_not_at_a_records_queueoffset_field(
        tmp_path: Path) -> None:
    """A record-filtered (SQL92) pull that filled its count took nextBeginOffset from the next
    record's QUEUEOFFSET field, which no check compares and the CRC does not cover: damaged to
    1000, the consumer skipped every record after it."""
    store = open_store(tmp_path / "s", scrub_bytes_per_s=0)
    try:
        phys = [store.put_messages([msg("T", 0, b"m%d" % i)]).messages[0].phys_offset
                for i in range(10)]
        _flip_queue_offset_field(tmp_path / "s", phys[3], 1000)
        got = store.reads.get_messages("T", 0, 0, 3, record_filter=lambda _b, _s, _e: True)
        assert [m.body for m in decode_records(got.data)] == [b"m0", b"m1", b"m2"]
        assert got.next_begin_offset == 3
    finally:
        store.shutdown()


def test_a_filtered_pull_of_a_queue_recovery_rebuilt_skips_nothing(tmp_path: Path) -> None:
    """No damage: B/0's queue files were lost and recovery rebuilt the queue, so its records
    sit at queue offsets 0 and 1 while their QUEUEOFFSET fields say 4 and 5. The filtered pull
    answered nextBeginOffset 5, past the queue's end, and L01 was never delivered."""
    image, _late = queue_rebuilt_by_recovery(tmp_path, 2)
    store = open_store(image, scrub_bytes_per_s=0)
    try:
        keep_all: Callable[[bytes, int, int], bool] = lambda _b, _s, _e: True  # noqa: E731
        first = store.reads.get_messages("B", 0, 0, 1, record_filter=keep_all)
        assert [m.body for m in decode_records(first.data)] == [b"L00" * 10]
        assert first.next_begin_offset == 1
        second = store.reads.get_messages("B", 0, 1, 1, record_filter=keep_all)
        assert [m.body for m in decode_records(second.data)] == [b"L01" * 10]
    finally:
        store.shutdown()
