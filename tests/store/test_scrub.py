"""The scrub finds damage in cold segments nobody reads; the stop policy and an operator's
skip, which survives a restart; consume-queue entries bent at random are rebuilt from the
log."""

from __future__ import annotations

import logging
import struct
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from store_util import msg, open_store, segment_files, wait_until

import sparse_copy
from ferrymq.common.record import decode_records
from ferrymq.common.record.layout import POS_BODY_V4, POS_BODYLEN_V4, POS_QUEUEID
from ferrymq.store import CorruptPolicy, GetStatus, MessageStore


def _fill(store_dir: Path, n: int) -> list[int]:
    store = open_store(store_dir, scrub_bytes_per_s=0)
    try:
        phys = []
        for i in range(n):
            r = store.put_messages([msg(body=f"cold-{i:05d}-".encode() * 40)])
            assert r.ok
            phys.append(r.messages[0].phys_offset)
        return phys
    finally:
        store.shutdown()


def _flip(path: Path, at: int) -> None:
    data = bytearray(path.read_bytes())
    data[at] ^= 0x20
    path.write_bytes(bytes(data))


def test_scrub_finds_a_flipped_byte_in_a_cold_segment(tmp_path: Path) -> None:
    store_dir = tmp_path / "s"
    phys = _fill(store_dir, 300)
    assert len(segment_files(store_dir)) >= 3
    first = segment_files(store_dir)[0]
    target = phys[5]
    body_at = first.read_bytes().index(b"cold-00005-", target)
    _flip(first, body_at + 1)
    store = open_store(store_dir, scrub_bytes_per_s=64 * 1024 * 1024)
    try:
        assert store.scrubber is not None
        wait_until(lambda: store.scrubber is not None and store.scrubber.done.is_set(),
                   message="scrub done")
        (rec,) = store.damaged_records()
        assert (rec.phys_offset, rec.segment, rec.found_by) == (target, str(first), "scrub")
        assert rec.reason == "body CRC mismatch" and rec.queue_offset == 5
        got = store.reads.get_messages("T", 0, 0, 32)
        assert (got.status, got.count, got.next_begin_offset) == (GetStatus.FOUND, 31, 32)
        assert b"cold-00005-" not in got.data and b"cold-00006-" in got.data
        # Past the damage the scrub went on: it checked the whole log.
        assert store.scrubber.scanned_bytes >= phys[-1] - phys[0] - 2 * (phys[1] - phys[0])
    finally:
        store.shutdown()
    # Reports are kept for a run; the next run's reads find the damage again.
    store = open_store(store_dir, scrub_bytes_per_s=0)
    try:
        assert store.damaged_records() == []
        got = store.reads.get_messages("T", 0, 0, 32)
        assert (got.status, got.count, got.next_begin_offset) == (GetStatus.FOUND, 31, 32)
        assert b"cold-00005-" not in got.data
        assert [(r.phys_offset, r.found_by) for r in store.damaged_records()] == [(target, "read")]
    finally:
        store.shutdown()


def _damaged(store_dir: Path, index: int, in_body: bool, **config: Any) -> MessageStore:
    """20 records, the one at `index` damaged (a body byte, else TOTALSIZE), store reopened
    with no scrub."""
    phys = _fill(store_dir, 20)
    seg = segment_files(store_dir)[0]
    at = seg.read_bytes().index(b"cold-%05d-" % index, phys[index]) if in_body else phys[index]
    _flip(seg, at + 2)
    return open_store(store_dir, scrub_bytes_per_s=0, **config)


