"""Appends: layout on disk, segment roll-over with blank records, batches as one write,
queue offsets, message validation."""

from __future__ import annotations

import struct
from pathlib import Path

from store_util import SMALL_SEGMENT, msg, open_store, segment_files

from ferrymq.common.ids import create_offset_msg_id
from ferrymq.common.names import SCHEDULE_TOPIC, java_string_hash
from ferrymq.common.record import BLANK_MAGIC_CODE, decode_record, decode_records
from ferrymq.store import FileIO, PutStatus, StoreMessage


class CountingIO(FileIO):
    def __init__(self) -> None:
        self.writes: list[tuple[int, int]] = []

    def pwrite(self, fd: int, data: bytes | memoryview, pos: int) -> int:
        self.writes.append((pos, len(data)))
        return super().pwrite(fd, data, pos)


def test_layout_and_offsets(tmp_path: Path) -> None:
    store = open_store(tmp_path / "s")
    try:
        r1 = store.put_messages([msg("T", 0, b"a" * 10), msg("T", 0, b"b" * 20)])
        r2 = store.put_messages([msg("T", 1, b"c"), msg("U", 0, b"d")])
        assert r1.status is PutStatus.PUT_OK and r2.status is PutStatus.PUT_OK
        assert [a.queue_offset for a in r1.messages] == [0, 1]
        assert [a.queue_offset for a in r2.messages] == [0, 0]
        assert r1.messages[0].phys_offset == 0
        assert r1.messages[1].phys_offset == r1.messages[0].size
        assert r2.messages[0].phys_offset == r1.end_offset
        assert store.max_phy_offset == r2.end_offset
        assert r1.messages[1].offset_msg_id == create_offset_msg_id("127.0.0.1", 10911,
                                                                    r1.messages[1].phys_offset)
        root = tmp_path / "s"
        assert (root / "commitlog" / ("0" * 20)).stat().st_size == SMALL_SEGMENT
        assert (root / "consumequeue" / "T" / "0" / ("0" * 20)).stat().st_size == 40
        assert (root / "consumequeue" / "T" / "1" / ("0" * 20)).stat().st_size == 20
        assert (root / "abort").exists()
        raw = store.reads.read_record(r1.messages[1].phys_offset)
        assert raw is not None
        m = decode_record(raw, check_crc=True)
        assert (m.body, m.queue_offset, m.commit_log_offset) == (b"b" * 20, 1, len(raw) and
                                                                 r1.messages[1].phys_offset)
        assert m.store_host == "127.0.0.1:10911" and m.born_host == "10.0.0.7:4321"
        assert store.reads.queues() == {"T": [0, 1], "U": [0]}
    finally:
        store.shutdown()
    assert not (tmp_path / "s" / "abort").exists()
    assert (tmp_path / "s" / "checkpoint").exists()


def test_batch_is_one_contiguous_write(tmp_path: Path) -> None:
    io = CountingIO()
    store = open_store(tmp_path / "s", file_io=io)
    try:
        store.put_messages([msg(body=b"warm")])
        io.writes.clear()
        batch = [msg("T", i % 2, bytes([i]) * 100) for i in range(10)]
        res = store.put_messages(batch)
        assert res.status is PutStatus.PUT_OK
        log_writes = [w for w in io.writes if w[1] > 20 * 10]
        assert len(log_writes) == 1, io.writes
        assert log_writes[0][1] == res.end_offset - res.messages[0].phys_offset
        offsets = [a.phys_offset for a in res.messages]
        assert offsets == sorted(offsets)
        assert all(b.phys_offset == a.phys_offset + a.size
                   for a, b in zip(res.messages, res.messages[1:], strict=False))
        assert [a.queue_offset for a in res.messages] == [1, 0, 2, 1, 3, 2, 4, 3, 5, 4]
    finally:
        store.shutdown()


def test_roll_over_fills_segment_end_with_blank(tmp_path: Path) -> None:
    store = open_store(tmp_path / "s")
    body = b"x" * 1000
    try:
        results = [store.put_messages([msg(body=body), msg(body=body)]) for _ in range(100)]
        assert all(r.status is PutStatus.PUT_OK for r in results)
        files = segment_files(tmp_path / "s")
        assert len(files) >= 3
        assert [int(f.name) for f in files] == [i * SMALL_SEGMENT for i in range(len(files))]
        # every batch stayed inside one segment
        for r in results:
            first, last = r.messages[0].phys_offset, r.end_offset
            assert first // SMALL_SEGMENT == (last - 1) // SMALL_SEGMENT
        # the end of segment 0 is a blank record that reaches exactly the segment end
        seg0_records = [r for r in results if r.end_offset <= SMALL_SEGMENT]
        tail = seg0_records[-1].end_offset
        raw = files[0].read_bytes()
        size, magic = struct.unpack_from(">ii", raw, tail)
        assert magic == BLANK_MAGIC_CODE and size == SMALL_SEGMENT - tail
        # all 200 messages read back in queue order across the segments
        # (a pull stops at the end of a consume-queue file: 64 entries here)
        pulled = []
        offset = 0
        while offset < 200:
            got = store.reads.get_messages("T", 0, offset, 1000)
            assert got.count == min(64, 200 - offset)
            pulled += decode_records(got.data)
            offset = got.next_begin_offset
        assert [m.body for m in pulled] == [body] * 200
        assert [m.queue_offset for m in pulled] == list(range(200))
    finally:
        store.shutdown()


