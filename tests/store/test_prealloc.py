"""Zero-filled commit-log space ahead of the writer: it never overwrites a record, it creates
the next segment off the writer's path, its failures (ENOSPC) never fail a write, and
retention never deletes the segment being written because one was preallocated after it."""

from __future__ import annotations

import errno
import functools
import logging
import os
import random
import struct
import threading
import time
from pathlib import Path

import pytest
from store_util import SMALL_SEGMENT, crash_image, msg, open_store, segment_files, wait_until

from conftest import small_tmpfs
from ferrymq.common.record import BLANK_MAGIC_CODE, decode_records
from ferrymq.store import FileIO, GetStatus, MessageStore, PutStatus
from ferrymq.store.prealloc import CHUNK


def _bodies(store: MessageStore) -> list[bytes]:
    out: list[bytes] = []
    offset = store.reads.get_min_offset("T", 0)  # retention may have taken the oldest
    while True:
        r = store.reads.get_messages("T", 0, offset, 64)
        if r.status is not GetStatus.FOUND:
            return out
        out += [m.body for m in decode_records(r.data)]
        offset = r.next_begin_offset


def _ahead(store: MessageStore) -> bool:
    pre = store.preallocator
    assert pre is not None
    return pre.filled >= store.max_phy_offset + pre.gap + pre.chunk


def test_records_survive_zero_filling_ahead_of_them(tmp_path: Path) -> None:
    s = open_store(tmp_path / "s", preallocate_ahead_bytes=48 * 1024)
    try:
        sent = []
        for i in range(1500):
            body = os.urandom(300) + i.to_bytes(4, "big")
            assert s.put_messages([msg(body=body)]).status is PutStatus.PUT_OK
            sent.append(body)
            if i % 300 == 0:  # let the filler get ahead now and then
                wait_until(lambda: _ahead(s), timeout=60, message="zeros ahead of the writer")
        assert s.preallocator is not None and s.preallocator.zeroed_bytes > 0
        assert _bodies(s) == sent
    finally:
        s.shutdown()
    r = open_store(tmp_path / "s")
    try:
        assert not r.recovered_abnormally and _bodies(r) == sent
    finally:
        r.shutdown()


def test_the_next_segment_is_created_ahead_and_retention_keeps_the_current_one(
        tmp_path: Path) -> None:
    s = open_store(tmp_path / "s", preallocate_ahead_bytes=1 << 20)
    try:
        while s.max_phy_offset < SMALL_SEGMENT:  # the writer is in the second segment
            assert s.put_messages([msg(body=b"x" * 400)]).ok
        wait_until(lambda: len(segment_files(tmp_path / "s")) == 3,
                   message="the segment after the current one preallocated")
        current = s.max_phy_offset
        report = s.retention.run_cleanup(now_ms=2**62)  # everything is expired
        assert len(report.deleted_segments) == 1  # the full one; not current, not the next
        res = s.put_messages([msg(body=b"after cleanup")])
        assert res.ok and res.messages[0].phys_offset == current
        raw = s.reads.read_record(current)
        assert raw is not None and decode_records(raw)[0].body == b"after cleanup"
    finally:
        s.shutdown()


class NoSpaceForZeros(FileIO):
    def __init__(self) -> None:
        self.attempts = 0

    def zero_fill(self, fd: int, pos: int, length: int) -> None:
        self.attempts += 1
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def test_enospc_while_preallocating_never_fails_a_write(tmp_path: Path,
                                                        caplog: pytest.LogCaptureFixture) -> None:
    io = NoSpaceForZeros()
    caplog.set_level(logging.WARNING, logger="ferrymq.store")
    s = open_store(tmp_path / "s", file_io=io, preallocate_ahead_bytes=48 * 1024)
    try:
        sent = []
        for i in range(400):
            body = b"b%05d" % i
            assert s.put_messages([msg(body=body)]).status is PutStatus.PUT_OK
            sent.append(body)
        wait_until(lambda: io.attempts > 0, message="a preallocation attempt")
        assert _bodies(s) == sent
        warnings = [r for r in caplog.records if "cannot preallocate" in r.getMessage()]
        assert len(warnings) == 1
    finally:
        s.shutdown()