def test_stop_policy_stops_before_the_damage_until_skipped(tmp_path: Path) -> None:
    store = _damaged(tmp_path / "s", 7, True, on_corrupt_record=CorruptPolicy.STOP)
    try:
        for _ in range(2):  # held, however often it is asked
            r = store.reads.get_messages("T", 0, 7, 32)
            assert (r.status, r.next_begin_offset) == (GetStatus.MESSAGE_DAMAGED, 7)
        r = store.reads.get_messages("T", 0, 0, 32)
        assert (r.status, r.count, r.next_begin_offset) == (GetStatus.FOUND, 7, 7)
        r = store.reads.get_messages("T", 0, 7, 32)
        assert (r.status, r.next_begin_offset) == (GetStatus.MESSAGE_DAMAGED, 7)
        store.skip_range("T", 0, 7, 8)
        r = store.reads.get_messages("T", 0, 7, 32)
        assert (r.status, r.next_begin_offset) == (GetStatus.NO_MATCHED_MESSAGE, 8)
        r = store.reads.get_messages("T", 0, 8, 32)
        assert (r.status, r.count, r.next_begin_offset) == (GetStatus.FOUND, 12, 20)
        assert [d.queue_offset for d in store.damaged_records()] == [7]
    finally:
        store.shutdown()
    # The operator's skip is kept across restarts; nothing else about the damage is.
    store = open_store(tmp_path / "s", scrub_bytes_per_s=0, on_corrupt_record=CorruptPolicy.STOP)
    try:
        assert [(s.topic, s.queue_id, s.from_offset, s.to_offset)
                for s in store.skipped_ranges()] == [("T", 0, 7, 8)]
        r = store.reads.get_messages("T", 0, 7, 32)
        assert (r.status, r.next_begin_offset) == (GetStatus.NO_MATCHED_MESSAGE, 8)
    finally:
        store.shutdown()


def test_skip_policy_returns_the_good_records_around_the_damage(tmp_path: Path) -> None:
    store = _damaged(tmp_path / "s", 3, False)
    try:
        r = store.reads.get_messages("T", 0, 0, 32)
        assert (r.status, r.count, r.next_begin_offset) == (GetStatus.FOUND, 19, 20)
        assert b"cold-00003-" not in r.data and b"cold-00004-" in r.data
        (rec,) = store.damaged_records()
        assert (rec.topic, rec.queue_id, rec.queue_offset, rec.found_by) == ("T", 0, 3, "read")
    finally:
        store.shutdown()


def test_a_queue_entry_pointing_back_does_not_cost_the_records_after_it(tmp_path: Path) -> None:
    # Entry 2's commit-log offset lost a bit's worth and points back into record 0, before the
    # run the pull starts with. The records read back to back must still line up with their
    # entries: the one wild entry is rebuilt, the good record after it is delivered.
    store_dir = tmp_path / "s"
    phys = _fill(store_dir, 5)
    queue_file = store_dir / "consumequeue" / "T" / "0" / f"{0:020d}"
    entries = bytearray(queue_file.read_bytes())
    struct.pack_into(">q", entries, 2 * 20, phys[0] + 1)
    queue_file.write_bytes(bytes(entries))
    store = open_store(store_dir, scrub_bytes_per_s=0)  # cold: all checked
    try:
        got = store.reads.get_messages("T", 0, 1, 3)
        assert (got.status, got.count, got.next_begin_offset) == (GetStatus.FOUND, 3, 4)
        assert [m.queue_offset for m in decode_records(got.data)] == [1, 2, 3]
        assert store.damaged_records() == []
    finally:
        store.shutdown()



@pytest.mark.parametrize("size", [-300, -1, 0])
def test_a_queue_entry_without_a_positive_size_is_rebuilt(tmp_path: Path, size: int) -> None:
    # Its record cannot be read by it; the entry is rebuilt and the record delivered with the
    # sound ones around it. A negative size shortened the run being read and moved the records
    # after it out of line (a sound one reported damaged, or the pull failing with
    # struct.error on a negative position).
    store_dir = tmp_path / "s"
    phys = _fill(store_dir, 5)
    queue_file = store_dir / "consumequeue" / "T" / "0" / f"{0:020d}"
    entries = bytearray(queue_file.read_bytes())
    struct.pack_into(">i", entries, 1 * 20 + 8, size)
    queue_file.write_bytes(bytes(entries))
    store = open_store(store_dir, scrub_bytes_per_s=0)  # cold: all checked
    try:
        alone = store.reads.get_messages("T", 0, 1, 1)  # alone in a pull
        assert (alone.status, alone.count, alone.next_begin_offset) == (GetStatus.FOUND, 1, 2)
        got = store.reads.get_messages("T", 0, 0, 4)
        assert (got.status, got.count, got.next_begin_offset) == (GetStatus.FOUND, 4, 4)
        assert [m.queue_offset for m in decode_records(got.data)] == [0, 1, 2, 3]
        assert store.damaged_records() == []
        assert phys == [e.phys_offset for e in store.reads.read_queue_entries("T", 0, 0, 5)]
    finally:
        store.shutdown()

