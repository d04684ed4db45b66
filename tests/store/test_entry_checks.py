"""Consume-queue entries that no longer say where their queue's record is: every read checks
that the record it hands out is the one its entry names (TOTALSIZE, PHYSICALOFFSET, QUEUEID,
topic), records this run wrote included. A wrong entry's range is rebuilt from the commit log,
so the read delivers the queue's own record there, once and in order; the record the entry
landed on stays in its own queue. Entries that cannot be matched to their queue's records are
reported and left out (SKIP) or held at (STOP)."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest
from store_util import SMALL_SEGMENT, msg, open_store, queue_rebuilt_by_recovery, wait_until

from ferrymq.common.record import decode_records
from ferrymq.common.record.layout import POS_BODY_V4
from ferrymq.store import CorruptPolicy, GetStatus, MessageStore

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
    """What a consumer of the queue gets from offset 0, pull after pull, until it is held or
    at the end."""
    out: list[bytes] = []
    offset = 0
    while offset < store.reads.get_max_offset(topic, queue_id):
        got = store.reads.get_messages(topic, queue_id, offset, 32)
        out += [m.body for m in decode_records(got.data)]
        if got.next_begin_offset == offset:
            break
        offset = got.next_begin_offset
    return out


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


def _assert_every_queue_reads_whole(store: MessageStore) -> None:
    """Each queue delivers its own four records, in order, and nothing was reported."""
    for topic, qid in (("A", 0), ("A", 1), ("B", 0)):
        assert _bodies(store, topic, qid) == _expected(topic, qid)
    assert store.damaged_records() == []


# Queue A/0's entry 2 made to point at another queue's record 1 (same size, so its TOTALSIZE
# and PHYSICALOFFSET agree with the entry), or given another record's size.
DAMAGE = {
    "another topic's record": ("B", 0),
    "another queue id's record": ("A", 1),
    "a size spanning two records": None,
}


def _bend_entry_2_of_a0(store_dir: Path, phys: dict[tuple[str, int], list[int]],
                        damage: str) -> None:
    target = DAMAGE[damage]
    size = phys[("A", 0)][3] - phys[("A", 0)][2]
    _rewrite_entry(_queue_file(store_dir, "A", 0), 2,
                   phys=None if target is None else phys[target][1],
                   size=None if target is not None else 2 * size)


@pytest.mark.parametrize("damage", list(DAMAGE))
def test_a_wrong_entry_to_cold_records_is_rebuilt_from_the_log(tmp_path: Path,
                                                              damage: str) -> None:
    """Records of an earlier run, scrubbed or not: the read rebuilds the entry and delivers
    A/0's own record 2; the repaired entry is on disk after a restart."""
    store_dir = tmp_path / "s"
    store = open_store(store_dir, scrub_bytes_per_s=0)
    try:
        phys = _fill(store)
    finally:
        store.shutdown()
    pristine = _queue_file(store_dir, "A", 0).read_bytes()
    _bend_entry_2_of_a0(store_dir, phys, damage)
    store = open_store(store_dir, scrub_bytes_per_s=FULL_SCRUB)
    try:
        assert store.scrubber is not None
        wait_until(store.scrubber.done.is_set, message="scrub done")
        _assert_every_queue_reads_whole(store)
    finally:
        store.shutdown()
    assert _queue_file(store_dir, "A", 0).read_bytes() == pristine


@pytest.mark.parametrize("damage", list(DAMAGE))
def test_a_wrong_entry_to_records_this_run_wrote_is_rebuilt(tmp_path: Path,
                                                            damage: str) -> None:
    store = open_store(tmp_path / "s", scrub_bytes_per_s=0)
    try:
        phys = _fill(store)
        _bend_entry_2_of_a0(tmp_path / "s", phys, damage)
        _assert_every_queue_reads_whole(store)
    finally:
        store.shutdown()


