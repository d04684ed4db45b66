"""The key index's file layout (RocketMQ's IndexFile, see index.py), written down once for the
index and both implementations of its batch put."""

from __future__ import annotations

import struct
import zlib

from ..common.record.layout import KEY_ENTRY

HEADER = struct.Struct(">qqqqii")
HEADER_SIZE = HEADER.size  # 40
ENTRY = struct.Struct(">iqii")
ENTRY_SIZE = ENTRY.size  # 20
SLOT = struct.Struct(">i")
MAX_DIFF = 0x7FFFFFFF  # the entry's time field: milliseconds after the file's begin_ts
KEY_ENTRY_SIZE = KEY_ENTRY.size


def key_hash(topic: str, key: str) -> int:
    return zlib.crc32(f"{topic}#{key}".encode()) & 0x7FFFFFFF


__all__ = ["ENTRY", "ENTRY_SIZE", "HEADER", "HEADER_SIZE", "KEY_ENTRY", "KEY_ENTRY_SIZE",
           "MAX_DIFF", "SLOT", "key_hash"]