@pytest.mark.parametrize("flag", [0x10, 0x20, 0x30])
def test_an_ipv6_flag_flipped_on_a_small_last_record_is_damage_not_a_failed_pull(
        tmp_path: Path, flag: int) -> None:
    # A small record (94 bytes: IPv4 hosts, a 2-byte body, no properties) whose SYSFLAG gained
    # an IPv6 host bit: its BODY length would lie past its end. Last in a pull, the read's
    # buffer ends there: the pure codec raised struct.error (the pull failed, every time it
    # was asked again) and the compiled one read the field past the buffer (the reason it
    # reported, kept in the damage registry, was made of whatever bytes lay there).
    store_dir = tmp_path / "s"
    store = open_store(store_dir, scrub_bytes_per_s=0)
    try:
        phys = [store.put_messages([msg(body=b"x%d" % i)]).messages[0].phys_offset
                for i in range(5)]
    finally:
        store.shutdown()
    seg = segment_files(store_dir)[0]
    data = bytearray(seg.read_bytes())
    assert struct.unpack_from(">i", data, phys[4])[0] < 88 + 12  # no room for an IPv6 host
    data[phys[4] + 39] |= flag  # SYSFLAG's low byte
    seg.write_bytes(bytes(data))
    store = open_store(store_dir, scrub_bytes_per_s=0)  # cold: all checked
    try:
        got = store.reads.get_messages("T", 0, 0, 32)
        assert (got.status, got.count, got.next_begin_offset) == (GetStatus.FOUND, 4, 5)
        assert [m.queue_offset for m in decode_records(got.data)] == [0, 1, 2, 3]
        alone = store.reads.get_messages("T", 0, 4, 32)
        assert (alone.status, alone.count, alone.next_begin_offset) == (
            GetStatus.NO_MATCHED_MESSAGE, 0, 5)
        assert [(r.phys_offset, r.reason) for r in store.damaged_records()] == [
            (phys[4], "hosts overrun the record")]
    finally:
        store.shutdown()


# (entry, field, change): an offset moved by a few bytes or records (back too, before the
# pull's first run), a size changed or zeroed.
_damage = st.lists(st.tuples(st.integers(0, 11), st.sampled_from(["phys", "size"]),
                             st.integers(-50, 300) | st.integers(-600, 600) | st.just(0)
                             | st.sampled_from([-1, 1, 193, -193, 194, -194])), max_size=2)


