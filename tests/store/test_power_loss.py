"""A power loss keeps what was fsynced and nothing else, names in directories included: a file
created since its directory was last fsynced may be gone after it (POSIX; the commit log and
the offset journal fsync their directory for that). These tests track every directory fsync and
build the image such a power loss may leave: the files as they are, less every name their
directory did not have durably."""

from __future__ import annotations

import errno
import os
import shutil
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest
from store_util import msg, open_store, queue_bodies

import sparse_copy
from ferrymq.store import FileIO, FlushDiskType, MessageStore, PutStatus

# Only the checkpoints the test writes itself.
QUIET = {"checkpoint_interval_ms": 3_600_000, "flush_disk_type": FlushDiskType.SYNC_FLUSH}


class DirSyncs:
    """The names each directory held at its last fsync."""

    def __init__(self) -> None:
        self.durable: dict[str, set[str]] = {}


@pytest.fixture
def dir_syncs(monkeypatch: pytest.MonkeyPatch) -> Iterator[DirSyncs]:
    syncs = DirSyncs()
    real = os.fsync

    def fsync(fd: int) -> None:
        real(fd)
        if stat.S_ISDIR(os.fstat(fd).st_mode):
            path = os.readlink(f"/proc/self/fd/{fd}")
            syncs.durable[path] = set(os.listdir(path))

    monkeypatch.setattr(os, "fsync", fsync)
    yield syncs


def power_loss_image(root: Path, dest: Path, syncs: DirSyncs) -> Path:
    """`root` copied to `dest`, less every name its directory never fsynced (and what lies
    under it). `root` itself counts as durable (the test made it)."""
    sparse_copy.copytree(root, dest)

    def prune(src: Path, dst: Path) -> None:
        kept = syncs.durable.get(str(src), set())
        for name in os.listdir(dst):
            if name not in kept:
                target = dst / name
                if target.is_dir():
                    shutil.rmtree(target)
                else:
                    target.unlink()
            elif (dst / name).is_dir():
                prune(src / name, dst / name)

    prune(root.resolve(), dest)
    return dest


def put_keyed(s: MessageStore, n: int) -> dict[int, int]:
    """n messages with keys k0.., one put each; returns where each was stored."""
    where = {}
    for i in range(n):
        res = s.put_messages([msg("T", 0, b"x", keys=f"k{i}")])
        assert res.status is PutStatus.PUT_OK
        where[i] = res.messages[0].phys_offset
    return where


def assert_keys_found(image: Path, where: dict[int, int]) -> None:
    """The store in `image` (index files of 15 keys) finds every key where it was stored."""
    r = open_store(image, index_max_entries=16, **QUIET)
    try:
        for i, phys in where.items():
            assert r.reads.query_by_key("T", f"k{i}", 5) == [phys], i
    finally:
        r.shutdown()


def test_a_new_topics_queue_survives_a_power_loss_after_a_checkpoint(
        tmp_path: Path, dir_syncs: DirSyncs) -> None:
    s = open_store(tmp_path / "s", **QUIET)
    try:
        sent = [f"m{i}".encode() for i in range(10)]
        for b in sent:
            assert s.put_messages([msg("NEW", 0, b)]).status is PutStatus.PUT_OK
        s.checkpoint()  # the queue's entries are fsynced, the checkpoint passes them
        image = power_loss_image(tmp_path / "s", tmp_path / "img", dir_syncs)
    finally:
        s.shutdown()
    r = open_store(image, **QUIET)
    try:
        assert r.recovered_abnormally
        assert queue_bodies(r, "NEW") == sent
    finally:
        r.shutdown()


def test_a_queues_next_file_survives_a_power_loss_after_a_checkpoint(
        tmp_path: Path, dir_syncs: DirSyncs) -> None:
    s = open_store(tmp_path / "s", **QUIET)  # 64 entries a queue file
    try:
        sent = [f"m{i}".encode() for i in range(100)]
        for b in sent[:10]:
            assert s.put_messages([msg("T", 0, b)]).status is PutStatus.PUT_OK
        s.checkpoint()
        for b in sent[10:]:
            assert s.put_messages([msg("T", 0, b)]).status is PutStatus.PUT_OK
        s.checkpoint()
        image = power_loss_image(tmp_path / "s", tmp_path / "img", dir_syncs)
    finally:
        s.shutdown()
    r = open_store(image, **QUIET)
    try:
        assert queue_bodies(r, "T") == sent
        res = r.put_messages([msg("T", 0, b"next")])
        assert res.messages[0].queue_offset == 100
    finally:
        r.shutdown()