def test_illegal_messages_leave_no_trace(tmp_path: Path) -> None:
    store = open_store(tmp_path / "s", max_message_size=2000)
    try:
        store.put_messages([msg()])
        before = store.max_phy_offset
        cases = [
            ([msg(), msg(body=b"x" * 5000)], PutStatus.MESSAGE_ILLEGAL),
            ([msg(bad="a\x01b")], PutStatus.MESSAGE_ILLEGAL),
            ([StoreMessage("T" * 200, 0, b"x")], PutStatus.MESSAGE_ILLEGAL),
            ([], PutStatus.MESSAGE_ILLEGAL),
        ]
        for batch, status in cases:
            res = store.put_messages(batch)
            assert res.status is status, res
            assert res.reason
            assert store.max_phy_offset == before
        assert store.reads.get_max_offset("T", 0) == 1
        store2 = open_store(tmp_path / "p", max_message_size=1 << 20)
        try:
            big = store2.put_messages([msg(p="v" * 40000)])
            assert big.status is PutStatus.PROPERTIES_SIZE_EXCEEDED
        finally:
            store2.shutdown()
        huge = [msg(body=b"y" * 1900) for _ in range(40)]  # > one 64 KiB segment
        assert store.put_messages(huge).status is PutStatus.MESSAGE_ILLEGAL
        assert store.max_phy_offset == before
    finally:
        store.shutdown()


def test_schedule_topic_tag_code_is_delivery_time(tmp_path: Path) -> None:
    store = open_store(tmp_path / "s", message_delay_level="1s 5s 10s")
    try:
        res = store.put_messages([
            msg(SCHEDULE_TOPIC, 1, DELAY="2", REAL_TOPIC="T", REAL_QID="0"),
            msg(SCHEDULE_TOPIC, 2, DELAY="9"),  # beyond the last level: capped
            msg("T", 0, tags="TagA"),
        ])
        ts = res.messages[0].store_timestamp
        (e1,) = store.reads.read_queue_entries(SCHEDULE_TOPIC, 1, 0, 10)
        (e2,) = store.reads.read_queue_entries(SCHEDULE_TOPIC, 2, 0, 10)
        (e3,) = store.reads.read_queue_entries("T", 0, 0, 10)
        assert e1.tag_code == ts + 5000
        assert e2.tag_code == ts + 10000
        assert e3.tag_code == java_string_hash("TagA")
        assert (e3.phys_offset, e3.size) == (res.messages[2].phys_offset, res.messages[2].size)
    finally:
        store.shutdown()


def test_ipv6_hosts_and_arrival_listener(tmp_path: Path) -> None:
    store = open_store(tmp_path / "s", store_host="[::1]:10911")
    calls: list[tuple[str, int, int]] = []
    store.add_arrival_listener(lambda t, q, m: calls.append((t, q, m)))
    try:
        m = StoreMessage("T", 3, b"six", {"TAGS": "x"}, born_host="[fe80::1]:77")
        res = store.put_messages([m, msg("T", 3)])
        assert res.status is PutStatus.PUT_OK
        assert calls == [("T", 3, 2)]
        raw = store.reads.read_record(res.messages[0].phys_offset)
        assert raw is not None
        d = decode_record(raw, check_crc=True)
        assert d.store_host == "::1:10911" and d.born_host == "fe80::1:77"
    finally:
        store.shutdown()


def test_read_record_edges(tmp_path: Path) -> None:
    store = open_store(tmp_path / "s")
    try:
        res = store.put_messages([msg(body=b"a" * 50), msg(body=b"b" * 50)])
        a, _b = res.messages
        assert store.reads.read_record(a.phys_offset, a.size) == store.reads.read_record(a.phys_offset)
        assert store.reads.read_record(a.phys_offset, a.size + 1) is None
        assert store.reads.read_record(a.phys_offset + 3) is None  # not a record boundary
        assert store.reads.read_record(res.end_offset) is None
        assert store.reads.read_record(-5) is None
        assert store.reads.read_record(10**12) is None
    finally:
        store.shutdown()
