"""The commit log as a replication source and target: spans of whole records, byte-identical
copies across segment roll-overs, dispatch into queues and index, truncation and epochs."""

from __future__ import annotations

import contextlib
import errno
import os
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from store_util import SMALL_SEGMENT, crash_image, crash_stop, msg, open_store, segment_files, wait_until

from ferrymq.store import GetResult, MessageStore, PutStatus
from ferrymq.store.epochs import EpochFile, agreed_end
from ferrymq.store.files import FileIO
from ferrymq.store.replica import ReplicaError, Span
from ferrymq.store.scrub import Scrubber


def copy_all(master: MessageStore, slave: MessageStore, max_bytes: int = 4096) -> int:
    spans = 0
    while True:
        span = master.replica.read_span(slave.max_phy_offset, max_bytes)
        if span is None:
            return spans
        slave.replica.append_replicated(span)
        spans += 1


def fill(store: MessageStore, n: int, body: int = 700) -> None:
    for i in range(n):
        r = store.put_messages([msg("T", i % 3, bytes([65 + i % 26]) * body, tags=f"t{i % 2}",
                                    keys=f"k{i}", uniq=f"U{i:06d}")])
        assert r.status is PutStatus.PUT_OK


def test_copy_is_byte_identical_across_segments(tmp_path: Path) -> None:
    master = open_store(tmp_path / "m")
    slave = open_store(tmp_path / "s")
    try:
        fill(master, 300)  # ~3.5 segments of 64 KiB: several blank records
        assert copy_all(master, slave) > 3
        assert slave.max_phy_offset == master.max_phy_offset
        assert len(segment_files(tmp_path / "s")) == len(segment_files(tmp_path / "m"))
        for a, b in zip(segment_files(tmp_path / "m"), segment_files(tmp_path / "s"), strict=True):
            assert a.name == b.name
            assert a.read_bytes()[: SMALL_SEGMENT] == b.read_bytes()[: SMALL_SEGMENT]
        for q in range(3):
            assert slave.reads.get_max_offset("T", q) == master.reads.get_max_offset("T", q)
            got = slave.reads.get_messages("T", q, 0, 500, max_bytes=1 << 30)
            want = master.reads.get_messages("T", q, 0, 500, max_bytes=1 << 30)
            assert got.status == want.status and got.data == want.data and got.count > 50
        assert slave.reads.query_by_uniq_key("T", "U000123") == master.reads.query_by_uniq_key("T", "U000123")
        fill(master, 5)
        copy_all(master, slave)
        assert slave.reads.get_max_offset("T", 0) == master.reads.get_max_offset("T", 0)
    finally:
        master.shutdown()
        slave.shutdown()


class FailRecordWrites(FileIO):
    """Writes of more than a blank record's 8 bytes fail with ENOSPC while `fail` is set: a
    put then rolls the log over (the blank closing the old segment is written) and fails."""

    def __init__(self) -> None:
        self.fail = False

    def write_fully(self, fd: int, data: bytes | bytearray | memoryview, pos: int) -> None:
        if self.fail and len(data) > 8:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        super().write_fully(fd, data, pos)


def test_a_span_up_to_an_end_a_failed_roll_over_left_stops_at_the_blank(tmp_path: Path) -> None:
    """The log's end can be a segment's end: a put that closed the segment with its blank and
    then failed leaves it there. A span read up to it ends with the blank, as one across a
    completed roll-over does (not with the zeros after it, which no slave would take)."""
    io = FailRecordWrites()
    master = open_store(tmp_path / "m", file_io=io)
    slave = open_store(tmp_path / "s")
    try:
        n = 0
        while master.max_phy_offset + 2_000 < SMALL_SEGMENT:
            fill_one = master.put_messages([msg("T", n % 3, b"r" * 700, uniq=f"U{n:06d}")])
            assert fill_one.status is PutStatus.PUT_OK
            n += 1
        io.fail = True
        failed = master.put_messages([msg("T", 0, b"x" * 3_000, uniq="UFAILED")])
        assert failed.status is PutStatus.DISK_FULL, failed.reason
        assert master.max_phy_offset == SMALL_SEGMENT  # the blank's segment is closed
        span = master.replica.read_span(0, 1 << 20)
        assert span is not None and span.next_pos == SMALL_SEGMENT
        assert len(span.data) < SMALL_SEGMENT - 2_000 + 3_000  # records and the blank, no zeros
        slave.replica.append_replicated(span)
        assert slave.max_phy_offset == SMALL_SEGMENT
        io.fail = False
        assert master.put_messages([msg("T", 0, b"y" * 3_000, uniq="UAFTER")]).status is PutStatus.PUT_OK
        copy_all(master, slave, 1 << 20)
        assert slave.max_phy_offset == master.max_phy_offset
        for a, b in zip(segment_files(tmp_path / "m"), segment_files(tmp_path / "s"), strict=True):
            assert a.read_bytes() == b.read_bytes()
    finally:
        master.shutdown()
        slave.shutdown()


