"""The on-disk layouts of the timer files, as pure encode/decode functions.

- A wheel slot (32 bytes, RocketMQ's Slot): the slot's time, the log positions of the first
  and last entries linked to it, how many, and a reserved word. A slot whose time is not the
  one asked for is empty: the wheel is a ring, and a zero (never written) slot has time 0.
- A log entry (48 bytes): the position of the previous entry of the same slot (-1 ends the
  list), the delivery time, the time of the slot it is linked to (the delivery time, or an
  earlier one for a roll), the message's commit-log offset and size, the wheel's read time
  when the entry was written, and a magic word with flags. A zero magic marks unwritten space.
- The checkpoint (128 bytes, written to two alternating copies): the wheel's geometry, the
  read time with how many entries of that slot were delivered, the next timer-queue offset to
  enqueue and the end of the log that goes with it; the same four as of the last fsync of the
  log and wheel, and the id of the boot it was written in (a later boot means a
  power loss may have kept this copy and not the pages it describes); a sequence number and a
  CRC pick the newest whole copy after a torn write. The first layout (64 bytes, without the
  synced fields and the boot) is still read."""

from __future__ import annotations

import mmap
import struct
import zlib
from dataclasses import dataclass
from typing import NamedTuple

Buffer = bytes | bytearray | memoryview | mmap.mmap

SLOT = struct.Struct(">qqqii")
ENTRY = struct.Struct(">qqqqqii")
_CKPT_BODY_V1 = struct.Struct(">Iqiiqqqq")
_CKPT_BODY = struct.Struct(">Iqiiqqqqqqqq16s")
_CRC = struct.Struct(">I")
CHECKPOINT_COPY_SIZE_V1 = 64
CHECKPOINT_COPY_SIZE = 128

ENTRY_MAGIC = 0x7E7E0000
FLAG_ROLL = 0x1
# Set in place on an entry whose record a power loss took from the commit log (found at the
# first start after it): another message may be written at that offset later.
FLAG_LOST = 0x2
_MAGIC_MASK = 0xFFFF0000
CHECKPOINT_MAGIC_V1 = 0x7E7ECC01
CHECKPOINT_MAGIC = 0x7E7ECC02


class TimerFileError(Exception):
    """A timer file does not hold what it should (wrong magic, bad CRC, wrong size)."""

    def __init__(self, what: str, reason: str) -> None:
        super().__init__(f"timer {what}: {reason}")
        self.what = what
        self.reason = reason


class Slot(NamedTuple):
    time_ms: int
    first_pos: int
    last_pos: int
    num: int
    magic: int = 0


class LogEntry(NamedTuple):
    pos: int
    prev_pos: int
    deliver_ms: int
    link_ms: int
    phys_offset: int
    size: int
    write_ms: int
    roll: bool
    lost: bool = False


@dataclass(frozen=True, slots=True)
class TimerCheckpoint:
    precision_ms: int
    slots: int
    read_time_ms: int
    slot_done: int
    enqueue_offset: int
    log_end: int
    seq: int = 0
    # As of the last fsync of the log and the wheel: the log's end, the queue offset to
    # enqueue from, the read time and the slot's delivered count. A first-layout copy says
    # the same as its own fields.
    synced_log_end: int = -1
    synced_enqueue_offset: int = -1
    synced_read_time_ms: int = -1
    synced_slot_done: int = -1
    boot_id: bytes = b""  # empty when not known (a first-layout copy, a system without one)

    def __post_init__(self) -> None:
        for synced, own in (("synced_log_end", self.log_end),
                            ("synced_enqueue_offset", self.enqueue_offset),
                            ("synced_read_time_ms", self.read_time_ms),
                            ("synced_slot_done", self.slot_done)):
            if getattr(self, synced) < 0:
                object.__setattr__(self, synced, own)


def encode_slot(slot: Slot) -> bytes:
    return SLOT.pack(*slot)


def decode_slot(buf: Buffer, offset: int = 0) -> Slot:
    return Slot(*SLOT.unpack_from(buf, offset))


