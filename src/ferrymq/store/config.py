"""Store configuration: RocketMQ's MessageStoreConfig subset that ferrymq honours."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from pathlib import Path

from ..common.delay import DEFAULT_DELAY_LEVELS, parse_delay_levels
from ..common.errors import FerryMQError
from ..common.paths import StrPath, as_path
from .damage import CorruptPolicy

GiB = 1 << 30
MiB = 1 << 20


class FlushDiskType(enum.Enum):
    ASYNC_FLUSH = "ASYNC_FLUSH"
    SYNC_FLUSH = "SYNC_FLUSH"


class StoreConfigError(FerryMQError, ValueError):
    def __init__(self, key: str, reason: str) -> None:
        super().__init__(f"store configuration {key!r}: {reason}")
        self.key = key
        self.reason = reason


def parse_address(value: tuple[str, int] | str) -> tuple[str, int]:
    if isinstance(value, tuple):
        return value[0], int(value[1])
    host, sep, port = value.rpartition(":")
    if not sep or not port.isdigit():
        raise StoreConfigError("store_host", f"{value!r} is not host:port")
    return host.strip("[]"), int(port)


@dataclass(frozen=True)
class StoreConfig:
    store_dir: StrPath  # a Path once constructed; `root` is it, typed so
    commitlog_segment_size: int = GiB
    consume_queue_entries_per_file: int = 300_000
    flush_disk_type: FlushDiskType = FlushDiskType.ASYNC_FLUSH
    flush_interval_ms: int = 500
    sync_flush_timeout_ms: int = 5000
    file_reserved_time_hours: float = 72
    disk_clean_ratio: float = 0.75
    disk_force_clean_ratio: float = 0.85
    disk_refuse_ratio: float = 0.90
    max_message_size: int = 4 * MiB
    store_host: tuple[str, int] | str = ("127.0.0.1", 10911)
    message_delay_level: str = DEFAULT_DELAY_LEVELS
    # Beyond the broker's contract; defaults suit production, tests shrink them.
    checkpoint_interval_ms: int = 1000
    cleanup_interval_ms: int = 10_000
    # The index file is preallocated (fallocate) so that writes through its mapping can never
    # meet a full disk as SIGBUS: a full disk must surface as ENOSPC when a file is created.
    index_hash_slots: int = 500_000
    index_max_entries: int = 2_000_000
    # Mid-log corruption makes start() refuse with StoreCorruptionError. An operator who has
    # saved the damaged segment may set this to discard everything from the bad record on.
    truncate_on_corruption: bool = False
    # A record damaged at rest (found by a read or the scrub): reported once, then skipped
    # (SKIP) so consumers never stall, or reads stop before it (STOP) until an operator skips.
    on_corrupt_record: CorruptPolicy = CorruptPolicy.SKIP
    # The scrub re-verifies every record below the checkpoint after start, at this rate, so
    # damage in cold segments is found before a consumer reaches it. 0 disables it.
    scrub_bytes_per_s: int = 16 * MiB
    # Zero-filled commit-log space kept ahead of the writer (at most one segment past the
    # current one): appends and fsyncs then meet allocated blocks. It writes every byte twice,
    # so by default (None) it is on only where a put waits for its fsync: 64 MiB under
    # SYNC_FLUSH, off under ASYNC_FLUSH. 0 disables it.
    preallocate_ahead_bytes: int | None = None
    delay_levels_ms: tuple[int, ...] = field(init=False, repr=False, compare=False)
    store_address: tuple[str, int] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        # Normalised once so the hot paths never parse.
        object.__setattr__(self, "store_dir", as_path(self.store_dir))
        object.__setattr__(self, "store_address", parse_address(self.store_host))
        object.__setattr__(self, "delay_levels_ms", parse_delay_levels(self.message_delay_level))
        if self.commitlog_segment_size < 64 * 1024:
            raise StoreConfigError("commitlog_segment_size", "must be at least 64 KiB")
        if self.consume_queue_entries_per_file < 1:
            raise StoreConfigError("consume_queue_entries_per_file", "must be positive")
        if not 0 < self.disk_clean_ratio <= self.disk_force_clean_ratio <= self.disk_refuse_ratio:
            raise StoreConfigError("disk_*_ratio", "need 0 < clean <= force clean <= refuse")
        if self.index_hash_slots < 1 or self.index_max_entries < 2:
            raise StoreConfigError("index_*", "need at least one slot and two entries")

    @property
    def preallocate_bytes(self) -> int:
        if self.preallocate_ahead_bytes is not None:
            return self.preallocate_ahead_bytes
        return 64 * MiB if self.flush_disk_type is FlushDiskType.SYNC_FLUSH else 0

    @property
    def root(self) -> Path:
        return as_path(self.store_dir)

    @property
    def file_reserved_ms(self) -> int:
        return int(self.file_reserved_time_hours * 3_600_000)
