"""What goes into the store and what comes out: messages to append, put and get results."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import NamedTuple


@dataclass(slots=True)
class StoreMessage:
    """A message to append. `properties` is a map, or the encoded `name\x01value\x02` bytes
    a producer sent, which the store writes as they are (scanning them only for the tags,
    keys and unique id it indexes)."""

    topic: str
    queue_id: int
    body: bytes
    properties: dict[str, str] | bytes = field(default_factory=dict)
    flag: int = 0
    sys_flag: int = 0
    born_timestamp: int = 0
    born_host: tuple[str, int] | str = ("127.0.0.1", 0)
    reconsume_times: int = 0
    prepared_transaction_offset: int = 0


class PutStatus(enum.Enum):
    PUT_OK = "PUT_OK"
    FLUSH_DISK_TIMEOUT = "FLUSH_DISK_TIMEOUT"
    MESSAGE_ILLEGAL = "MESSAGE_ILLEGAL"
    PROPERTIES_SIZE_EXCEEDED = "PROPERTIES_SIZE_EXCEEDED"
    SERVICE_NOT_AVAILABLE = "SERVICE_NOT_AVAILABLE"
    DISK_FULL = "DISK_FULL"
    UNKNOWN_ERROR = "UNKNOWN_ERROR"
    # Stored on the master, not confirmed by a slave (SYNC_MASTER).
    FLUSH_SLAVE_TIMEOUT = "FLUSH_SLAVE_TIMEOUT"
    SLAVE_NOT_AVAILABLE = "SLAVE_NOT_AVAILABLE"

    # Members are singletons compared by identity; Enum's own hash (of the name, in Python)
    # made every set and dict lookup of a status a Python call on the put path.
    __hash__ = object.__hash__

    @property
    def stored(self) -> bool:
        """The message is in this broker's log (the answer carries its offsets)."""
        return self in _STORED


_STORED = frozenset({PutStatus.PUT_OK, PutStatus.FLUSH_DISK_TIMEOUT, PutStatus.FLUSH_SLAVE_TIMEOUT,
                     PutStatus.SLAVE_NOT_AVAILABLE})


class AppendedMessage(NamedTuple):
    # A tuple, not a dataclass: one is built per message on the append hot path.
    phys_offset: int
    size: int
    queue_offset: int
    store_timestamp: int
    offset_msg_id: str


@dataclass(slots=True)
class PutResult:
    status: PutStatus
    messages: list[AppendedMessage]
    end_offset: int
    reason: str = ""

    @property
    def ok(self) -> bool:
        return self.status is PutStatus.PUT_OK


class GetStatus(enum.Enum):
    FOUND = "FOUND"
    NO_MATCHED_MESSAGE = "NO_MATCHED_MESSAGE"
    MESSAGE_WAS_REMOVING = "MESSAGE_WAS_REMOVING"
    OFFSET_FOUND_NULL = "OFFSET_FOUND_NULL"
    OFFSET_OVERFLOW_BADLY = "OFFSET_OVERFLOW_BADLY"
    OFFSET_OVERFLOW_ONE = "OFFSET_OVERFLOW_ONE"
    OFFSET_TOO_SMALL = "OFFSET_TOO_SMALL"
    NO_MATCHED_LOGIC_QUEUE = "NO_MATCHED_LOGIC_QUEUE"
    NO_MESSAGE_IN_QUEUE = "NO_MESSAGE_IN_QUEUE"
    # ferrymq: the next record is damaged and the store's policy is to stop there.
    MESSAGE_DAMAGED = "MESSAGE_DAMAGED"

    __hash__ = object.__hash__  # as PutStatus's: every pull looks its status up in a map


@dataclass(slots=True)
class GetResult:
    status: GetStatus
    data: bytes
    count: int
    next_begin_offset: int
    min_offset: int
    max_offset: int


class QueueEntry(NamedTuple):
    queue_offset: int
    phys_offset: int
    size: int
    tag_code: int
