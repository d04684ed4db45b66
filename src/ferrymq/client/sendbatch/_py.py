"""The send-batch core in pure Python (the compiled `_cbatch` is its twin): what one
SEND_BATCH_MESSAGE carries, encoded as its messages join it, and the lane through which a
blocking producer's callers hand messages to the I/O loop without a hop per message."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from ...common import props as P
from ...common.record.layout import BATCH_HEAD, BATCH_MIN_ENTRY, I16, MAX_PROPERTIES_BYTES
from ..futures import SendFuture
from ..outgoing import FLAG_MAX, FLAG_MIN, MAX_CHECKED_TOPICS, TIMER_REQUESTS, UNIQ_PROPERTY_BYTES
from ..results import SendResult

IMPLEMENTATION = "python"
INTERFACE = ("IMPLEMENTATION", "EntryBatch", "Lane")

_UNIQ = P.PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX
# Topics a lane remembers, as many as the producer does.
MAX_TOPICS = MAX_CHECKED_TOPICS
# Properties a lane leaves to the producer's long way: they ask for a delay or a delivery
# time (checked there, and kept out of batches), or give the message its own id.
RESERVED = frozenset({P.PROPERTY_DELAY_TIME_LEVEL, _UNIQ, *TIMER_REQUESTS})
_UNIQ_PREFIX = _UNIQ + P.NAME_VALUE_SEPARATOR


class EntryBatch:
    """The messages of one batch request to `topic`: the request's body (RocketMQ's batch
    layout, encoded entry by entry as they are added), and per message its unique id, who
    waits for its result (a concurrent or an asyncio future) and, if it has one, its own way
    to be sent alone. The body is the messages' only copy: a message sent on its own (alone
    in its batch, or its batch refused) is decoded from it, so what goes is what was handed
    over, whatever its caller did to the `Message` since."""

    __slots__ = ("_body", "ids", "paths", "size", "topic", "waiters")

    def __init__(self, topic: str) -> None:
        self.topic = topic
        self._body = bytearray()
        self.ids: list[str] = []
        self.waiters: list[Any] = []
        self.paths: list[Any] = []
        self.size = 0  # the bodies' bytes (what a batch's limits count)

    def add(self, body: bytes, flag: int, props: bytes, uniq: str, waiter: Any,
            path: Any = None) -> None:
        if not FLAG_MIN <= flag <= FLAG_MAX:
            raise ValueError(f"flag {flag} does not fit the wire's 32 bits")
        if len(props) > MAX_PROPERTIES_BYTES:
            raise ValueError(f"the properties encode to {len(props)} bytes; at most 32767 fit")
        # Packed before anything is written: a refused entry leaves the batch as it was.
        head = BATCH_HEAD.pack(BATCH_MIN_ENTRY + len(body) + len(props), 0, 0, flag, len(body))
        out = self._body
        out += head
        out += body
        out += I16.pack(len(props))
        out += props
        self.ids.append(uniq)
        self.waiters.append(waiter)
        self.paths.append(path)
        self.size += len(body)

    def __len__(self) -> int:
        return len(self.ids)

    def body(self) -> bytes:
        return bytes(self._body)

    def settle(self, result: SendResult) -> None:
        """Every waiter not already done gets its message's own result."""
        for waiter, one in zip(self.waiters, split_batch_result(result, self.ids), strict=True):
            if not waiter.done():
                waiter.set_result(one)


def split_batch_result(batch: SendResult, uniq_ids: list[str]) -> list[SendResult]:
    """The broker answers a batch with its first queue offset and the offset ids joined by
    commas; message i was stored at first + i."""
    base = batch.queue_offset
    offset_ids = batch.offset_msg_id.split(",")
    if len(offset_ids) < len(uniq_ids):
        offset_ids += [""] * (len(uniq_ids) - len(offset_ids))
    status, queue_id, broker = batch.status, batch.queue_id, batch.broker
    return [
        SendResult(status, uniq, offset_ids[i], queue_id, base + i if base >= 0 else -1, broker)
        for i, uniq in enumerate(uniq_ids)
    ]


def _plain_properties(props: dict[Any, Any]) -> bytes | None:
    """`props` encoded, when a lane may take a message with them: str names and values
    without separators, none reserved, room left for the id; None otherwise."""
    if not props:
        return b""
    if not RESERVED.isdisjoint(props):
        return None
    try:
        out = P.properties_to_string(props).encode()
    except (P.PropertyError, TypeError, UnicodeEncodeError):
        return None
    if len(out) + UNIQ_PROPERTY_BYTES > MAX_PROPERTIES_BYTES:
        return None
    return out