def _damage_queue_field_of_record_2_of_a0(store_dir: Path, phys: dict[tuple[str, int], list[int]],
                                          field: str) -> int:
    """A/0's record 2 names another queue: its QUEUEID or its topic damaged (the body CRC
    covers neither). Returns where it is."""
    at = phys[("A", 0)][2]
    with open(sorted((store_dir / "commitlog").iterdir())[0], "r+b") as f:
        if field == "queue id":
            f.seek(at + 12)  # QUEUEID
            f.write(struct.pack(">i", 1))
        else:
            f.seek(at)
            record = f.read(phys[("A", 0)][3] - at)
            f.seek(at + record.index(b"\x01A\x00") + 1)  # topic length 1, "A", props length
            f.write(b"B")
    return at


@pytest.mark.parametrize("field", ["queue id", "topic"])
def test_a_record_naming_another_queue_is_left_out_and_reported(tmp_path: Path,
                                                                field: str) -> None:
    """A/0's entry 2 is sound but its record names another queue: the log holds no record of
    A/0 for it, so nothing can be rebuilt. It is left out and reported; the other queues,
    the one the record names included, read whole."""
    store = open_store(tmp_path / "s", scrub_bytes_per_s=0)
    try:
        phys = _fill(store)
        at = _damage_queue_field_of_record_2_of_a0(tmp_path / "s", phys, field)
        assert _bodies(store, "A", 0) == _expected("A", 0, left_out=2)
        (rec,) = store.damaged_records()
        assert (rec.phys_offset, rec.topic, rec.queue_id, rec.queue_offset) == (at, "A", 0, 2)
        for topic, qid in (("A", 1), ("B", 0)):
            assert _bodies(store, topic, qid) == _expected(topic, qid)
    finally:
        store.shutdown()


def test_stop_policy_holds_a_queue_at_an_entry_that_cannot_be_rebuilt(tmp_path: Path) -> None:
    """Under STOP the read ends before the entry and the queue is held there until an
    operator skips it; the other queues read whole."""
    store = open_store(tmp_path / "s", scrub_bytes_per_s=0,
                       on_corrupt_record=CorruptPolicy.STOP)
    try:
        phys = _fill(store)
        _damage_queue_field_of_record_2_of_a0(tmp_path / "s", phys, "queue id")
        got = store.reads.get_messages("A", 0, 0, 32)
        assert [m.body for m in decode_records(got.data)] == _expected("A", 0)[:2]
        assert got.next_begin_offset == 2
        held = store.reads.get_messages("A", 0, 2, 32)
        assert (held.status, held.count, held.next_begin_offset) == (
            GetStatus.MESSAGE_DAMAGED, 0, 2)
        assert _bodies(store, "B", 0) == _expected("B", 0)
        store.skip_range("A", 0, 2, 3)
        assert store.reads.get_messages("A", 0, 2, 32).next_begin_offset == 3
        got = store.reads.get_messages("A", 0, 3, 32)
        assert [m.body for m in decode_records(got.data)] == _expected("A", 0)[3:]
    finally:
        store.shutdown()


@pytest.mark.parametrize("policy", [CorruptPolicy.SKIP, CorruptPolicy.STOP])
@pytest.mark.parametrize("how", ["size", "offset"])
def test_an_entry_naming_bytes_past_the_logs_end_is_rebuilt(
        tmp_path: Path, how: str, policy: CorruptPolicy) -> None:
    """A/0's last entry names bytes past the commit log's end (its size too large, or its
    offset past the end). The read of its run failed as a segment being removed: the consumer
    asked again for good. Now the entry is rebuilt and record 3 delivered; the records written
    later where it pointed are read through their own queue."""
    store = open_store(tmp_path / "s", scrub_bytes_per_s=0, on_corrupt_record=policy)
    try:
        phys = _fill(store)
        last = phys[("B", 0)][3]
        size = phys[("B", 0)][3] - phys[("B", 0)][2]
        _rewrite_entry(_queue_file(tmp_path / "s", "A", 0), 3,
                       size=10 * size if how == "size" else None,
                       phys=last + 5 * size if how == "offset" else None)
        _assert_every_queue_reads_whole(store)
        for i in range(12):  # the log grows over where the entry pointed
            assert store.put_messages([msg("B", 0, b"late%02d" % i * 10)]).ok
        assert _bodies(store, "B", 0)[4:] == [b"late%02d" % i * 10 for i in range(12)]
        assert _bodies(store, "A", 0) == _expected("A", 0)
    finally:
        store.shutdown()


