"""Consume-queue entries that no longer say where their queue's record is: every read checks
that the record it hands out is the one its entry names (TOTALSIZE, PHYSICALOFFSET, QUEUEID,
topic), trusted records included: those this run wrote and those the scrub has verified. The
damaged entry is left out and reported (found_by "entry"); the record it lands on stays in
its own queue. Before, a trusted record was handed out on its entry's word: another queue's
message, or bytes cut to a wrong size, reached the consumer."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest
from store_util import SMALL_SEGMENT, msg, open_store, queue_rebuilt_by_recovery, wait_until

from ferrymq.common.record import decode_records
from ferrymq.common.record.layout import POS_BODY_V4
from ferrymq.store import CorruptPolicy, MessageStore

FULL_SCRUB = 64 * 1024 * 1024
ENTRY = 20  # a consume-queue entry: commit-log offset (8), size (4), tag code (8)


def _queue_file(store_dir: Path, topic: str, queue_id: int) -> Path:
    return store_dir / "consumequeue" / topic / str(queue_id) / f"{0:020d}"


def _rewrite_entry(path: Path, index: int, *, phys: int | None = None,
                   size: int | None = None) -> None:
    """Change one entry in place (the open store reads its queue files with pread)."""
    with open(path, "r+b") as f:
        f.seek(index * ENTRY)
        old_phys, old_size = struct.unpack(">qi", f.read(12))
        f.seek(index * ENTRY)
        f.write(struct.pack(">qi", old_phys if phys is None else phys,
                            old_size if size is None else size))


def _bodies(store: MessageStore, topic: str, queue_id: int) -> list[bytes]:
    got = store.get_messages(topic, queue_id, 0, 32)
    return [m.body for m in decode_records(got.data)]


def _fill(store: MessageStore) -> dict[tuple[str, int], list[int]]:
    """Four records in each of A/0, A/1 and B/0, all of one size."""
    phys: dict[tuple[str, int], list[int]] = {("A", 0): [], ("A", 1): [], ("B", 0): []}
    for i in range(4):
        for (topic, qid), at in phys.items():
            body = b"%s%d%d" % (topic.encode(), qid, i) * 10
            at.append(store.put_messages([msg(topic, qid, body)]).messages[0].phys_offset)
    return phys


def _expected(topic: str, qid: int, left_out: int | None = None) -> list[bytes]:
    return [b"%s%d%d" % (topic.encode(), qid, i) * 10 for i in range(4) if i != left_out]


def _assert_entry_2_of_a0_left_out(store: MessageStore) -> None:
    """A/0 reads without its entry 2, which is reported as the entry's damage; the queue
    whose record it points at (or the records it spans) reads whole."""
    assert _bodies(store, "A", 0) == _expected("A", 0, left_out=2)
    for topic, qid in (("A", 1), ("B", 0)):
        assert _bodies(store, topic, qid) == _expected(topic, qid)
    (rec,) = store.damaged_records()
    assert (rec.topic, rec.queue_id, rec.queue_offset, rec.found_by) == ("A", 0, 2, "entry")


# Queue A/0's entry 2 made to point at another queue's record 1 (same size, so its TOTALSIZE
# and PHYSICALOFFSET agree with the entry), or given another record's size.
DAMAGE = {
    "another topic's record": ("B", 0),
    "another queue id's record": ("A", 1),
    "a size spanning two records": None,
}


@pytest.mark.parametrize("damage", list(DAMAGE))
def test_a_damaged_entry_is_caught_after_the_scrub_verified_its_record(
        tmp_path: Path, damage: str) -> None:
    store_dir = tmp_path / "s"
    store = open_store(store_dir, scrub_bytes_per_s=0)
    try:
        phys = _fill(store)
    finally:
        store.shutdown()
    target = DAMAGE[damage]
    size = (phys[("A", 0)][3] - phys[("A", 0)][2]) if target is None else None
    _rewrite_entry(_queue_file(store_dir, "A", 0), 2,
                   phys=None if target is None else phys[target][1],
                   size=None if size is None else 2 * size)
    for _restart in range(2):  # and again once damage.json holds the report
        store = open_store(store_dir, scrub_bytes_per_s=FULL_SCRUB)
        try:
            assert store.scrubber is not None
            wait_until(store.scrubber.done.is_set, message="scrub done")
            _assert_entry_2_of_a0_left_out(store)
        finally:
            store.shutdown()


@pytest.mark.parametrize("damage", list(DAMAGE))
def test_a_damaged_entry_pointing_at_records_this_run_wrote_is_caught(
        tmp_path: Path, damage: str) -> None:
    store = open_store(tmp_path / "s", scrub_bytes_per_s=0)
    try:
        phys = _fill(store)
        target = DAMAGE[damage]
        size = phys[("A", 0)][3] - phys[("A", 0)][2]
        _rewrite_entry(_queue_file(tmp_path / "s", "A", 0), 2,
                       phys=None if target is None else phys[target][1],
                       size=None if target is not None else 2 * size)
        _assert_entry_2_of_a0_left_out(store)
    finally:
        store.shutdown()


def test_stop_policy_holds_a_queue_at_an_entry_of_another_queues_record(tmp_path: Path) -> None:
    """Under STOP the read ends before the damaged entry and the next read is held there;
    the queue the record belongs to is read whole."""
    store = open_store(tmp_path / "s", scrub_bytes_per_s=0,
                       on_corrupt_record=CorruptPolicy.STOP)
    try:
        phys = _fill(store)
        _rewrite_entry(_queue_file(tmp_path / "s", "A", 0), 2, phys=phys[("B", 0)][1])
        got = store.get_messages("A", 0, 0, 32)
        assert [m.body for m in decode_records(got.data)] == _expected("A", 0)[:2]
        assert got.next_begin_offset == 2
        held = store.get_messages("A", 0, 2, 32)
        assert held.count == 0 and held.next_begin_offset == 2
        assert _bodies(store, "B", 0) == _expected("B", 0)
    finally:
        store.shutdown()


@pytest.mark.parametrize("field", ["queue id", "topic"])
def test_a_record_whose_own_queue_fields_are_damaged_is_reported_as_the_record(
        tmp_path: Path, field: str) -> None:
    """The record's QUEUEID or topic is damaged (the body CRC covers neither); its entry is
    sound. The record names a queue whose entry does not point back at it, so the record is
    what is reported (found_by "read"), not its entry: reported as the entry's, the report
    said the record was fine."""
    store = open_store(tmp_path / "s", scrub_bytes_per_s=0)
    try:
        phys = _fill(store)
        at = phys[("A", 0)][2]
        with open(sorted((tmp_path / "s" / "commitlog").iterdir())[0], "r+b") as f:
            if field == "queue id":
                f.seek(at + 12)  # QUEUEID
                f.write(struct.pack(">i", 1))
            else:
                f.seek(at)
                record = f.read(phys[("A", 0)][3] - at)
                f.seek(at + record.index(b"\x01A\x00") + 1)  # topic length 1, "A", props length
                f.write(b"B")
        assert _bodies(store, "A", 0) == _expected("A", 0, left_out=2)
        (rec,) = store.damaged_records()
        assert (rec.phys_offset, rec.queue_offset, rec.found_by) == (at, 2, "read")
        for topic, qid in (("A", 1), ("B", 0)):
            assert _bodies(store, topic, qid) == _expected(topic, qid)
    finally:
        store.shutdown()


@pytest.mark.parametrize("policy", [CorruptPolicy.SKIP, CorruptPolicy.STOP])
@pytest.mark.parametrize("how", ["size", "offset"])
def test_an_entry_naming_bytes_past_the_logs_end_does_not_stall_its_queue(
        tmp_path: Path, how: str, policy: CorruptPolicy) -> None:
    """A/0's last entry names bytes past the commit log's end (its size too large, or its
    offset past the end). The read of its run failed as a segment being removed: the pull
    answered MESSAGE_WAS_REMOVING at its own offset, so the consumer asked again for good and
    the records before it in the pull were never delivered. Now the records before it are
    answered, and the entry is reported and passed over (SKIP) or stopped at (STOP); the
    record written at that offset later is read through its own queue."""
    store = open_store(tmp_path / "s", scrub_bytes_per_s=0, on_corrupt_record=policy)
    try:
        phys = _fill(store)
        last = phys[("B", 0)][3]
        size = phys[("B", 0)][3] - phys[("B", 0)][2]
        _rewrite_entry(_queue_file(tmp_path / "s", "A", 0), 3,
                       size=10 * size if how == "size" else None,
                       phys=last + 5 * size if how == "offset" else None)
        got = store.get_messages("A", 0, 0, 32)
        assert [m.body for m in decode_records(got.data)] == _expected("A", 0)[:3]
        assert got.next_begin_offset == 3
        after = store.get_messages("A", 0, 3, 32)
        assert after.count == 0
        assert after.next_begin_offset == (4 if policy is CorruptPolicy.SKIP else 3)
        (rec,) = store.damaged_records()
        assert (rec.topic, rec.queue_id, rec.queue_offset, rec.found_by) == ("A", 0, 3, "entry")
        for i in range(12):  # the log grows over where the entry points
            assert store.put_messages([msg("B", 0, b"late%02d" % i * 10)]).ok
        assert _bodies(store, "B", 0)[4:] == [b"late%02d" % i * 10 for i in range(12)]
    finally:
        store.shutdown()


def test_an_entry_landing_on_a_record_recovery_moved_in_its_queue_blames_the_entry(
        tmp_path: Path) -> None:
    """B/0's queue was lost and rebuilt by recovery: its records now sit at queue offsets
    other than their QUEUEOFFSET fields (recovery keeps them where the queue expected them).
    A/0's entry 2 damaged onto B's record L0 (same size) is the entry's damage: the owner is
    found by position when the record's QUEUEOFFSET names no entry of it, else the sound
    record was reported and left out of its own queue for good."""
    image, late = queue_rebuilt_by_recovery(tmp_path, 2)
    store = open_store(image, scrub_bytes_per_s=0)
    try:
        assert _bodies(store, "B", 0) == [b"L00" * 10, b"L01" * 10]
        _rewrite_entry(_queue_file(image, "A", 0), 2, phys=late[0])
        assert _bodies(store, "A", 0) == _expected("A", 0, left_out=2)
        assert _bodies(store, "B", 0) == [b"L00" * 10, b"L01" * 10]
        (rec,) = store.damaged_records()
        assert (rec.topic, rec.queue_offset, rec.found_by) == ("A", 2, "entry")
    finally:
        store.shutdown()


def test_lookups_by_key_leave_out_a_record_damaged_at_rest(tmp_path: Path) -> None:
    """A body damaged at rest: a pull leaves the record out and reports it; the lookups by
    key and by unique id handed its altered bytes out."""
    store = open_store(tmp_path / "s", scrub_bytes_per_s=0)
    at = store.put_messages([msg("T", 0, b"payload-0", keys="K1", uniq="U1")]).messages[0].phys_offset
    store.shutdown()
    with open(sorted((tmp_path / "s" / "commitlog").iterdir())[0], "r+b") as f:
        f.seek(at + POS_BODY_V4 + 2)
        f.write(b"#")
    store = open_store(tmp_path / "s", scrub_bytes_per_s=0)
    try:
        assert store.find_by_key("T", "K1", 8) == []
        assert store.find_by_uniq_key("T", "U1") == []
        assert [r.phys_offset for r in store.damaged_records()] == [at]
        assert store.get_messages("T", 0, 0, 8).count == 0
    finally:
        store.shutdown()


def test_a_past_end_entrys_report_does_not_hide_the_record_written_there_later(
        tmp_path: Path) -> None:
    """T/0's entry 2 names where m7 is written later (same queue, same size). Its report was
    keyed without its queue offset, so m7's own sound entry matched it and m7 was left out."""
    store = open_store(tmp_path / "s", scrub_bytes_per_s=0)
    try:
        first = [store.put_messages([msg("T", 0, b"m%d" % i)]).messages[0] for i in range(5)]
        size = first[1].phys_offset - first[0].phys_offset
        future = first[0].phys_offset + 7 * size
        _rewrite_entry(_queue_file(tmp_path / "s", "T", 0), 2, phys=future)
        got = store.get_messages("T", 0, 0, 32)
        assert [m.body for m in decode_records(got.data)] == [b"m0", b"m1"]
        assert store.get_messages("T", 0, got.next_begin_offset, 32).next_begin_offset == 3
        later = [store.put_messages([msg("T", 0, b"m%d" % i)]).messages[0] for i in range(5, 10)]
        assert later[2].phys_offset == future
        got = store.get_messages("T", 0, 3, 32)
        assert [m.body for m in decode_records(got.data)] == [b"m%d" % i for i in range(3, 10)]
    finally:
        store.shutdown()