def test_a_crash_with_a_preallocated_segment_recovers_every_record(tmp_path: Path) -> None:
    s = open_store(tmp_path / "s", preallocate_ahead_bytes=1 << 20)
    try:
        sent = []
        while s.max_phy_offset < SMALL_SEGMENT + 4096:
            body = os.urandom(200)
            assert s.put_messages([msg(body=body)]).ok
            sent.append(body)
        wait_until(lambda: len(segment_files(tmp_path / "s")) == 3 and _ahead(s), timeout=60,
                   message="zeros and a segment ahead of the writer")
        image = crash_image(s, tmp_path / "img")
    finally:
        s.shutdown()
    r = open_store(image, preallocate_ahead_bytes=1 << 20)
    try:
        assert r.recovered_abnormally and _bodies(r) == sent
        assert r.put_messages([msg(body=b"after")]).ok
    finally:
        r.shutdown()


def test_a_fresh_store_is_filled_from_right_behind_its_first_write(tmp_path: Path) -> None:
    # A hole right after the write position costs every fdatasync of the first writes a block
    # allocation; the filler must not leave one between the writer and what it fills ahead.
    segment = 4 << 20
    s = open_store(tmp_path / "s", commitlog_segment_size=segment,
                   preallocate_ahead_bytes=2 << 20)
    try:
        pre = s.preallocator
        assert pre is not None and pre.gap > 0
        assert s.put_messages([msg(body=b"first")]).ok
        wait_until(lambda: pre.filled >= 2 << 20, message="zeros ahead of a fresh store")
        first = segment_files(tmp_path / "s")[0]
        fd = os.open(first, os.O_RDONLY)
        try:
            first_hole = os.lseek(fd, 0, os.SEEK_HOLE)
        finally:
            os.close(fd)
        assert first_hole >= 2 << 20
        assert s.put_messages([msg(body=b"second")]).ok
        assert _bodies(s) == [b"first", b"second"]
    finally:
        s.shutdown()


def test_an_empty_log_with_a_filler_can_still_start_at_its_masters_first_offset(
        tmp_path: Path) -> None:
    # A slave's empty log is moved to its master's first offset when the master's older
    # segments are gone; a filler that created a first segment at 0 would make it refuse.
    s = open_store(tmp_path / "s", preallocate_ahead_bytes=1 << 20)
    try:
        pre = s.preallocator
        assert pre is not None
        wait_until(lambda: pre.wakes > 0, message="the filler's first look")
        start = 5 * SMALL_SEGMENT + 128
        s.replica.restart_at(start)
        res = s.put_messages([msg(body=b"at the master's first offset")])
        assert res.ok and res.messages[0].phys_offset == start
        assert _bodies(s) == [b"at the master's first offset"]
    finally:
        s.shutdown()


class GatedZeros(FileIO):
    """The first zero-fill waits at a gate: the filler is held in the middle of a range."""

    def __init__(self) -> None:
        self.started = threading.Event()
        self.gate = threading.Event()
        self.ranges: list[tuple[int, int]] = []

    def zero_fill(self, fd: int, pos: int, length: int) -> None:
        self.ranges.append((pos, length))
        if not self.started.is_set():
            self.started.set()
            assert self.gate.wait(30), "the test never opened the gate"
        super().zero_fill(fd, pos, length)


def test_zeros_never_cover_the_blank_that_closes_a_segment(tmp_path: Path) -> None:
    # Rolling to the next segment, the writer marks the end of the current one with a blank
    # record where the last write ended, before it claims the bytes it writes next. A filler
    # caught up with the writer (a fresh log's first fill starts right behind its first
    # write) must not zero that spot: recovery would read zeros as the end of the log and
    # lose everything after them.
    io = GatedZeros()
    s = open_store(tmp_path / "s", file_io=io, preallocate_ahead_bytes=SMALL_SEGMENT)
    try:
        big = os.urandom(SMALL_SEGMENT - 600)  # the first record nearly fills the segment
        assert s.put_messages([msg(body=big)]).ok
        assert io.started.wait(10), "the filler never started"
        second: list[bool] = []
        writer = threading.Thread(
            target=lambda: second.append(s.put_messages([msg(body=b"y" * 700)]).ok))
        writer.start()  # does not fit: a blank closes segment 0, the record goes to segment 1
        wait_until(lambda: s.max_phy_offset >= SMALL_SEGMENT or not writer.is_alive()
                   or _blank_written(tmp_path / "s"), message="the blank record written")
        io.gate.set()
        writer.join(10)
        assert second == [True]
        image = crash_image(s, tmp_path / "img")
    finally:
        io.gate.set()
        s.shutdown()
    r = open_store(image)
    try:
        assert _bodies(r) == [big, b"y" * 700]
    finally:
        r.shutdown()


