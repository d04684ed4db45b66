"""An exclusive lock on a directory a server owns (a broker's store, a controller's state).

Two processes writing one commit log or one state file each believe they own its end and
overwrite each other's acknowledged records. The lock is `flock` on a file inside the
directory: the kernel drops it when its holder exits, however it exits, so a SIGKILLed broker
never leaves a stale lock behind. The file also names the holder's pid for the error the next
process prints. A second open of the same directory within one process conflicts too (flock
locks belong to open files, not processes)."""

from __future__ import annotations

import contextlib
import fcntl
import os
from pathlib import Path

from .errors import FerryMQError

LOCK_FILE = "lock"


class DirectoryLockedError(FerryMQError):
    """Another process (or another owner in this one) holds the directory."""

    def __init__(self, directory: Path, holder_pid: int | None, what: str) -> None:
        holder = f"process {holder_pid}" if holder_pid is not None else "another process"
        super().__init__(
            f"{what} directory {directory} is in use by {holder} (lock file "
            f"{directory / LOCK_FILE}); stop it first, or give this one another directory")
        self.directory = directory
        self.holder_pid = holder_pid
        self.what = what


class DirectoryLock:
    def __init__(self, directory: Path | str, what: str = "store") -> None:
        self.directory = Path(directory)
        self.what = what
        self._fd: int | None = None

    @property
    def held(self) -> bool:
        return self._fd is not None

    def acquire(self) -> None:
        """Take the lock or raise DirectoryLockedError at once (never waits)."""
        if self._fd is not None:
            return
        self.directory.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.directory / LOCK_FILE, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _read_pid(fd)
            os.close(fd)
            raise DirectoryLockedError(self.directory, holder, self.what) from None
        except BaseException:
            os.close(fd)
            raise
        # The pid is for people and error messages only: the lock is the flock, not the text.
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self._fd = fd

    def release(self) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            with contextlib.suppress(OSError):
                os.ftruncate(fd, 0)
            os.close(fd)  # closing the only descriptor of the open file drops the flock

    def __enter__(self) -> DirectoryLock:
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def _read_pid(fd: int) -> int | None:
    try:
        text = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None