def encode_entry(prev_pos: int, deliver_ms: int, link_ms: int, phys_offset: int, size: int,
                 write_ms: int, roll: bool) -> bytes:
    magic = ENTRY_MAGIC | (FLAG_ROLL if roll else 0)
    return ENTRY.pack(prev_pos, deliver_ms, link_ms, phys_offset, write_ms, size, magic)


def decode_entry(buf: Buffer, offset: int, pos: int) -> LogEntry | None:
    """The entry at `offset` of `buf` (log position `pos`), None for unwritten space."""
    prev, deliver, link, phys, write, size, magic = ENTRY.unpack_from(buf, offset)
    if magic == 0:
        return None
    if magic & _MAGIC_MASK != ENTRY_MAGIC:
        raise TimerFileError("log", f"entry at {pos} has magic {magic:#x}")
    return LogEntry(pos, prev, deliver, link, phys, size, write, bool(magic & FLAG_ROLL),
                    bool(magic & FLAG_LOST))


def encode_checkpoint(cp: TimerCheckpoint) -> bytes:
    if len(cp.boot_id) not in (0, 16):
        raise ValueError("a boot id is 16 bytes (or empty: not known)")
    body = _CKPT_BODY.pack(CHECKPOINT_MAGIC, cp.seq, cp.precision_ms, cp.slots, cp.read_time_ms,
                           cp.slot_done, cp.enqueue_offset, cp.log_end, cp.synced_log_end,
                           cp.synced_enqueue_offset, cp.synced_read_time_ms, cp.synced_slot_done,
                           cp.boot_id)
    whole = body + _CRC.pack(zlib.crc32(body))
    return whole + bytes(CHECKPOINT_COPY_SIZE - len(whole))


def decode_checkpoint(buf: bytes | bytearray | memoryview) -> TimerCheckpoint | None:
    """One copy; None when it is not a whole, valid copy (never written, or torn)."""
    if len(buf) < _CKPT_BODY.size + _CRC.size:
        return None
    (magic, seq, precision, slots, read_time, done, enq, log_end, synced_end, synced_enq,
     synced_read, synced_done, boot) = _CKPT_BODY.unpack_from(buf)
    (crc,) = _CRC.unpack_from(buf, _CKPT_BODY.size)
    if magic != CHECKPOINT_MAGIC or zlib.crc32(bytes(buf[: _CKPT_BODY.size])) != crc:
        return None
    return TimerCheckpoint(precision, slots, read_time, done, enq, log_end, seq, synced_end,
                           synced_enq, synced_read, synced_done, boot if any(boot) else b"")


def decode_checkpoint_v1(buf: bytes | bytearray | memoryview) -> TimerCheckpoint | None:
    """One copy of the first layout."""
    if len(buf) < _CKPT_BODY_V1.size + _CRC.size:
        return None
    magic, seq, precision, slots, read_time, done, enq, log_end = _CKPT_BODY_V1.unpack_from(buf)
    (crc,) = _CRC.unpack_from(buf, _CKPT_BODY_V1.size)
    if magic != CHECKPOINT_MAGIC_V1 or zlib.crc32(bytes(buf[: _CKPT_BODY_V1.size])) != crc:
        return None
    return TimerCheckpoint(precision, slots, read_time, done, enq, log_end, seq)


def newest_checkpoint(raw: bytes, size: int = CHECKPOINT_COPY_SIZE) -> TimerCheckpoint | None:
    """The newest whole copy of the two at the start of `raw` (copies of `size` bytes: the
    first layout's are read with size CHECKPOINT_COPY_SIZE_V1)."""
    decode = decode_checkpoint if size == CHECKPOINT_COPY_SIZE else decode_checkpoint_v1
    copies = [decode(raw[i: i + size]) for i in range(0, 2 * size, size)]
    valid = [c for c in copies if c is not None]
    return max(valid, key=lambda c: c.seq) if valid else None
