"""Typed store failures. Put failures are statuses (PutStatus), not exceptions; these are for
conditions where the store cannot or must not continue."""

from __future__ import annotations

from pathlib import Path

from ..common.errors import FerryMQError


class StoreError(FerryMQError):
    pass


class StoreCorruptionError(StoreError):
    """A record that fails its checks is followed by valid records: truncating there would
    silently drop data that was once accepted, so the store refuses to start."""

    def __init__(self, file: Path, offset: int, reason: str, next_valid: int) -> None:
        super().__init__(
            f"commit log corrupted in {file} at physical offset {offset} ({reason}); a valid "
            f"record follows at {next_valid}. Refusing to start: save {file.name}, then repair "
            "it or restart with truncate_on_corruption=True to discard everything from "
            f"offset {offset} on"
        )
        self.file = file
        self.offset = offset
        self.reason = reason
        self.next_valid = next_valid


class StoreLayoutError(StoreError):
    """Files on disk that the store did not write in this shape (wrong size, gap in names)."""

    def __init__(self, path: Path, reason: str) -> None:
        super().__init__(f"unexpected store file {path}: {reason}")
        self.path = path
        self.reason = reason


class StoreStateError(StoreError):
    def __init__(self, operation: str, state: str) -> None:
        super().__init__(f"cannot {operation}: store is {state}")
        self.operation = operation
        self.state = state


class StoreSpaceError(FerryMQError, OSError):
    """A store file could not get the space it needed (ENOSPC or EDQUOT, kept as errno): names
    the file and the bytes it asked for, so a refusal points at what took the disk."""

    # Space comes back (files expire, an operator frees some); RocketMQ answers a full disk
    # with SERVICE_NOT_AVAILABLE, which its producers retry.
    retriable = True

    def __init__(self, path: Path, needed: int, what: str, cause: OSError) -> None:
        super().__init__(cause.errno, cause.strerror, str(path))
        self.path = path
        self.needed = needed
        self.what = what

    def __str__(self) -> str:
        return f"{self.strerror}: the {self.what} {self.path} needs {self.needed} bytes"