def test_an_entry_landing_on_a_record_recovery_moved_in_its_queue_is_rebuilt(
        tmp_path: Path) -> None:
    """B/0's queue was lost and rebuilt by recovery: its records sit at queue offsets other
    than their QUEUEOFFSET fields. A/0's entry 2 damaged onto B's record L0 (same size) is
    rebuilt; B/0 reads whole."""
    image, late = queue_rebuilt_by_recovery(tmp_path, 2)
    store = open_store(image, scrub_bytes_per_s=0)
    try:
        assert _bodies(store, "B", 0) == [b"L00" * 10, b"L01" * 10]
        _rewrite_entry(_queue_file(image, "A", 0), 2, phys=late[0])
        assert _bodies(store, "A", 0) == _expected("A", 0)
        assert _bodies(store, "B", 0) == [b"L00" * 10, b"L01" * 10]
        assert store.damaged_records() == []
    finally:
        store.shutdown()


@pytest.mark.parametrize("same_count", [True, False])
def test_a_queue_file_of_another_topic_never_delivers_its_messages(tmp_path: Path,
                                                                   same_count: bool) -> None:
    """B/0's queue file restored into A/0's directory: its entries point at B's records.
    They are never delivered as A's messages: with as many entries as A has records in the
    log, A/0 is rebuilt and delivers its own; otherwise every entry is reported and passed
    over. B/0 reads whole."""
    store_dir = tmp_path / "s"
    store = open_store(store_dir, scrub_bytes_per_s=0)
    try:
        _fill(store)
        extra = [] if same_count else [b"B0%d" % i * 10 for i in range(4, 6)]
        for body in extra:
            assert store.put_messages([msg("B", 0, body)]).ok
    finally:
        store.shutdown()
    _queue_file(store_dir, "A", 0).write_bytes(_queue_file(store_dir, "B", 0).read_bytes())
    store = open_store(store_dir, scrub_bytes_per_s=0)
    try:
        got = _bodies(store, "A", 0)
        assert got == (_expected("A", 0) if same_count else [])
        assert _bodies(store, "B", 0) == _expected("B", 0) + extra
        reported = [(r.topic, r.queue_offset) for r in store.damaged_records()]
        assert reported == ([] if same_count else [("A", k) for k in range(6)])
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
        assert store.reads.find_by_key("T", "K1", 8) == []
        assert store.reads.find_by_uniq_key("T", "U1") == []
        assert [r.phys_offset for r in store.damaged_records()] == [at]
        assert store.reads.get_messages("T", 0, 0, 8).count == 0
    finally:
        store.shutdown()


def test_a_past_end_entry_does_not_hide_the_record_written_there_later(
        tmp_path: Path) -> None:
    """T/0's entry 2 names where m7 is written later (same queue, same size): it is rebuilt at
    once, and m7's own entry delivers m7."""
    store = open_store(tmp_path / "s", scrub_bytes_per_s=0)
    try:
        first = [store.put_messages([msg("T", 0, b"m%d" % i)]).messages[0] for i in range(5)]
        size = first[1].phys_offset - first[0].phys_offset
        future = first[0].phys_offset + 7 * size
        _rewrite_entry(_queue_file(tmp_path / "s", "T", 0), 2, phys=future)
        assert _bodies(store, "T", 0) == [b"m%d" % i for i in range(5)]
        later = [store.put_messages([msg("T", 0, b"m%d" % i)]).messages[0] for i in range(5, 10)]
        assert later[2].phys_offset == future
        got = store.reads.get_messages("T", 0, 3, 32)
        assert [m.body for m in decode_records(got.data)] == [b"m%d" % i for i in range(3, 10)]
    finally:
        store.shutdown()


@pytest.mark.parametrize("where", ["inside another queue's record", "inside its own record",
                                   "in the blank closing a segment"])
def test_an_entry_whose_offset_lands_where_no_record_starts_is_rebuilt(
        tmp_path: Path, where: str) -> None:
    """A/0's entry 2 has its offset damaged: it lands inside a record, or inside the blank
    that closes a segment. It was reported as a damaged record at that offset, where no record
    starts; it is the entry that is wrong, and it is rebuilt."""
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
        _assert_every_queue_reads_whole(store)
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
