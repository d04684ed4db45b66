"""Copies of store files that keep their holes.

A store's files are mostly holes: a commit-log segment is sized to a whole segment (1 GiB by
default) when it is opened and written from the front. `shutil.copy2` writes every byte it
reads, so one image of a store cost a test a gigabyte of disk, and a suite run ran the disk of
a small machine full. These copies write only the ranges that hold data and leave the rest as
holes of the same size, so a copy reads back byte for byte what the original does.

Importable from every test directory as `sparse_copy` (tests/ is on sys.path through the root
conftest)."""

from __future__ import annotations

import errno
import os
import shutil
from pathlib import Path

_CHUNK = 1 << 20


def copy_file(src: str | os.PathLike[str], dst: str | os.PathLike[str]) -> str:
    """`src` copied to `dst` with its holes kept, and its mode and times, as `shutil.copy2`
    does. Returns `dst`, so it can be `shutil.copytree`'s copy function."""
    with open(src, "rb") as fin, open(dst, "wb") as fout:
        i, o = fin.fileno(), fout.fileno()
        size = os.fstat(i).st_size
        pos = 0
        while pos < size:
            try:
                start = os.lseek(i, pos, os.SEEK_DATA)
            except OSError as exc:
                if exc.errno == errno.ENXIO:  # nothing but a hole from pos to the end
                    break
                raise
            end = os.lseek(i, start, os.SEEK_HOLE)
            while start < end:
                chunk = os.pread(i, min(_CHUNK, end - start), start)
                if not chunk:
                    break
                os.pwrite(o, chunk, start)
                start += len(chunk)
            pos = end
        os.ftruncate(o, size)
    shutil.copystat(src, dst)
    return str(dst)


def copytree(src: str | os.PathLike[str], dst: str | os.PathLike[str]) -> Path:
    """`shutil.copytree` with every file copied by `copy_file`."""
    return Path(shutil.copytree(src, dst, copy_function=copy_file))