def test_span_holds_whole_records_even_one_larger_than_asked(tmp_path: Path) -> None:
    master = open_store(tmp_path / "m")
    try:
        fill(master, 3, body=5000)
        span = master.replica.read_span(0, 100)
        assert span is not None and span.next_pos == len(span.data) > 5000
        nxt = master.replica.read_span(span.next_pos, 12_000)
        assert nxt is not None and nxt.next_pos == master.max_phy_offset
        assert master.replica.read_span(master.max_phy_offset, 100) is None
    finally:
        master.shutdown()


def test_slave_refuses_gaps_and_damaged_records(tmp_path: Path) -> None:
    master = open_store(tmp_path / "m")
    slave = open_store(tmp_path / "s")
    try:
        fill(master, 4)
        first = master.replica.read_span(0, 800)
        assert first is not None
        second = master.replica.read_span(first.next_pos, 800)
        assert second is not None
        with pytest.raises(ReplicaError, match="ends at 0"):
            slave.replica.append_replicated(second)
        bad = bytearray(first.data)
        bad[first.data.index(b"A" * 700) + 10] ^= 0xFF  # inside the body: CRC no longer matches
        with pytest.raises(ReplicaError, match="CRC"):
            slave.replica.append_replicated(Span(0, bytes(bad), first.next_pos))
        assert slave.max_phy_offset == 0 and slave.reads.get_max_offset("T", 0) == 0
        slave.replica.append_replicated(first)
        assert slave.max_phy_offset == first.next_pos
    finally:
        master.shutdown()
        slave.shutdown()


def test_truncate_cuts_log_queues_and_survives_restart(tmp_path: Path) -> None:
    store = open_store(tmp_path / "s")
    fill(store, 10)
    keep = store.reads.get_messages("T", 0, 0, 100).next_begin_offset
    cut_at = store.reads.read_queue_entries("T", 1, 2, 1)[0].phys_offset
    assert store.replica.truncate_log(cut_at) > 0
    assert store.max_phy_offset == cut_at
    assert store.reads.get_max_offset("T", 1) == 2
    assert store.reads.get_max_offset("T", 0) <= keep
    fill(store, 1)  # appends go on from the cut
    end = store.max_phy_offset
    store.shutdown()
    again = open_store(tmp_path / "s")
    try:
        assert again.max_phy_offset == end
    finally:
        again.shutdown()


def test_truncate_then_crash_recovers_at_the_cut(tmp_path: Path) -> None:
    store = open_store(tmp_path / "s")
    fill(store, 20)
    store.checkpoint()
    cut_at = store.reads.read_queue_entries("T", 0, 1, 1)[0].phys_offset
    store.replica.truncate_log(cut_at)
    crash_stop(store)  # no shutdown: the next start recovers as after a crash
    again = open_store(tmp_path / "s")
    try:
        assert again.max_phy_offset == cut_at
        assert again.reads.get_max_offset("T", 0) == 1
    finally:
        again.shutdown()


def test_agreed_end() -> None:
    assert agreed_end([(1, 0)], 500, [(1, 0)], 300) == 300
    assert agreed_end([(1, 0), (2, 400)], 900, [(1, 0)], 700) == 400  # old master wrote 400..700 alone
    assert agreed_end([(1, 0), (2, 400)], 900, [(1, 0), (2, 400)], 950) == 900
    assert agreed_end([(1, 0), (3, 500)], 900, [(1, 0), (2, 450)], 600) == 450
    assert agreed_end([(2, 0)], 100, [(1, 0)], 100) == 0