def _blank_written(store_dir: Path) -> bool:
    first = segment_files(store_dir)[0].read_bytes()
    return struct.pack(">i", BLANK_MAGIC_CODE) in first[SMALL_SEGMENT - 700:]


class ZerosGatedOffSegment(FileIO):
    """The first zero-fill of a file other than the first one zeroed (a fresh log's first
    segment: the filler starts behind the writer's first write) waits at a gate. Decided by
    the filler's own calls, not by when the test looks: the filler may be into the second
    segment before the test's next line runs, or not yet."""

    def __init__(self) -> None:
        self.free_fd = -1
        self.waiting = threading.Event()
        self.gate = threading.Event()
        self.passed = threading.Event()  # the gated zero-fill is over

    def zero_fill(self, fd: int, pos: int, length: int) -> None:
        if self.free_fd < 0:
            self.free_fd = fd
        gated = fd != self.free_fd and not self.waiting.is_set()
        if gated:
            self.waiting.set()
            assert self.gate.wait(30), "the test never opened the gate"
        try:
            super().zero_fill(fd, pos, length)
        finally:
            if gated:
                self.passed.set()


def test_a_cut_waits_for_the_range_being_zeroed(tmp_path: Path) -> None:
    # A slave's log cut back to its master's closes the segments past the cut. The filler,
    # zeroing the preallocated next segment, must not be left writing to a closed descriptor:
    # its number is reused by the next file opened, and the zeros would land there.
    io = ZerosGatedOffSegment()
    s = open_store(tmp_path / "s", file_io=io, preallocate_ahead_bytes=SMALL_SEGMENT)
    victim = tmp_path / "victim"
    try:
        assert s.put_messages([msg(body=b"kept")]).ok
        cut_at = s.max_phy_offset
        assert s.put_messages([msg(body=b"cut")]).ok
        # Filling `ahead` past the writer takes the filler into segment 1, where it waits.
        assert io.waiting.wait(10), "the filler never reached the next segment"
        assert io.free_fd == segment_fds(s)[0]
        cut = threading.Thread(target=s.replica.truncate_log, args=(cut_at,))
        cut.start()
        cut.join(0.5)  # a cut that does not wait is over by now
        fd = os.open(victim, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            os.write(fd, b"v" * SMALL_SEGMENT)
            io.gate.set()
            cut.join(10)
            assert not cut.is_alive()
            assert io.passed.wait(10)
            assert os.pread(fd, SMALL_SEGMENT, 0) == b"v" * SMALL_SEGMENT
        finally:
            os.close(fd)
        assert _bodies(s) == [b"kept"]
        assert s.put_messages([msg(body=b"after the cut")]).ok
        assert _bodies(s) == [b"kept", b"after the cut"]
    finally:
        io.gate.set()
        s.shutdown()


def segment_fds(store: MessageStore) -> list[int]:
    return [seg.fd for seg in store.commitlog.segments]


class ZerosGatedAt(FileIO):
    """The zero-fill of the range starting at `gated_pos` (in any segment) waits at a gate."""

    def __init__(self, gated_pos: int) -> None:
        self.gated_pos = gated_pos
        self.waiting = threading.Event()
        self.gate = threading.Event()

    def zero_fill(self, fd: int, pos: int, length: int) -> None:
        if pos == self.gated_pos and not self.waiting.is_set():
            self.waiting.set()
            assert self.gate.wait(30), "the test never opened the gate"
        super().zero_fill(fd, pos, length)


def test_a_claim_ending_just_below_the_range_being_zeroed_waits_for_it(tmp_path: Path) -> None:
    # The filler never starts a range within 8 bytes of the latest claim, but a claim made
    # while a range is being zeroed may end up to 8 bytes below its start. If the next record
    # does not fit, the blank that closes the segment is written there, unclaimed, and the
    # zeros still in flight land on it: recovery then reads the end of the log there.
    chunk = min(CHUNK, SMALL_SEGMENT // 16)  # the filler's range size
    last_chunk = SMALL_SEGMENT - chunk  # the range held: the last chunk of segment 0
    io = ZerosGatedAt(last_chunk)
    s = open_store(tmp_path / "t", preallocate_ahead_bytes=SMALL_SEGMENT, file_io=io)
    sent: list[bytes] = []
    try:
        pre = s.preallocator
        assert pre is not None
        first = b"f" * 100
        res = s.put_messages([msg(body=first)])
        assert res.ok
        sent.append(first)
        overhead = res.end_offset - len(first)  # the same topic and properties throughout
        assert io.waiting.wait(10), "the filler never reached the last chunk of segment 0"
        # A record ending exactly where the held range starts, then one that does not fit.
        filler_body = b"g" * (last_chunk - res.end_offset - overhead)
        big = os.urandom(chunk)
        done: list[bool] = []

        def writes() -> None:
            done.append(s.put_messages([msg(body=filler_body)]).ok)
            done.append(s.put_messages([msg(body=big)]).ok)

        writer = threading.Thread(target=writes)
        writer.start()
        # Either the writer waits for the held range, or (unguarded) it has already written
        # the blank at the end of segment 0 and waits for the range to claim segment 1.
        wait_until(lambda: pre.claim_waits > 0, message="the writer waiting for the filler")
        io.gate.set()
        writer.join(10)
        assert done == [True, True]
        sent += [filler_body, big]
        seg0 = segment_files(tmp_path / "t")[0]
        with seg0.open("rb") as f:
            f.seek(last_chunk)
            size, magic = struct.unpack(">ii", f.read(8))
        assert (size, magic) == (chunk, BLANK_MAGIC_CODE)
        image = crash_image(s, tmp_path / "img")
    finally:
        io.gate.set()
        s.shutdown()
    r = open_store(image)
    try:
        assert r.recovered_abnormally and _bodies(r) == sent
    finally:
        r.shutdown()


class FillerCreationGated(FileIO):
    """Once `armed`, a segment the filler creates waits at a gate between the file's creation
    and its entry in the log's segment list."""

    def __init__(self, segment_size: int) -> None:
        self.segment_size = segment_size
        self.armed = False
        self.waiting = threading.Event()
        self.gate = threading.Event()

    def ftruncate(self, fd: int, size: int) -> None:
        if (self.armed and size == self.segment_size and not self.waiting.is_set()
                and threading.current_thread().name == "ferrymq-store-prealloc"):
            self.waiting.set()
            assert self.gate.wait(30), "the test never opened the gate"
        super().ftruncate(fd, size)


def test_a_cut_and_the_fillers_new_segment_keep_the_log_contiguous(tmp_path: Path) -> None:
    # The filler creates the segment after the writer's off the store's lock. A slave's log
    # cut meanwhile removes the segments past the cut; the filler's segment then entered the
    # log behind the cut's back, one segment past its end: a gap, so that the writer's next
    # roll-over went to the wrong file and the store refused to start again.
    io = FillerCreationGated(SMALL_SEGMENT)
    s = open_store(tmp_path / "s", file_io=io, preallocate_ahead_bytes=SMALL_SEGMENT)
    try:
        assert s.put_messages([msg(body=b"kept")]).ok
        cut_at = s.max_phy_offset
        # The filler creates segment 1 while the writer is still in segment 0 (it fills one
        # segment ahead): only the creation of segment 2 is held.
        wait_until(lambda: len(segment_files(tmp_path / "s")) == 2, message="segment 1 created")
        io.armed = True
        while s.max_phy_offset < SMALL_SEGMENT:  # the writer goes on into segment 1
            assert s.put_messages([msg(body=b"c" * 500)]).ok
        assert io.waiting.wait(10), "the filler never created segment 2"
        cut = threading.Thread(target=s.replica.truncate_log, args=(cut_at,))
        cut.start()
        cut.join(1.0)  # a cut that does not wait for the new segment is over by now
        io.gate.set()
        cut.join(10)
        assert not cut.is_alive()
    finally:
        io.gate.set()
        s.shutdown()  # joins the filler: whatever it created is on disk now
    starts = [int(p.name) for p in segment_files(tmp_path / "s")]
    assert starts == [i * SMALL_SEGMENT for i in range(len(starts))]
    r = open_store(tmp_path / "s", preallocate_ahead_bytes=SMALL_SEGMENT)
    try:
        assert _bodies(r) == [b"kept"]
        after = [b"%04d" % i + b"a" * 500 for i in range(300)]  # past two roll-overs
        for body in after:
            assert r.put_messages([msg(body=body)]).ok
        assert _bodies(r) == [b"kept", *after]
    finally:
        r.shutdown()


def _assert_closed_by_blanks(store_dir: Path, end: int) -> None:
    """Record by record through every segment before the one holding `end`: each is closed
    by a blank record running exactly to its end (zeros there read as the end of the log)."""
    for path in segment_files(store_dir):
        if int(path.name) + SMALL_SEGMENT > end:
            return
        data = path.read_bytes()
        pos = 0
        while True:
            size, magic = struct.unpack_from(">ii", data, pos)
            assert size > 0, f"{path.name}: no record at {pos}"
            if magic == BLANK_MAGIC_CODE:
                assert pos + size == SMALL_SEGMENT, f"{path.name}: blank at {pos} of {size}"
                break
            pos += size


class SlowZeros(FileIO):
    """A slow disk under the filler: each range's zeros land a moment after it is taken, so
    the writer's appends and blanks interleave with them."""

    def zero_fill(self, fd: int, pos: int, length: int) -> None:
        time.sleep(0.0005)
        super().zero_fill(fd, pos, length)


def test_every_record_survives_restarts_and_crashes_under_concurrent_filling(
        tmp_path: Path) -> None:
    # Records of random sizes (small ones, and large ones that close segments with blanks of
    # every length) written while the filler works ahead of them, sometimes caught up with
    # it; each round ends with a clean stop or a crash, and every byte of every record must
    # read back after the reopen (the store checks each record's CRC as it reads it).
    rng = random.Random(20261127)
    store_dir = tmp_path / "r0"
    sent: list[bytes] = []
    for round_no in range(6):
        s = open_store(store_dir, preallocate_ahead_bytes=SMALL_SEGMENT, file_io=SlowZeros())
        try:
            assert _bodies(s) == sent
            for i in range(250):
                size = rng.choice((rng.randint(1, 400), rng.randint(400, 4000),
                                   rng.randint(8000, SMALL_SEGMENT // 2)))
                body = b"%02d%04d" % (round_no, i) + rng.randbytes(size)
                assert s.put_messages([msg(body=body)]).ok
                sent.append(body)
                if i % 50 == 0:  # let the filler get ahead now and then
                    wait_until(functools.partial(_ahead, s), timeout=60,
                               message="zeros ahead of the writer")
            assert _bodies(s) == sent
            _assert_closed_by_blanks(store_dir, s.max_phy_offset)
            if round_no % 2:
                store_dir = crash_image(s, tmp_path / f"r{round_no + 1}")
        finally:
            s.shutdown()
    s = open_store(store_dir)
    try:
        assert _bodies(s) == sent
    finally:
        s.shutdown()


def test_a_real_full_disk_under_the_filler_loses_no_acknowledged_record(tmp_path: Path) -> None:
    # The filler and the writer take space from the same small file system until it is full:
    # whoever meets ENOSPC, every acknowledged record reads back, before and after a reopen,
    # and writes resume once space is freed.
    segment = 1 << 20
    with small_tmpfs(tmp_path / "mnt", "8m") as mnt:
        s = open_store(mnt / "store", commitlog_segment_size=segment, disk_usage=lambda _: 0.0,
                       preallocate_ahead_bytes=segment)
        acked: list[bytes] = []
        try:
            status = PutStatus.PUT_OK
            n = 0
            while status is PutStatus.PUT_OK:
                n += 1
                body = os.urandom(3000) + n.to_bytes(4, "big")
                res = s.put_messages([msg(body=body)])
                status = res.status
                if status is PutStatus.PUT_OK:
                    acked.append(body)
                assert n < 10_000
            assert status is PutStatus.DISK_FULL, res.reason
            assert s.preallocator is not None and s.preallocator.zeroed_bytes > 0
            assert _bodies(s) == acked
            s.retention.run_cleanup(now_ms=2**62)  # space comes back as retention frees it
            kept = _bodies(s)
            assert kept == acked[len(acked) - len(kept):]
            res = s.put_messages([msg(body=b"after")])
            assert res.status is PutStatus.PUT_OK, res.reason
            kept.append(b"after")
        finally:
            s.shutdown()
        r = open_store(mnt / "store", commitlog_segment_size=segment, disk_usage=lambda _: 0.0,
                       preallocate_ahead_bytes=segment)
        try:
            assert not r.recovered_abnormally and _bodies(r) == kept
        finally:
            r.shutdown()