@pytest.mark.parametrize("where", ["inside another queue's record", "inside its own record",
                                   "in the blank closing a segment"])
def test_an_entry_whose_offset_lands_where_no_record_starts_is_the_entrys_damage(
        tmp_path: Path, where: str) -> None:
    """A/0's entry 2 has its offset damaged: it lands inside a record, or inside the blank
    that closes a segment. It was reported as a damaged record at that offset, where no record
    starts (found_by "read", no queue of its own): now as the entry's damage, naming its
    queue and queue offset."""
    store = open_store(tmp_path / "s", scrub_bytes_per_s=0)
    try:
        phys = _fill(store)
        if where == "inside another queue's record":
            target = phys[("B", 0)][1] + 7
        elif where == "inside its own record":
            target = phys[("A", 0)][2] + 3
        else:
            filler = [store.put_messages([msg("C", 0, b"f" * 3000)]).messages[0]
                      for _ in range(30)]
            rolled = next(i for i, m in enumerate(filler) if m.phys_offset % SMALL_SEGMENT == 0)
            blank = filler[rolled - 1].phys_offset + filler[rolled - 1].size
            assert blank % SMALL_SEGMENT < SMALL_SEGMENT - 16
            target = blank + 5
        _rewrite_entry(_queue_file(tmp_path / "s", "A", 0), 2, phys=target)
        _assert_entry_2_of_a0_left_out(store)
        (rec,) = store.damaged_records()
        assert rec.phys_offset == target
    finally:
        store.shutdown()


def test_a_record_whose_head_is_damaged_is_still_the_records_damage(tmp_path: Path) -> None:
    """Where a record does start (the record before it ends there), a damaged magic code is
    the record's damage, not its entry's."""
    store = open_store(tmp_path / "s", scrub_bytes_per_s=0)
    try:
        phys = _fill(store)
        at = phys[("A", 0)][2]
        with open(sorted((tmp_path / "s" / "commitlog").iterdir())[0], "r+b") as f:
            f.seek(at + 4)  # MAGICCODE
            f.write(b"\x00")
        assert _bodies(store, "A", 0) == _expected("A", 0, left_out=2)
        (rec,) = store.damaged_records()
        assert (rec.phys_offset, rec.queue_offset, rec.found_by) == (at, 2, "read")
    finally:
        store.shutdown()