def test_epoch_file_round_trip(tmp_path: Path) -> None:
    f = EpochFile(tmp_path / "epochs.json")
    f.begin(1, 0)
    f.begin(1, 10)  # same epoch again: nothing changes
    f.begin(3, 500)
    with pytest.raises(ValueError, match="grow"):
        f.begin(2, 600)
    g = EpochFile(tmp_path / "epochs.json")
    g.load()
    assert g.entries() == [(1, 0), (3, 500)]
    g.replace([[1, 0], [3, 500], [4, 900]], end=800)
    assert g.entries() == [(1, 0), (3, 500)]


def test_keys_of_records_replicated_after_a_cut_are_found(tmp_path: Path) -> None:
    """A slave cuts the tail its master never had (keyed records: the index ends past the cut)
    and takes the master's records there: their keys must be found."""
    master = open_store(tmp_path / "m")
    slave = open_store(tmp_path / "s")
    try:
        fill(master, 2)
        copy_all(master, slave)
        common = slave.max_phy_offset
        for i in range(5):  # the tail the master never had
            r = slave.put_messages([msg("T", 0, b"x" * 700, keys=f"old{i}")])
            assert r.status is PutStatus.PUT_OK
        for i in range(3):
            r = master.put_messages([msg("T", 0, b"y" * 300, keys=f"new{i}")])
            assert r.status is PutStatus.PUT_OK
        assert slave.replica.truncate_log(common) > 0
        copy_all(master, slave)
        assert slave.max_phy_offset == master.max_phy_offset
        for i in range(3):
            assert slave.reads.query_by_key("T", f"new{i}", 5) == master.reads.query_by_key(
                "T", f"new{i}", 5) != [], i
    finally:
        master.shutdown()
        slave.shutdown()


class Killed(Exception):
    pass