@settings(max_examples=100, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(damage=_damage, back=st.integers(0, 11), max_nums=st.integers(1, 12),
       max_bytes=st.integers(1, 2000))
def test_a_pull_over_bent_queue_entries_delivers_every_record_once(
    tmp_path: Path, damage: list[tuple[int, str, int]], back: int, max_nums: int,
    max_bytes: int,
) -> None:
    # Consume-queue entries bent at random (an offset moved, a size changed or zeroed), read
    # cold, so every record is checked: the bent entries the pull meets are rebuilt from the
    # log, and it delivers the queue's record at each offset it passes, in order and once,
    # reporting nothing; the rebuilt entries are the ones first written.
    pristine = tmp_path / "pristine"
    if not pristine.exists():
        store = open_store(pristine, scrub_bytes_per_s=0)
        try:
            for i in range(12):
                assert store.put_messages([msg(body=b"b" * (100 + i))]).ok
                if i % 4 == 3:  # another queue's record between runs
                    assert store.put_messages([msg(queue_id=1, body=b"other")]).ok
        finally:
            store.shutdown()
    work = Path(tempfile.mkdtemp(dir=tmp_path))
    sparse_copy.copytree(pristine, work / "s")
    queue_file = work / "s" / "consumequeue" / "T" / "0" / f"{0:020d}"
    original = queue_file.read_bytes()
    entries = bytearray(original)
    originals = [struct.unpack_from(">qi", entries, 20 * k) for k in range(12)]
    for k, field, delta in damage:
        phys, size = struct.unpack_from(">qi", entries, 20 * k)
        if field == "phys":
            phys = max(0, phys + delta)
        else:
            size = size + delta if delta else 0
        struct.pack_into(">qi", entries, 20 * k, phys, size)
    queue_file.write_bytes(bytes(entries))
    # The pull starts at or before the first bent entry, mostly a little before.
    offset = max(0, damage[0][0] - back % 4) if damage else back
    bent = [k for k in range(12) if struct.unpack_from(">qi", entries, 20 * k) != originals[k]]
    # Not covered: a bent entry that became a copy of another entry. Its record is sound and
    # of its queue: nothing a read can check tells it from the entry it copies.
    assume(not any(struct.unpack_from(">qi", entries, 20 * k) in originals for k in bent))
    store = open_store(work / "s", scrub_bytes_per_s=0)
    try:
        got = store.reads.get_messages("T", 0, offset, max_nums, max_bytes=max_bytes)
        assert store.damaged_records() == []
    finally:
        store.shutdown()
    assert got.status is GetStatus.FOUND
    passed = range(offset, got.next_begin_offset)
    assert [m.queue_offset for m in decode_records(got.data)] == list(passed)
    assert got.count == len(passed) > 0
    repaired = queue_file.read_bytes()
    assert [repaired[20 * k : 20 * k + 20] for k in passed] == [
        original[20 * k : 20 * k + 20] for k in passed]


@pytest.mark.parametrize("policy", [CorruptPolicy.SKIP, CorruptPolicy.STOP])
def test_an_entry_pointing_at_another_queues_record_does_not_hide_that_record(
        tmp_path: Path, policy: CorruptPolicy) -> None:
    """Queue A's entry 2 is damaged: its offset now lands on queue B's record 1, a sound record
    of another size. A read of A rebuilds the entry and delivers A's record 2; B's record is
    still read, then and after a restart, and after the scrub. Damage was once remembered by
    commit-log offset alone, so the report made every read of B leave its sound record out
    for good."""
    store_dir = tmp_path / "s"
    store = open_store(store_dir, scrub_bytes_per_s=0)
    try:
        phys_a, phys_b = [], []
        for i in range(4):
            phys_a.append(store.put_messages([msg("A", 0, b"a%d" % i * 20)]).messages[0].phys_offset)
            phys_b.append(store.put_messages([msg("B", 0, b"b%d" % i * 30)]).messages[0].phys_offset)
    finally:
        store.shutdown()
    queue_file = store_dir / "consumequeue" / "A" / "0" / f"{0:020d}"
    entries = bytearray(queue_file.read_bytes())
    struct.pack_into(">q", entries, 2 * 20, phys_b[1])  # entry 2: commit-log offset, SIZE, tag
    queue_file.write_bytes(bytes(entries))
    for scrub in (0, 64 * 1024 * 1024):  # again after a restart, once the scrub verified all
        store = open_store(store_dir, scrub_bytes_per_s=scrub, on_corrupt_record=policy)
        try:
            if scrub:
                assert store.scrubber is not None
                wait_until(store.scrubber.done.is_set, message="scrub done")
            got = store.reads.get_messages("A", 0, 0, 32)
            assert [m.body for m in decode_records(got.data)] == [b"a%d" % i * 20 for i in range(4)]
            got = store.reads.get_messages("B", 0, 0, 32)
            assert [m.body for m in decode_records(got.data)] == [b"b%d" % i * 30 for i in range(4)]
            assert store.damaged_records() == []
        finally:
            store.shutdown()


def test_two_damaged_entries_at_one_offset_are_both_rebuilt(tmp_path: Path) -> None:
    """Queue A's entries 1 and 2 are damaged: both offsets now land on queue B's record 1, a
    sound record of another size, and the two entries have different sizes. Both are rebuilt,
    before and after the scrub verified that record. Reports were once kept by commit-log
    offset alone, so after the scrub the second entry delivered B's bytes cut to its size."""
    store_dir = tmp_path / "s"
    store = open_store(store_dir, scrub_bytes_per_s=0)
    try:
        phys_b = []
        for i in range(4):
            assert store.put_messages([msg("A", 0, b"a%d" % i * (21 + 5 * i))]).ok
            phys_b.append(store.put_messages([msg("B", 0, b"b%d" % i * 30)]).messages[0].phys_offset)
    finally:
        store.shutdown()
    queue_file = store_dir / "consumequeue" / "A" / "0" / f"{0:020d}"
    entries = bytearray(queue_file.read_bytes())
    for k in (1, 2):  # entries 1 and 2: commit-log offset, SIZE (they differ), tag
        struct.pack_into(">q", entries, k * 20, phys_b[1])
    queue_file.write_bytes(bytes(entries))
    for scrub in (0, 64 * 1024 * 1024):  # again after a restart, once the scrub verified all
        store = open_store(store_dir, scrub_bytes_per_s=scrub)
        try:
            if scrub:
                assert store.scrubber is not None
                wait_until(store.scrubber.done.is_set, message="scrub done")
            got = store.reads.get_messages("A", 0, 0, 32)
            assert [m.body for m in decode_records(got.data)] == [
                b"a%d" % i * (21 + 5 * i) for i in range(4)]
            got = store.reads.get_messages("B", 0, 0, 32)
            assert [m.body for m in decode_records(got.data)] == [b"b%d" % i * 30 for i in range(4)]
        finally:
            store.shutdown()


def test_an_entry_without_a_size_does_not_hide_the_record_written_later_at_its_offset(
        tmp_path: Path) -> None:
    """Queue A's entry 1 is damaged: its size is 0 and its offset lands where the commit log
    ends. A read rebuilds it; B's record written there later is still read. The entry was
    once reported as the record's damage (nothing sound started there yet), so every read of
    B left that sound record out for good."""
    store_dir = tmp_path / "s"
    store = open_store(store_dir, scrub_bytes_per_s=0)
    try:
        for i in range(3):
            assert store.put_messages([msg("A", 0, b"a%d" % i * 20)]).ok
        end = store.put_messages([msg("B", 0, b"b0" * 30)]).messages[0].phys_offset
        end += store.reads.get_messages("B", 0, 0, 1).data.__len__()
    finally:
        store.shutdown()
    queue_file = store_dir / "consumequeue" / "A" / "0" / f"{0:020d}"
    entries = bytearray(queue_file.read_bytes())
    struct.pack_into(">qi", entries, 1 * 20, end, 0)  # entry 1: commit-log offset, SIZE
    queue_file.write_bytes(bytes(entries))
    store = open_store(store_dir, scrub_bytes_per_s=0)
    try:
        got = store.reads.get_messages("A", 0, 0, 32)
        assert [m.body for m in decode_records(got.data)] == [b"a%d" % i * 20 for i in range(3)]
        assert store.put_messages([msg("B", 0, b"b1" * 30)]).messages[0].phys_offset == end
        got = store.reads.get_messages("B", 0, 0, 32)
        assert [m.body for m in decode_records(got.data)] == [b"b0" * 30, b"b1" * 30]
    finally:
        store.shutdown()


@pytest.mark.parametrize("damage", ["body", "body length", "queue id and body",
                                    "queue entry lost"])
def test_the_scrubs_report_names_the_topic_and_queue(tmp_path: Path, damage: str,
                                                     caplog: pytest.LogCaptureFixture) -> None:
    """The scrub reported damage with no topic: its log line said "queue /3 offset 5". Now it
    names the queue whose entry points at the record (found by position when the record's own
    QUEUEID is damaged), or, no entry naming it, the topic the record's fields still give."""
    store_dir = tmp_path / "s"
    store = open_store(store_dir, scrub_bytes_per_s=0)
    try:
        phys = [store.put_messages([msg("Orders", 3, b"cold-%05d-" % i * 40)]).messages[0]
                .phys_offset for i in range(8)]
    finally:
        store.shutdown()
    seg = segment_files(store_dir)[0]
    if damage != "body length":
        _flip(seg, phys[5] + POS_BODY_V4 + 3)
    if damage == "body length":
        _flip(seg, phys[5] + POS_BODYLEN_V4 + 2)
    elif damage == "queue id and body":
        _flip(seg, phys[5] + POS_QUEUEID + 3)
    elif damage == "queue entry lost":
        queue_file = store_dir / "consumequeue" / "Orders" / "3" / f"{0:020d}"
        entries = bytearray(queue_file.read_bytes())
        struct.pack_into(">q", entries, 5 * 20, phys[6])  # entry 5 names record 6 instead
        queue_file.write_bytes(bytes(entries))
    caplog.set_level(logging.ERROR, logger="ferrymq.store")
    store = open_store(store_dir, scrub_bytes_per_s=64 * 1024 * 1024)
    try:
        assert store.scrubber is not None
        wait_until(store.scrubber.done.is_set, message="scrub done")
        rec = next(r for r in store.damaged_records() if r.found_by == "scrub")
        assert (rec.phys_offset, rec.topic, rec.queue_id) == (phys[5], "Orders", 3)
        assert rec.queue_offset == 5
        assert any("damaged commit-log record" in r.getMessage()
                   and "(queue Orders/3 offset 5)" in r.getMessage() for r in caplog.records)
    finally:
        store.shutdown()
