"""A short disk: the key index is preallocated to the space there is, so the data keeps most
of a small disk, and a refusal names the file that could not get its space."""

from __future__ import annotations

import errno
import os
import re
from pathlib import Path

from store_util import FakeClock, msg, open_store

from conftest import small_tmpfs
from ferrymq.common.record import decode_records
from ferrymq.store import FileIO, PutStatus
from ferrymq.store.index import MAX_DIFF, IndexFile

MiB = 1 << 20
# The default index geometry: a 42 MB file, more than a quarter of a 64 MiB disk.
DEFAULT_INDEX = {"index_hash_slots": 500_000, "index_max_entries": 2_000_000}
FULL_INDEX_FILE = IndexFile.size_for(500_000, 2_000_000)
NAMED = re.compile(r"writing the (commit-log segment|key-index file) (\S+), which needed (\d+) bytes")


def index_files(store_dir: Path) -> list[Path]:
    return sorted((store_dir / "index").iterdir())


def test_a_mostly_free_small_disk_keeps_taking_keyed_sends(tmp_path: Path) -> None:
    with small_tmpfs(tmp_path / "mnt", "64m") as mnt:
        (mnt / "someone-else").write_bytes(bytes(30 * MiB))  # 34 MiB of 64 left free
        root = mnt / "store"
        # Usage reported as 0: the refuse ratio must not pre-empt the real ENOSPC under test.
        s = open_store(root, commitlog_segment_size=4 * MiB, disk_usage=lambda _: 0.0,
                       **DEFAULT_INDEX)
        try:
            first = s.put_messages([msg(keys="first", uniq="u-first")])
            assert first.status is PutStatus.PUT_OK, first.reason
            [index_file] = index_files(root)
            assert index_file.stat().st_size <= 34 * MiB // 8
            acked: list[tuple[int, bytes]] = []
            n = 0
            while True:
                batch = [msg(keys=f"k{n + i}", uniq=f"u{n + i}", body=os.urandom(1000))
                         for i in range(4)]
                res = s.put_messages(batch)
                if res.status is not PutStatus.PUT_OK:
                    break
                acked += [(m.phys_offset, b.body) for m, b in zip(res.messages, batch, strict=True)]
                n += 4
                assert n < 200_000
            assert res.status is PutStatus.DISK_FULL, res.reason
            # The data got most of the 34 MiB, not what a 42 MB index file left of it.
            assert s.max_phy_offset > 24 * MiB
            named = NAMED.search(res.reason)
            assert named is not None, res.reason
            assert Path(named[2]).parent.parent == root and int(named[3]) > 0
            last_phys, last_body = acked[-1]
            raw = s.reads.read_record(last_phys)
            assert raw is not None and decode_records(raw)[0].body == last_body
            assert s.reads.query_by_key("T", f"k{n - 1}", 4) == [last_phys]
            assert s.reads.query_by_key("T", "first", 4) == [first.messages[0].phys_offset]
        finally:
            s.shutdown()


class NoRoomForFiles(FileIO):
    """Allocation (the index file's) fails with ENOSPC while `full` is set."""

    def __init__(self) -> None:
        self.full = True

    def fallocate(self, fd: int, offset: int, length: int) -> None:
        if self.full:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        super().fallocate(fd, offset, length)


def test_a_refusal_names_the_index_file_it_could_not_create(tmp_path: Path) -> None:
    io = NoRoomForFiles()
    root = tmp_path / "s"
    s = open_store(root, file_io=io)
    try:
        res = s.put_messages([msg(keys="k")])
        assert res.status is PutStatus.DISK_FULL
        named = NAMED.search(res.reason)
        assert named is not None, res.reason
        assert named[1] == "key-index file"
        assert Path(named[2]) == root / "index" / f"{0:020d}"
        assert int(named[3]) == IndexFile.size_for(256, 1024)  # store_util's small index
        assert s.max_phy_offset == 0 and index_files(root) == []
        io.full = False
        res = s.put_messages([msg(keys="k")])
        assert res.status is PutStatus.PUT_OK, res.reason
        assert s.reads.query_by_key("T", "k", 4) == [0]
    finally:
        s.shutdown()


class ShortDisk(FileIO):
    def __init__(self, free: int) -> None:
        self.free = free

    def free_bytes(self, path: Path) -> int:
        return self.free


def test_index_files_are_sized_to_the_free_space_and_reopen_with_their_own_size(
        tmp_path: Path) -> None:
    # Without root (no tmpfs) this is the short disk: free space as the store's FileIO sees it.
    io = ShortDisk(16 * MiB)
    root = tmp_path / "s"
    clock = FakeClock()
    s = open_store(root, file_io=io, clock=clock, **DEFAULT_INDEX)
    try:
        assert s.put_messages([msg(keys="a")]).status is PutStatus.PUT_OK
        [small] = index_files(root)
        assert 256 * 1024 <= small.stat().st_size <= 2 * MiB
        io.free = 1 << 40
        clock.advance(MAX_DIFF // 2 + 1)  # an index file spans at most this long: a new one
        assert s.put_messages([msg(keys="b")]).status is PutStatus.PUT_OK
        assert [f.stat().st_size for f in index_files(root)] == [small.stat().st_size,
                                                                FULL_INDEX_FILE]
    finally:
        s.shutdown()
    r = open_store(root, **DEFAULT_INDEX)
    try:
        assert r.reads.query_by_key("T", "a", 4) == [0]
        assert len(r.reads.query_by_key("T", "b", 4)) == 1
    finally:
        r.shutdown()