def test_a_kill_right_after_truncate_cuts_the_log_recovers_at_the_cut(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Killed just after truncate_log cut the log, the last checkpoint (past the cut) must not
    make recovery end the log in the zeros the cut left."""
    master = open_store(tmp_path / "m", checkpoint_interval_ms=3_600_000)
    store = open_store(tmp_path / "s", checkpoint_interval_ms=3_600_000)
    image = tmp_path / "img"
    try:
        fill(master, 4)
        copy_all(master, store)
        cut_at = store.max_phy_offset
        fill(store, 20)  # the tail its master never had
        wait_until(lambda: store.flushed_offset == store.max_phy_offset, message="flush")
        assert store.checkpoint().consistent > cut_at
        real_truncate = store.commitlog.truncate

        def truncate_then_die(pos: int) -> None:
            real_truncate(pos)
            crash_image(store, image)  # what a SIGKILL here leaves
            raise Killed

        monkeypatch.setattr(store.commitlog, "truncate", truncate_then_die)
        with pytest.raises(Killed):
            store.replica.truncate_log(cut_at)
    finally:
        store.shutdown()
    fill(master, 5)
    again = open_store(image, checkpoint_interval_ms=3_600_000)
    try:
        assert again.max_phy_offset == cut_at
        copy_all(master, again)
        assert again.max_phy_offset == master.max_phy_offset
        assert again.reads.get_max_offset("T", 0) == master.reads.get_max_offset("T", 0)
    finally:
        again.shutdown()
        master.shutdown()


@dataclass
class Diverged:
    master: MessageStore
    slave: MessageStore
    cut_at: int  # where the slave's own tail begins: its cut back to its master
    first: int  # T/0's end at the cut


@contextlib.contextmanager
def diverged(tmp_path: Path) -> Iterator[Diverged]:
    """A master whose records its slave copied, and a tail the slave wrote on its own (its
    master never had it); both stores are shut down at the end."""
    master = open_store(tmp_path / "m")
    slave = open_store(tmp_path / "s", scrub_bytes_per_s=0)
    try:
        fill(master, 4)
        copy_all(master, slave)
        d = Diverged(master, slave, slave.max_phy_offset, slave.reads.get_max_offset("T", 0))
        fill(slave, 20)
        yield d
    finally:
        master.shutdown()
        slave.shutdown()


def _assert_slave_reads_as_master(master: MessageStore, slave: MessageStore) -> None:
    assert slave.damaged_records() == []
    for qid in range(3):
        got = slave.reads.get_messages("T", qid, 0, 100)
        want = master.reads.get_messages("T", qid, 0, 100)
        assert (got.status, got.count, got.data) == (want.status, want.count, want.data), qid


def _master_writes_on(d: Diverged) -> None:
    """The master's next records reach the slave, where its own tail was: the slave must read
    them all, with nothing reported."""
    fill(d.master, 9)
    copy_all(d.master, d.slave)
    _assert_slave_reads_as_master(d.master, d.slave)


def test_a_scrub_under_way_when_a_slave_cuts_its_log_reports_nothing_past_the_cut(
        tmp_path: Path) -> None:
    """The start's scrub checks the log up to where it ended then; a cut meanwhile zeroes the
    rest, where the master's records go next: the scrub must not call those zeros damage
    (reads leave out every record at a position the registry names)."""
    with diverged(tmp_path) as d:
        end = d.slave.max_phy_offset
        assert d.slave.replica.truncate_log(d.cut_at) > 0
        # The scrub of the start, still under way at the cut: it was to check up to `end`.
        scrub = Scrubber(d.slave.guard, 1 << 30, lambda: end)
        scrub.scrub(d.slave.min_phy_offset, end)
        _master_writes_on(d)


def test_damage_the_scrub_found_before_a_cut_and_reports_after_it_is_not_recorded(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The scrub checks a record of the slave's tail and finds it damaged; the cut comes
    before the scrub reports it. Recorded, the report hid the master's record written at that
    position next, from every read."""
    import ferrymq.store.scrub as scrub_module

    with diverged(tmp_path) as d:
        end = d.slave.max_phy_offset
        checked = scrub_module.check_record

        def check_then_cut(mm: object, o: int, pos: int, *rest: object) -> object:
            got = checked(mm, o, pos, *rest)  # type: ignore[arg-type]
            if pos < d.cut_at:
                return got
            assert d.slave.replica.truncate_log(d.cut_at) > 0  # between the check and the report
            monkeypatch.setattr(scrub_module, "check_record", checked)
            return "body CRC mismatch"  # what the check of the tail found

        monkeypatch.setattr(scrub_module, "check_record", check_then_cut)
        scrub = Scrubber(d.slave.guard, 1 << 30, lambda: end)
        scrub.scrub(d.slave.min_phy_offset, end)
        assert d.slave.max_phy_offset == d.cut_at
        _master_writes_on(d)


def test_damage_a_read_found_in_bytes_a_cut_removed_meanwhile_is_not_recorded(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A pull of the slave's tail reads the log while the cut (a worker thread) zeroes it
    there: the pull reads zeros and calls them damage. Recorded, the report hid the master's
    records written there next."""
    import ferrymq.store.reads as reads_module

    with diverged(tmp_path) as d:
        read_runs = reads_module._read_runs

        def read_under_a_cut(log: object, runs: list[list[int]], total: int) -> bytes | None:
            monkeypatch.setattr(reads_module, "_read_runs", read_runs)
            data = read_runs(log, runs, total)  # type: ignore[arg-type]
            assert data is not None
            assert d.slave.replica.truncate_log(d.cut_at) > 0  # while the pread ran: it read zeros
            return bytes(len(data))

        monkeypatch.setattr(reads_module, "_read_runs", read_under_a_cut)
        got = d.slave.reads.get_messages("T", 0, d.first, 100)
        assert got.count == 0, got.status
        _master_writes_on(d)


def test_a_pull_between_the_cut_of_the_log_and_of_its_queues_reports_nothing(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A pull of the slave (a reader thread) reads its queue's entries after truncate_log cut
    the log and before it cut the queues: they name bytes past the log's new end. Reported as
    damaged entries, or passed over, they hid the master's records written there next."""
    from ferrymq.store.consumequeue import ConsumeQueue

    with diverged(tmp_path) as d:
        truncate_phys, read_raw = ConsumeQueue.truncate_phys, ConsumeQueue.read_raw
        entries_read = threading.Event()
        pulled: list[GetResult] = []

        def read_raw_and_tell(self: ConsumeQueue, offset: int, n: int) -> bytes | None:
            raw = read_raw(self, offset, n)
            entries_read.set()
            return raw

        def pull() -> None:
            pulled.append(d.slave.reads.get_messages("T", 0, d.first, 100))

        def pull_then_cut_queue(self: ConsumeQueue, pos: int) -> None:
            if not entries_read.is_set():  # the log is cut, the queues not yet
                monkeypatch.setattr(ConsumeQueue, "read_raw", read_raw_and_tell)
                reader.start()
                assert entries_read.wait(30)
                monkeypatch.setattr(ConsumeQueue, "read_raw", read_raw)
            truncate_phys(self, pos)

        reader = threading.Thread(target=pull)
        monkeypatch.setattr(ConsumeQueue, "truncate_phys", pull_then_cut_queue)
        assert d.slave.replica.truncate_log(d.cut_at) > 0
        reader.join(30)
        assert pulled and pulled[0].count == 0
        assert pulled[0].next_begin_offset == d.first  # nothing passed over
        _master_writes_on(d)


def test_a_pull_while_a_span_is_dispatched_sees_no_entry_past_the_logs_end(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """append_replicated made the span's queue entries readable before it moved the log's end
    to the span's end: a pull of the slave in between saw entries naming bytes past the end
    and reported them as damaged; the master's messages were left out of the slave's reads.
    The entries now become readable after the log's end moves, as on a master."""
    master = open_store(tmp_path / "m")
    slave = open_store(tmp_path / "s", scrub_bytes_per_s=0)
    try:
        fill(master, 4)
        copy_all(master, slave)
        first = slave.reads.get_max_offset("T", 0)
        fill(master, 3)
        write_pending = slave.write_pending
        pulled = []

        def write_then_pull(*args: object, **kw: object) -> object:
            written = write_pending(*args, **kw)  # type: ignore[arg-type]
            if not pulled:  # a reader thread running now (readers take no lock)
                pulled.append(slave.reads.get_messages("T", 0, first, 100))
            return written

        monkeypatch.setattr(slave, "write_pending", write_then_pull)
        copy_all(master, slave)
        assert pulled
        _assert_slave_reads_as_master(master, slave)
    finally:
        master.shutdown()
        slave.shutdown()


def test_a_scrub_paused_between_records_across_a_cut_reports_no_sound_record(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The start's scrub is between two of the slave's own records when the slave cuts back
    to its master and copies its master's records, of other sizes, there. Going on at its old
    position (the middle of a master's record) it reported sound records as damage; it now
    finds its step again at the end of the record it landed in."""
    import ferrymq.store.scrub as scrub_module

    master = open_store(tmp_path / "m", scrub_bytes_per_s=0)
    slave = open_store(tmp_path / "s", scrub_bytes_per_s=0)
    for i in range(2):
        master.put_messages([msg("T", 0, b"shared-%d" % i)])
    copy_all(master, slave)
    cut_at = slave.max_phy_offset
    own = [slave.put_messages([msg("T", 0, b"x" * 100)]).messages[0].phys_offset
           for _ in range(8)]  # written as a master, never its new master's
    slave.shutdown()
    paused, go = threading.Event(), threading.Event()
    checked = scrub_module.check_record

    def pausing_check(mm: object, o: int, pos: int, *rest: object) -> object:
        if pos == own[5] and not paused.is_set():  # between records when the cut comes
            paused.set()
            go.wait(30)
        return checked(mm, o, pos, *rest)  # type: ignore[arg-type]

    monkeypatch.setattr(scrub_module, "check_record", pausing_check)
    slave = open_store(tmp_path / "s", scrub_bytes_per_s=64 * 1024 * 1024)
    try:
        assert paused.wait(30)
        for i in range(8):  # other sizes: the old boundaries fall inside these records
            master.put_messages([msg("T", 0, b"y" * (137 + 13 * i))])
        slave.replica.truncate_log(cut_at)
        copy_all(master, slave)
        go.set()
        assert slave.scrubber is not None
        wait_until(slave.scrubber.done.is_set, message="the scrub's pass ended")
        assert slave.damaged_records() == []
        assert slave.reads.get_messages("T", 0, 0, 32).count == 10
    finally:
        go.set()
        slave.shutdown()
        master.shutdown()
