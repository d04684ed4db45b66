"""The tests' hole-keeping copy: the same bytes as the original, without writing its holes."""

from __future__ import annotations

import os
from pathlib import Path

import sparse_copy

MiB = 1 << 20


def _sparse_file(path: Path) -> bytes:
    """64 MiB with data at the front, in the middle and at the very end; holes between."""
    with open(path, "wb") as f:
        f.truncate(64 * MiB)
        for at, data in ((0, b"head" * 1000), (30 * MiB + 5, b"middle"), (64 * MiB - 3, b"end")):
            f.seek(at)
            f.write(data)
    return path.read_bytes()


def test_a_copy_reads_back_the_same_bytes_and_leaves_the_holes_unwritten(tmp_path: Path) -> None:
    src = tmp_path / "src"
    content = _sparse_file(src)
    dst = tmp_path / "dst"
    assert sparse_copy.copy_file(src, dst) == str(dst)
    assert dst.read_bytes() == content
    # shutil.copy2 would allocate all 64 MiB; the data here is three small runs.
    assert os.stat(dst).st_blocks * 512 < 4 * MiB
    assert os.stat(dst).st_mtime_ns == os.stat(src).st_mtime_ns


def test_a_file_of_only_a_hole_and_an_empty_file_copy_to_their_sizes(tmp_path: Path) -> None:
    hole = tmp_path / "hole"
    with open(hole, "wb") as f:
        f.truncate(8 * MiB)
    (tmp_path / "empty").write_bytes(b"")
    sparse_copy.copy_file(hole, tmp_path / "hole2")
    sparse_copy.copy_file(tmp_path / "empty", tmp_path / "empty2")
    assert (tmp_path / "hole2").read_bytes() == bytes(8 * MiB)
    assert (tmp_path / "empty2").read_bytes() == b""


def test_a_tree_copies_every_file_with_its_holes(tmp_path: Path) -> None:
    (tmp_path / "a" / "b").mkdir(parents=True)
    content = _sparse_file(tmp_path / "a" / "b" / "log")
    (tmp_path / "a" / "small").write_bytes(b"x" * 10)
    out = sparse_copy.copytree(tmp_path / "a", tmp_path / "c")
    assert (out / "b" / "log").read_bytes() == content
    assert (out / "small").read_bytes() == b"x" * 10
    assert os.stat(out / "b" / "log").st_blocks * 512 < 4 * MiB
