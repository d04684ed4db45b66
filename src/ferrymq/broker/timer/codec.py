"""The on-disk layouts of the timer files, as pure encode/decode functions.

- A wheel slot (32 bytes, RocketMQ's Slot): the slot's time, the log positions of the first
  and last entries linked to it, how many, and a reserved word. A slot whose time is not the
  one asked for is empty: the wheel is a ring, and a zero (never written) slot has time 0.
- A log entry (48 bytes): the position of the previous entry of the same slot (-1 ends the
  list), the delivery time, the time of the slot it is linked to (the delivery time, or an
  earlier one for a roll), the message's commit-log offset and size, the wheel's read time
  when the entry was written, and a magic word with flags. A zero magic marks unwritten space.
- The checkpoint (64 bytes, written to two alternating copies): the wheel's geometry, the
  read time with how many entries of that slot were delivered, the next timer-queue offset to
  enqueue and the end of the log that goes with it, all as of the last fsync of the log and
  wheel; a sequence number and a CRC pick the newest whole copy after a torn write."""

from __future__ import annotations

import mmap
import struct
import zlib
from dataclasses import dataclass
from typing import NamedTuple

from ...common.errors import FerryMQError

Buffer = bytes | bytearray | memoryview | mmap.mmap

SLOT = struct.Struct(">qqqii")
ENTRY = struct.Struct(">qqqqqii")
_CKPT_BODY = struct.Struct(">Iqiiqqqq")
_CRC = struct.Struct(">I")
CHECKPOINT_COPY_SIZE = 64

ENTRY_MAGIC = 0x7E7E0000
FLAG_ROLL = 0x1
# Set in place on an entry whose record a power loss took from the commit log (found at the
# first start after it): another message may be written at that offset later.
FLAG_LOST = 0x2
# A delete marker (a message carrying TIMER_DEL_UNIQKEY, RocketMQ's MAGIC_DELETE): never
# delivered; the timer of the same topic and message id in its slot is dropped instead.
FLAG_DELETE = 0x4
_MAGIC_MASK = 0xFFFF0000
CHECKPOINT_MAGIC = 0x7E7ECC01


class TimerFileError(FerryMQError):
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
    delete: bool = False


@dataclass(frozen=True, slots=True)
class TimerCheckpoint:
    """Where the store stood at its last sync: the log and wheel were fsynced with this state
    before it was written, so everything it names is on the disk."""

    precision_ms: int
    slots: int
    read_time_ms: int
    slot_done: int
    enqueue_offset: int
    log_end: int
    seq: int = 0


def encode_slot(slot: Slot) -> bytes:
    return SLOT.pack(*slot)


def decode_slot(buf: Buffer, offset: int = 0) -> Slot:
    return Slot(*SLOT.unpack_from(buf, offset))


def encode_entry(prev_pos: int, deliver_ms: int, link_ms: int, phys_offset: int, size: int,
                 write_ms: int, roll: bool, delete: bool = False) -> bytes:
    magic = ENTRY_MAGIC | (FLAG_ROLL if roll else 0) | (FLAG_DELETE if delete else 0)
    return ENTRY.pack(prev_pos, deliver_ms, link_ms, phys_offset, write_ms, size, magic)


def decode_entry(buf: Buffer, offset: int, pos: int) -> LogEntry | None:
    """The entry at `offset` of `buf` (log position `pos`), None for unwritten space."""
    prev, deliver, link, phys, write, size, magic = ENTRY.unpack_from(buf, offset)
    if magic == 0:
        return None
    if magic & _MAGIC_MASK != ENTRY_MAGIC:
        raise TimerFileError("log", f"entry at {pos} has magic {magic:#x}")
    return LogEntry(pos, prev, deliver, link, phys, size, write, bool(magic & FLAG_ROLL),
                    bool(magic & FLAG_LOST), bool(magic & FLAG_DELETE))


def encode_checkpoint(cp: TimerCheckpoint) -> bytes:
    body = _CKPT_BODY.pack(CHECKPOINT_MAGIC, cp.seq, cp.precision_ms, cp.slots, cp.read_time_ms,
                           cp.slot_done, cp.enqueue_offset, cp.log_end)
    whole = body + _CRC.pack(zlib.crc32(body))
    return whole + bytes(CHECKPOINT_COPY_SIZE - len(whole))


def decode_checkpoint(buf: bytes | bytearray | memoryview) -> TimerCheckpoint | None:
    """One copy; None when it is not a whole, valid copy (never written, or torn)."""
    if len(buf) < _CKPT_BODY.size + _CRC.size:
        return None
    magic, seq, precision, slots, read_time, done, enq, log_end = _CKPT_BODY.unpack_from(buf)
    (crc,) = _CRC.unpack_from(buf, _CKPT_BODY.size)
    if magic != CHECKPOINT_MAGIC or zlib.crc32(bytes(buf[: _CKPT_BODY.size])) != crc:
        return None
    return TimerCheckpoint(precision, slots, read_time, done, enq, log_end, seq)


def newest_checkpoint(raw: bytes) -> TimerCheckpoint | None:
    """The newest whole copy of the two at the start of `raw`."""
    copies = [decode_checkpoint(raw[i: i + CHECKPOINT_COPY_SIZE])
              for i in range(0, 2 * CHECKPOINT_COPY_SIZE, CHECKPOINT_COPY_SIZE)]
    valid = [c for c in copies if c is not None]
    return max(valid, key=lambda c: c.seq) if valid else None
