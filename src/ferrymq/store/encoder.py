"""Turning StoreMessages into commit-log bytes, in two steps as RocketMQ's doAppend does:
`encode` builds a batch's records once, outside the store lock, with QUEUEOFFSET,
PHYSICALOFFSET and STORETIMESTAMP left zero; `place`, under the lock, patches those three into
the bytes for the position the batch is written at and produces its consume-queue entries
and per-message results. A roll-over to a new segment only changes what is patched. `encode`
raises IllegalMessage before anything is written, so a bad message leaves no trace.

The layout and the per-message loops are ferrymq.common.record's (compiled when built)."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from ..common.errors import FerryMQError
from ..common.names import SCHEDULE_TOPIC, java_string_hash
from ..common.record import (
    KEY_ENTRY,
    MAX_TOPIC_BYTES,
    RecordEncodeError,
    encode_messages,
    pack_host,
    place_messages,
)
from .config import parse_address
from .model import AppendedMessage, PutStatus, StoreMessage


class IllegalMessage(FerryMQError):
    def __init__(self, status: PutStatus, reason: str) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason


_tag_codes: dict[str, int] = {}


def tag_code(tags: str) -> int:
    code = _tag_codes.get(tags)
    if code is None:
        code = java_string_hash(tags)
        if len(_tag_codes) < 65536:
            _tag_codes[tags] = code
    return code


_born_hosts: dict[object, bytes] = {}


def _born_host_bytes(value: tuple[str, int] | str) -> bytes:
    raw = _born_hosts.get(value)
    if raw is not None:
        return raw
    host, port = parse_address(value) if isinstance(value, str) else value
    try:
        raw = pack_host(host, port)
    except ValueError:
        # A host name, not an address: RocketMQ stores the resolved address; we have none.
        raw = pack_host("0.0.0.0", port)
    if len(_born_hosts) < 65536:
        _born_hosts[value] = raw
    return raw


class Encoder:
    def __init__(self, store_host: tuple[str, int], max_message_size: int,
                 delay_levels_ms: tuple[int, ...]) -> None:
        self.store_host_raw = pack_host(*store_host)
        # offset message id = hex(store ip, port, offset): the prefix never changes.
        self.msg_id_prefix = self.store_host_raw.hex().upper()
        self.max_message_size = max_message_size
        self.delay_levels_ms = delay_levels_ms
        self._topics: dict[str, bytes] = {}

    def offset_msg_id(self, phys: int) -> str:
        return f"{self.msg_id_prefix}{phys:016X}"

    def topic_raw(self, topic: str) -> bytes:
        raw = self._topics.get(topic)
        if raw is None:
            raw = topic.encode()
            if not raw or len(raw) > MAX_TOPIC_BYTES:
                raise IllegalMessage(PutStatus.MESSAGE_ILLEGAL,
                                     f"topic is {len(raw)} bytes; must be 1..{MAX_TOPIC_BYTES}")
            if len(self._topics) < 100_000:
                self._topics[topic] = raw
        return raw

    def schedule_tag(self, delay_level: str | None, store_ts: int) -> int:
        """RocketMQ keeps a delayed message's delivery time as its tag code."""
        levels = self.delay_levels_ms
        level = int(delay_level) if delay_level and delay_level.isdigit() else 1
        return store_ts + levels[min(max(level, 1), len(levels)) - 1]


class Encoded:
    """A batch encoded once; `place` fills in where it went. `keys` holds its key-index
    entries (KEY_ENTRY records relative to the batch's position and store time)."""

    __slots__ = ("appended", "data", "delays", "entries", "keys", "msgs", "nkeys", "sizes",
                 "tags")

    def __init__(self, msgs: Sequence[StoreMessage], data: bytearray, sizes: list[int],
                 tags: list[int], keys: bytearray, delays: list[tuple[int, str | None]]) -> None:
        self.msgs = msgs
        self.data = data
        self.sizes = sizes
        self.tags = tags
        self.keys = keys
        self.delays = delays
        self.nkeys = len(keys) // KEY_ENTRY.size
        self.entries: dict[tuple[str, int], bytes] = {}
        self.appended: list[AppendedMessage] = []


def _born_host_bytes_of(value: tuple[str, int] | str) -> bytes:
    return _born_hosts.get(value) or _born_host_bytes(value)


def encode(enc: Encoder, msgs: Sequence[StoreMessage]) -> Encoded:
    try:
        data, sizes, tags, keys, delays = encode_messages(
            msgs, enc.store_host_raw, enc.max_message_size, enc.topic_raw, _born_host_bytes_of,
            tag_code, SCHEDULE_TOPIC)
    except RecordEncodeError as exc:
        raise IllegalMessage(PutStatus[exc.status], exc.reason) from None
    return Encoded(msgs, data, sizes, tags, keys, delays)


def place(enc: Encoder, batch: Encoded, pos: int, store_ts: int,
          next_offset: Callable[[tuple[str, int]], int]) -> None:
    """Patch the batch for a write at `pos` with store time `store_ts`. `next_offset` gives a
    queue's next offset before this batch; offsets within the batch continue from it."""
    tags = batch.tags
    for i, level in batch.delays:
        tags[i] = enc.schedule_tag(level, store_ts)
    batch.entries, batch.appended = place_messages(
        batch.data, batch.msgs, batch.sizes, tags, pos, store_ts, next_offset,
        enc.msg_id_prefix, AppendedMessage)
