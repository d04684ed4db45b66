"""ferrymq's message store, in Apache RocketMQ's on-disk layout: commit-log segments,
consume queues, a key index, checkpoint and abort files. See store.py for the whole."""

from .checkpoint import Checkpoint
from .config import FlushDiskType, StoreConfig, StoreConfigError
from .damage import CorruptPolicy, DamagedRecord, SkippedRange
from .errors import StoreCorruptionError, StoreError, StoreLayoutError, StoreStateError
from .files import FileIO, atomic_write, read_json_file
from .model import (
    AppendedMessage,
    GetResult,
    GetStatus,
    PutResult,
    PutStatus,
    QueueEntry,
    StoreMessage,
)
from .reads import RecordFilter
from .recovery import RecoveryReport
from .retention import CleanupReport
from .store import MessageStore

__all__ = [
    "AppendedMessage",
    "Checkpoint",
    "CleanupReport",
    "CorruptPolicy",
    "DamagedRecord",
    "FileIO",
    "FlushDiskType",
    "GetResult",
    "GetStatus",
    "MessageStore",
    "PutResult",
    "PutStatus",
    "QueueEntry",
    "RecordFilter",
    "RecoveryReport",
    "SkippedRange",
    "StoreConfig",
    "StoreConfigError",
    "StoreCorruptionError",
    "StoreError",
    "StoreLayoutError",
    "StoreMessage",
    "StoreStateError",
    "atomic_write",
    "read_json_file",
]
