"""Producer auto-batching (RocketMQ 5's autoBatch, Kafka's record accumulator): concurrent
single-message sends to one topic leave as one SEND_BATCH_MESSAGE request, and each caller
still gets its own SendResult (its own unique id, offset id and queue offset).

A batch forms only from what is already waiting: with the default `max_delay_ms=0` the
accumulator flushes as soon as the event loop gets to it (one `call_soon`), so a lone send
goes out in the same loop turn it was made in and an idle producer adds no latency, while a
burst (many callers, or one caller issuing many `send_async`) coalesces naturally. A positive
delay trades latency for larger batches, as Kafka's `linger.ms` does.

Everything here runs on the producer's event loop; it holds no lock."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, fields
from typing import Protocol

from ..common.message import BatchEntry
from .results import SendResult, SendStatus

KiB = 1024
MiB = 1024 * KiB


@dataclass(frozen=True, slots=True)
class AutoBatchConfig:
    """RocketMQ 5's producer options of the same names. `enabled=False` sends every message on
    its own, as RocketMQ 4 clients do."""

    enabled: bool = True
    max_delay_ms: float = 0.0  # how long the first message of a batch may wait for others
    max_bytes: int = 32 * KiB  # a batch is sent once its bodies reach this size
    total_max_bytes: int = 32 * MiB  # bodies waiting in all batches; above it, flush at once
    max_messages: int = 256  # RocketMQ's batch limit per request is by bytes; this bounds work

    def __post_init__(self) -> None:
        if self.max_delay_ms < 0:
            raise ValueError("batch_max_delay_ms must be >= 0")
        if self.max_bytes < 1 or self.total_max_bytes < self.max_bytes:
            raise ValueError("need 1 <= batch_max_bytes <= total_batch_max_bytes")
        if self.max_messages < 2:
            raise ValueError("a batch needs room for at least 2 messages")


class Waiter(Protocol):
    """Who waits for one message's result: an asyncio future (async callers) or, for the
    blocking producer's send_async, the caller's own concurrent future, settled here
    directly. A concurrent one is running by then, so its caller can no longer cancel it."""

    def done(self) -> bool: ...

    def set_result(self, result: SendResult, /) -> None: ...

    def set_exception(self, exception: BaseException, /) -> None: ...


@dataclass(slots=True)
class Pending:
    """One message waiting in a batch: what it will be encoded as, and who waits for it."""

    item: BatchEntry
    uniq_id: str
    future: Waiter
    # The path a message takes on its own; None: the accumulator's default sender, given
    # the item (no closure per message).
    send_alone: Callable[[], Awaitable[SendResult]] | None
    # False for a running concurrent future: nobody can settle it but us, so the check for a
    # cancellation (a lock of its own per message) is skipped.
    cancellable: bool = True


# (topic, the messages of one batch) -> one result per message, in order
BatchSender = Callable[[str, list[Pending]], Awaitable[list[SendResult]]]
# One message on its own (a refused batch's messages, a lone one), for Pendings without a
# send_alone of their own.
AloneSender = Callable[[BatchEntry], Awaitable[SendResult]]


class _Batch:
    __slots__ = ("items", "size")

    def __init__(self) -> None:
        self.items: list[Pending] = []
        self.size = 0


class Accumulator:
    def __init__(self, config: AutoBatchConfig, send_batch: BatchSender,
                 send_alone: AloneSender | None = None) -> None:
        self.config = config
        self._send_batch = send_batch
        self._send_alone = send_alone
        self._open: dict[str, _Batch] = {}
        self._bytes = 0
        self._scheduled: asyncio.Handle | None = None
        self._in_flight: set[asyncio.Task[None]] = set()
        # What batching achieved, for tests and operators: requests made for batches of two
        # or more, and the messages they carried.
        self.batches_sent = 0
        self.messages_batched = 0

    def add(self, topic: str, pending: Pending) -> None:
        batch = self._open.get(topic)
        if batch is None:
            batch = self._open[topic] = _Batch()
        batch.items.append(pending)
        size = len(pending.item.body)
        batch.size += size
        self._bytes += size
        cfg = self.config
        if batch.size >= cfg.max_bytes or len(batch.items) >= cfg.max_messages:
            self._flush_topic(topic)
        if self._bytes >= cfg.total_max_bytes:
            self.flush()
        elif self._open and self._scheduled is None:
            loop = asyncio.get_running_loop()
            if cfg.max_delay_ms > 0:
                self._scheduled = loop.call_later(cfg.max_delay_ms / 1000, self.flush)
            else:
                self._scheduled = loop.call_soon(self.flush)

    def flush(self) -> None:
        if self._scheduled is not None:
            self._scheduled.cancel()
            self._scheduled = None
        for topic in list(self._open):
            self._flush_topic(topic)

    async def drain(self) -> None:
        """Send everything waiting and wait for every batch in flight (producer shutdown).
        Messages added meanwhile (handed over before the shutdown) are sent too."""
        while True:
            self.flush()
            if not self._in_flight:
                return
            await asyncio.gather(*list(self._in_flight), return_exceptions=True)

    def _flush_topic(self, topic: str) -> None:
        batch = self._open.pop(topic, None)
        if batch is None:
            return
        self._bytes -= batch.size
        task = asyncio.ensure_future(self._deliver(topic, batch.items))
        self._in_flight.add(task)
        task.add_done_callback(self._in_flight.discard)

    async def _deliver(self, topic: str, items: list[Pending]) -> None:
        # A caller may have cancelled meanwhile.
        live = [p for p in items if not (p.cancellable and p.future.done())]
        if not live:
            return
        if len(live) == 1:
            await self._settle_alone(live[0])
            return
        try:
            results = await self._send_batch(topic, live)
        except Exception as exc:
            if getattr(exc, "retriable", True):
                for p in live:
                    if not p.future.done():
                        p.future.set_exception(exc)
                return
            # Refused for something in it (not the broker's state): each message on its own, so
            # only the culprit fails and the others are stored.
            await asyncio.gather(*(self._settle_alone(p) for p in live))
            return
        self.batches_sent += 1
        self.messages_batched += len(live)
        for p, result in zip(live, results, strict=True):
            if not (p.cancellable and p.future.done()):
                p.future.set_result(result)

    async def _settle_alone(self, p: Pending) -> None:
        try:
            if p.send_alone is not None:
                result = await p.send_alone()
            else:
                assert self._send_alone is not None, "a Pending without send_alone needs a default"
                result = await self._send_alone(p.item)
        except Exception as exc:
            if not p.future.done():
                p.future.set_exception(exc)
            return
        if not p.future.done():
            p.future.set_result(result)




def split_batch_result(batch: SendResult, uniq_ids: list[str]) -> list[SendResult]:
    """The broker answers a batch with its first queue offset and the offset ids joined by
    commas; message i was stored at first + i."""
    base = batch.queue_offset
    offset_ids = batch.offset_msg_id.split(",")
    if len(offset_ids) < len(uniq_ids):
        offset_ids += [""] * (len(uniq_ids) - len(offset_ids))
    status, queue_id, broker = batch.status, batch.queue_id, batch.broker
    return [
        _send_result(status, uniq, offset_ids[i], queue_id, base + i if base >= 0 else -1, broker)
        for i, uniq in enumerate(uniq_ids)
    ]


# SendResult is frozen: its __init__ sets each field through object.__setattr__. One result
# per message of every batch is made here, through the slots' own setters (half the cost).
_SLOTS = SendResult.__dict__
if [f.name for f in fields(SendResult)] != [
        "status", "msg_id", "offset_msg_id", "queue_id", "queue_offset", "broker"]:
    raise ImportError("SendResult's fields changed: update _send_result")
_set_status = _SLOTS["status"].__set__
_set_msg_id = _SLOTS["msg_id"].__set__
_set_offset_msg_id = _SLOTS["offset_msg_id"].__set__
_set_queue_id = _SLOTS["queue_id"].__set__
_set_queue_offset = _SLOTS["queue_offset"].__set__
_set_broker = _SLOTS["broker"].__set__
_new = object.__new__


def _send_result(status: SendStatus, msg_id: str, offset_msg_id: str, queue_id: int,
                 queue_offset: int, broker: str) -> SendResult:
    r: SendResult = _new(SendResult)
    _set_status(r, status)
    _set_msg_id(r, msg_id)
    _set_offset_msg_id(r, offset_msg_id)
    _set_queue_id(r, queue_id)
    _set_queue_offset(r, queue_offset)
    _set_broker(r, broker)
    return r
