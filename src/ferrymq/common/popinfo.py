"""RocketMQ 5's pop bookkeeping strings, encoded and decoded (ExtraInfoUtil).

A popped message is acknowledged with its `extraInfo` (the POP_CK property a Java client puts
on it, and the receipt handle): `ckQueueOffset popTime invisibleTime reviveQid retryMark
brokerName queueId queueOffset`, separated by spaces. A POP_MESSAGE response does not carry
one per message: its header has, per queue, the first offset (startOffsetInfo), the offsets in
order (msgOffsetInfo) and, for an orderly pop, each message's delivery count
(orderCountInfo), from which the client builds them. `reviveQid` 999 marks an orderly pop."""

from __future__ import annotations

import base64
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from .errors import FerryMQError
from .names import RETRY_GROUP_TOPIC_PREFIX

SEPARATOR = " "
POP_ORDER_REVIVE_QUEUE = 999
NORMAL_MARK = "0"
RETRY_MARK_V1 = "1"  # %RETRY%group_topic
RETRY_MARK_V2 = "2"  # %RETRY%group+topic
PROPERTY_POP_CK = "POP_CK"
PROPERTY_FIRST_POP_TIME = "1ST_POP_TIME"


class ExtraInfoError(FerryMQError, ValueError):
    def __init__(self, text: str, reason: str) -> None:
        super().__init__(f"extraInfo {text!r}: {reason}")
        self.text = text
        self.reason = reason


@dataclass(frozen=True, slots=True)
class ExtraInfo:
    ck_queue_offset: int
    pop_time: int
    invisible_time: int
    revive_qid: int
    retry_mark: str
    broker_name: str
    queue_id: int
    queue_offset: int

    @property
    def order(self) -> bool:
        return self.revive_qid == POP_ORDER_REVIVE_QUEUE

    @property
    def deadline(self) -> int:
        return self.pop_time + self.invisible_time

    def encode(self) -> str:
        return SEPARATOR.join(str(v) for v in (
            self.ck_queue_offset, self.pop_time, self.invisible_time, self.revive_qid,
            self.retry_mark, self.broker_name, self.queue_id, self.queue_offset))

    def renewed(self, pop_time: int, invisible_time: int) -> ExtraInfo:
        """The handle a CHANGE_MESSAGE_INVISIBLETIME answer stands for."""
        return ExtraInfo(self.ck_queue_offset, pop_time, invisible_time, self.revive_qid,
                         self.retry_mark, self.broker_name, self.queue_id, self.queue_offset)


def parse_extra_info(text: str) -> ExtraInfo:
    """At least the seven fields RocketMQ always writes; the eighth (the message's own queue
    offset) is -1 when absent (older clients give it in the request's `offset`)."""
    parts = text.split(SEPARATOR)
    if len(parts) < 7:
        raise ExtraInfoError(text, f"has {len(parts)} fields, at least 7 expected")
    try:
        return ExtraInfo(int(parts[0]), int(parts[1]), int(parts[2]), int(parts[3]), parts[4],
                         parts[5], int(parts[6]), int(parts[7]) if len(parts) > 7 else -1)
    except ValueError:
        raise ExtraInfoError(text, "a numeric field is not a number") from None


def retry_mark(topic: str) -> str:
    if topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
        return RETRY_MARK_V2 if "+" in topic else RETRY_MARK_V1
    return NORMAL_MARK


def real_topic(topic: str, group: str, mark: str) -> str:
    """The topic an acknowledgement is for (KeyBuilder.buildPopRetryTopicV1/V2)."""
    if mark == RETRY_MARK_V1:
        return f"{RETRY_GROUP_TOPIC_PREFIX}{group}_{topic}"
    if mark == RETRY_MARK_V2:
        return f"{RETRY_GROUP_TOPIC_PREFIX}{group}+{topic}"
    return topic


# --- POP_MESSAGE response header ----------------------------------------------------------------
def start_offset_info(topic: str, starts: Mapping[int, int]) -> str:
    mark = retry_mark(topic)
    return ";".join(f"{mark} {qid} {offset}" for qid, offset in starts.items())


def msg_offset_info(topic: str, offsets: Mapping[int, Sequence[int]]) -> str:
    mark = retry_mark(topic)
    return ";".join(f"{mark} {qid} {','.join(map(str, offs))}" for qid, offs in offsets.items())


def order_count_info(topic: str, counts: Iterable[tuple[int, int, int]]) -> str:
    """(queueId, queueOffset, count): RocketMQ's per-message form `mark qo<qid>%<offset> n`."""
    mark = retry_mark(topic)
    return ";".join(f"{mark} qo{qid}%{offset} {n}" for qid, offset, n in counts)


def _entries(text: str | None) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    for one in (text or "").split(";"):
        if not one:
            continue
        parts = one.split(SEPARATOR)
        if len(parts) != 3:
            raise ExtraInfoError(one, "an offset info entry has 3 fields")
        out.append((f"{parts[0]}@{parts[1]}", parts[2]))
    return out


def parse_start_offset_info(text: str | None) -> dict[str, int]:
    """Keyed `mark@queueId`, as RocketMQ's client keys them."""
    return {k: int(v) for k, v in _entries(text)}


def parse_msg_offset_info(text: str | None) -> dict[str, list[int]]:
    return {k: [int(x) for x in v.split(",")] for k, v in _entries(text)}


def parse_order_count_info(text: str | None) -> dict[str, int]:
    """Keyed `mark@qo<qid>%<offset>` (per message) or `mark@<qid>` (per queue)."""
    return {k: int(v) for k, v in _entries(text)}


# --- BATCH_ACK_MESSAGE body: offsets as a java.util.BitSet (toByteArray, base64 in JSON) --------
def encode_bitset(indexes: Iterable[int]) -> str:
    idx = sorted(set(indexes))
    raw = bytearray((idx[-1] // 8 + 1) if idx else 0)
    for i in idx:
        raw[i // 8] |= 1 << (i % 8)
    return base64.b64encode(bytes(raw)).decode()


def decode_bitset(text: str) -> list[int]:
    raw = base64.b64decode(text)
    return [i * 8 + b for i, byte in enumerate(raw) for b in range(8) if byte >> b & 1]
