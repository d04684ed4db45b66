"""The store's only door to the file system for data writes.

`FileIO` is a seam: every write, truncate, preallocation and fsync of store data goes through
one instance, so tests inject failures (ENOSPC, EIO) into the real store without mocking it."""

from __future__ import annotations

import contextlib
import errno
import logging
import os
from pathlib import Path

# Small files replaced whole live in common (the name server writes them too); the store's
# modules and the broker take them from here.
from ..common.durable import atomic_write as atomic_write
from ..common.durable import fsync_dir as fsync_dir
from ..common.durable import read_json_file as read_json_file

log = logging.getLogger("ferrymq.store")

_ZEROS = memoryview(bytes(1 << 20))


class FileIO:
    def pwrite(self, fd: int, data: bytes | memoryview, pos: int) -> int:
        return os.pwrite(fd, data, pos)

    def ftruncate(self, fd: int, size: int) -> None:
        os.ftruncate(fd, size)

    def fallocate(self, fd: int, offset: int, length: int) -> None:
        os.posix_fallocate(fd, offset, length)

    def zero_fill(self, fd: int, pos: int, length: int) -> None:
        """Write `length` zero bytes at `pos` (preallocation: the blocks get allocated)."""
        end = pos + length
        while pos < end:
            n = os.pwrite(fd, _ZEROS[: min(len(_ZEROS), end - pos)], pos)
            if n <= 0:
                raise OSError(errno.EIO, "pwrite wrote nothing")
            pos += n

    def fsync(self, fd: int) -> None:
        os.fdatasync(fd)

    def free_bytes(self, path: Path) -> int:
        """Bytes an unprivileged writer may still allocate on the file system of `path`."""
        st = os.statvfs(path)
        return st.f_bavail * st.f_frsize

    def write_fully(self, fd: int, data: bytes | bytearray | memoryview, pos: int) -> None:
        """pwrite until done. A short write followed by an error raises OSError with
        `written` set, so the caller can roll the partial bytes back."""
        view = memoryview(data)
        done = 0
        while done < len(view):
            try:
                n = self.pwrite(fd, view[done:], pos + done)
            except OSError as exc:
                exc.written = done  # type: ignore[attr-defined]
                raise
            if n <= 0:
                err = OSError(errno.EIO, "pwrite wrote nothing")
                err.written = done  # type: ignore[attr-defined]
                raise err
            done += n


_null_fd = -1


def release_fd(fd: int) -> None:
    """Make `fd` point at /dev/null: the deleted file's space is freed now, while the number
    stays taken (a reader holding it reads nothing instead of some newly opened file). The
    number is closed later, after readers are done with it."""
    global _null_fd
    if _null_fd < 0:
        _null_fd = os.open(os.devnull, os.O_RDWR)
    with contextlib.suppress(OSError):
        os.dup2(_null_fd, fd)


def is_disk_full(exc: BaseException) -> bool:
    return isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT)


def fsync_file(path: Path) -> None:
    """Write a mapped file's dirty pages out with the interpreter lock released. Not
    mmap.flush(): CPython runs msync holding the lock, so every thread (the broker's event loop
    included) stands still for as long as the disk takes."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