class Lane:
    """A blocking producer's `send_async`, taken on the caller's thread: the message is
    checked, given its unique id and encoded into its topic's open batch here, and the I/O
    loop is woken once for everything handed over until it takes the batches (`take`).

    `submit` takes the common message: to a topic it was told of with `learn`, a body that
    needs no compression (at most `compress_over` bytes, when that is above 0), properties
    (tags, keys, the user's own) that ask for no delay and bring no id of their own. It
    returns None for any other; the producer prepares those the long way and hands them over
    with `submit_entry`. A batch is closed once its bodies reach `max_bytes` or it holds
    `max_messages`; after `close`, every hand-over raises.

    With `wake_when_full` (a producer with a linger), the loop is woken again when a batch
    closes: it takes the closed batches at once (`take(full_only=True)`) and the open ones
    when the linger ends."""

    def __init__(self, wake: Callable[[], object], ids: Any, *, max_bytes: int,
                 max_messages: int, compress_over: int = 0, wake_when_full: bool = False) -> None:
        self._wake = wake
        self._ids = ids  # a UniqIdGenerator
        self._compress_over = compress_over
        self._max_bytes = max_bytes
        self._max_messages = max_messages
        self._lock = threading.Lock()
        self._open: dict[str, EntryBatch] = {}
        self._full: list[EntryBatch] = []
        self._woken = False
        self._wake_when_full = wake_when_full
        self._woken_full = False
        self._closed: Callable[[], BaseException] | None = None
        self._limits: dict[str, int] = {}

    def learn(self, topic: str, limit: int) -> None:
        """`topic` is valid, and a message to it whose body and encoded properties (its id
        aside) come to at most `limit` bytes is within the broker's limit; -1: no message to
        it is common (a retry topic's)."""
        if len(self._limits) >= MAX_TOPICS:
            self._limits.clear()  # a producer sending to endless topics: relearned on use
        self._limits[topic] = limit

    def submit(self, msg: Any) -> SendFuture[SendResult] | None:
        body = msg.body
        given = msg.properties
        if not body or type(body) is not bytes or type(given) is not dict:
            return None
        extra = _plain_properties(given)
        limit = self._limits.get(msg.topic)
        if (extra is None or limit is None or len(body) + len(extra) > limit
                or 0 < self._compress_over < len(body)):
            return None
        flag = msg.flag
        if type(flag) is not int or not FLAG_MIN <= flag <= FLAG_MAX:
            return None
        uniq = self._ids.next_id()
        given[_UNIQ] = uniq
        props = extra + (_UNIQ_PREFIX + uniq + P.PROPERTY_SEPARATOR).encode()
        return self._put(msg.topic, body, flag, props, uniq)

    def submit_entry(self, topic: str, body: bytes, flag: int, props: bytes,
                     uniq: str) -> SendFuture[SendResult]:
        return self._put(topic, body, flag, props, uniq)

    def _put(self, topic: str, body: bytes, flag: int, props: bytes,
             uniq: str) -> SendFuture[SendResult]:
        future: SendFuture[SendResult] = SendFuture()
        with self._lock:
            if self._closed is not None:
                raise self._closed()
            batch = self._open.get(topic)
            if batch is None:
                batch = self._open[topic] = EntryBatch(topic)
            batch.add(body, flag, props, uniq, future)
            wake = not self._woken
            self._woken = True
            if batch.size >= self._max_bytes or len(batch.ids) >= self._max_messages:
                self._full.append(self._open.pop(topic))
                if self._wake_when_full and not self._woken_full:
                    self._woken_full = wake = True
        if wake:
            self._wake()
        return future

    def take(self, full_only: bool = False) -> list[EntryBatch]:
        """Every batch handed over since the last take, full ones first (oldest first);
        `full_only`: the closed ones alone, the open ones stay open."""
        with self._lock:
            batches = self._full
            self._full = []
            self._woken_full = False
            if not full_only:
                batches.extend(self._open.values())
                self._open = {}
                self._woken = False
        return batches

    def close(self, error: Callable[[], BaseException]) -> None:
        """From now on a hand-over raises `error()`; what was handed over stays to be taken."""
        with self._lock:
            self._closed = error