def test_keys_in_a_new_index_file_survive_a_power_loss_after_a_checkpoint(
        tmp_path: Path, dir_syncs: DirSyncs) -> None:
    s = open_store(tmp_path / "s", index_max_entries=16, **QUIET)
    try:
        where = put_keyed(s, 40)
        s.checkpoint()
        image = power_loss_image(tmp_path / "s", tmp_path / "img", dir_syncs)
    finally:
        s.shutdown()
    assert_keys_found(image, where)


class FailingQueueSync(FileIO):
    """fsync of consume-queue files fails (EIO) while `failing`; remembers each file's length
    at its last successful fsync (queue files only grow by appends: their content then)."""

    def __init__(self) -> None:
        self.failing = False
        self.synced: dict[str, int] = {}

    def fsync(self, fd: int) -> None:
        path = os.readlink(f"/proc/self/fd/{fd}")
        if "/consumequeue/" in path:
            if self.failing:
                raise OSError(errno.EIO, "injected EIO")
            super().fsync(fd)
            self.synced[path] = os.fstat(fd).st_size
            return
        super().fsync(fd)


def test_a_checkpoint_whose_queue_fsync_failed_does_not_pass_the_entries(
        tmp_path: Path, dir_syncs: DirSyncs) -> None:
    io = FailingQueueSync()
    root = tmp_path / "s"
    s = open_store(root, file_io=io, **QUIET)
    try:
        sent = [f"m{i}".encode() for i in range(10)]
        for b in sent[:4]:
            assert s.put_messages([msg("T", 0, b)]).status is PutStatus.PUT_OK
        s.checkpoint()
        for b in sent[4:]:
            assert s.put_messages([msg("T", 0, b)]).status is PutStatus.PUT_OK
        io.failing = True
        s.checkpoint()  # the queue file's fsync fails
        image = power_loss_image(root, tmp_path / "img", dir_syncs)
        # What the power loss keeps of the queue files: what their last good fsync wrote.
        for path, size in io.synced.items():
            os.truncate(image / Path(path).relative_to(root.resolve()), size)
    finally:
        io.failing = False
        s.shutdown()
    r = open_store(image, **QUIET)
    try:
        assert queue_bodies(r, "T") == sent
    finally:
        r.shutdown()


def test_a_checkpoint_whose_index_fsync_failed_does_not_pass_the_keys(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    synced: dict[str, bytes] = {}  # each index file as its last good fsync left it
    failing = False
    real = os.fsync

    def fsync(fd: int) -> None:
        path = os.readlink(f"/proc/self/fd/{fd}")
        if path.startswith(f"{tmp_path.resolve()}/s/index/"):  # this test's store only
            if failing:
                raise OSError(errno.EIO, "injected EIO")
            real(fd)
            synced[path] = Path(path).read_bytes()
            return
        real(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    root = tmp_path / "s"
    s = open_store(root, **QUIET)
    try:
        where = {}
        for i in range(10):
            res = s.put_messages([msg("T", 0, b"x", keys=f"k{i}")])
            assert res.status is PutStatus.PUT_OK
            where[i] = res.messages[0].phys_offset
            if i == 3:
                s.checkpoint()
        failing = True
        s.checkpoint()  # the index file's fsync fails
        image = tmp_path / "img"
        sparse_copy.copytree(root, image)
        # What a power loss keeps of the index: what its last good fsync wrote.
        for path, data in synced.items():
            (image / Path(path).relative_to(root.resolve())).write_bytes(data)
    finally:
        failing = False
        s.shutdown()
    r = open_store(image, **QUIET)
    try:
        for i in range(10):
            assert r.reads.query_by_key("T", f"k{i}", 5) == [where[i]], i
    finally:
        r.shutdown()


def test_keys_of_every_index_file_filled_since_the_last_checkpoint_survive_a_power_loss(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    synced: dict[str, bytes] = {}  # each index file as its last fsync left it
    real = os.fsync

    def fsync(fd: int) -> None:
        real(fd)
        path = os.readlink(f"/proc/self/fd/{fd}")
        if path.startswith(f"{tmp_path.resolve()}/s/index/"):  # this test's store only
            synced[path] = Path(path).read_bytes()

    monkeypatch.setattr(os, "fsync", fsync)
    root = tmp_path / "s"
    s = open_store(root, index_max_entries=16, **QUIET)  # 15 keys a file
    try:
        where = put_keyed(s, 40)  # three files between two checkpoints
        s.checkpoint()
        image = tmp_path / "img"
        sparse_copy.copytree(root, image)
        # What a power loss keeps of the index: what its last fsync wrote, else nothing.
        for f in (image / "index").iterdir():
            src = str((root / "index" / f.name).resolve())
            f.write_bytes(synced.get(src, bytes(f.stat().st_size)))
    finally:
        s.shutdown()
    assert_keys_found(image, where)
