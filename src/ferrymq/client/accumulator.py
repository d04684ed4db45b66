"""Producer auto-batching (RocketMQ 5's autoBatch, Kafka's record accumulator): concurrent
single-message sends to one topic leave as one SEND_BATCH_MESSAGE request, and each caller
still gets its own SendResult (its own unique id, offset id and queue offset).

A batch forms only from what is already waiting: with the default `max_delay_ms=0` the
accumulator flushes as soon as the event loop gets to it (one `call_soon`), so a lone send
goes out in the same loop turn it was made in and an idle producer adds no latency, while a
burst (many callers, or one caller issuing many `send_async`) coalesces naturally. A positive
delay trades latency for larger batches, as Kafka's `linger.ms` does.

A batch is an `EntryBatch` (client/sendbatch): its request body is encoded as messages
join it. The blocking producer's lane forms batches on its callers' threads and hands them
to `deliver`. Everything here runs on the producer's event loop; it holds no lock."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Protocol

from ..common.message import BatchEntry
from ..common.record import properties_encode, split_batch
from .errors import ClientClosedError
from .results import SendResult
from .sendbatch import EntryBatch

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


# The path a message takes on its own (a refused batch's messages, a lone one); a message
# added without one takes the accumulator's default sender, given the message as its batch
# entry encodes it: (topic, flag, body, encoded properties, unique id).
AlonePath = Callable[[], Awaitable[SendResult]]
# One batch -> the broker's answer for all of it
BatchSender = Callable[[EntryBatch], Awaitable[SendResult]]
AloneSender = Callable[[str, int, bytes, bytes, str], Awaitable[SendResult]]


class Accumulator:
    def __init__(self, config: AutoBatchConfig, send_batch: BatchSender,
                 send_alone: AloneSender | None = None) -> None:
        self.config = config
        self._send_batch = send_batch
        self._send_alone = send_alone
        self._open: dict[str, EntryBatch] = {}
        self._bytes = 0
        self._scheduled: asyncio.Handle | None = None
        self._in_flight: set[asyncio.Task[None]] = set()
        # What batching achieved, for tests and operators: requests made for batches of two
        # or more, and the messages they carried.
        self.batches_sent = 0
        self.messages_batched = 0

    def add(self, topic: str, entry: BatchEntry, uniq_id: str, waiter: Waiter,
            alone: AlonePath | None = None) -> None:
        batch = self._open.get(topic)
        if batch is None:
            batch = self._open[topic] = EntryBatch(topic)
        body = entry.body
        batch.add(body, entry.flag, properties_encode(entry.properties), uniq_id, waiter, alone)
        self._bytes += len(body)
        cfg = self.config
        if batch.size >= cfg.max_bytes or len(batch) >= cfg.max_messages:
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
        if batch is not None:
            self._bytes -= batch.size
            self.deliver(batch, cancellable=True)

    def deliver(self, batch: EntryBatch, *, cancellable: bool = False) -> None:
        """Send `batch` now (one formed here, or by a producer's lane). `cancellable`: its
        waiters may be cancelled before it goes (asyncio callers); a cancelled message is
        left out rather than stored for a caller who gave up on it."""
        task = asyncio.ensure_future(self._deliver(batch, cancellable))
        self._in_flight.add(task)
        task.add_done_callback(self._in_flight.discard)

    async def _deliver(self, batch: EntryBatch, cancellable: bool) -> None:
        try:
            await self._deliver_now(batch, cancellable)
        except asyncio.CancelledError:
            # A shutdown that ran out of time cancels what is in flight: the callers learn
            # that, rather than wait forever on futures nobody will settle. Whether the broker
            # stored such a message is not known.
            for w in batch.waiters:
                if not w.done():
                    w.set_exception(ClientClosedError("Producer", "send (it was in flight when the "
                                                      "shutdown gave up waiting for its answer)"))
            raise

    async def _deliver_now(self, batch: EntryBatch, cancellable: bool) -> None:
        if cancellable and any(w.done() for w in batch.waiters):
            batch = _live(batch)
        if len(batch) <= 1:
            if len(batch):
                await self._settle_alone(batch, 0, split_batch(batch.body())[0])
            return
        try:
            result = await self._send_batch(batch)
        except Exception as exc:
            if getattr(exc, "retriable", True):
                for w in batch.waiters:
                    if not w.done():
                        w.set_exception(exc)
                return
            # Refused for something in it (not the broker's state): each message on its own, so
            # only the culprit fails and the others are stored.
            await asyncio.gather(*(self._settle_alone(batch, i, entry)
                                   for i, entry in enumerate(split_batch(batch.body()))))
            return
        self.batches_sent += 1
        self.messages_batched += len(batch)
        batch.settle(result)

    async def _settle_alone(self, batch: EntryBatch, i: int, entry: tuple[int, bytes, bytes]) -> None:
        """Message `i` of `batch` on its own; `entry`: its (flag, body, properties) as encoded."""
        waiter: Waiter = batch.waiters[i]
        alone: AlonePath | None = batch.paths[i]
        try:
            if alone is not None:
                result = await alone()
            else:
                assert self._send_alone is not None, "a message without a path of its own needs a default"
                flag, body, props = entry
                result = await self._send_alone(batch.topic, flag, body, props, batch.ids[i])
        except Exception as exc:
            if not waiter.done():
                waiter.set_exception(exc)
            return
        if not waiter.done():
            waiter.set_result(result)


def _live(batch: EntryBatch) -> EntryBatch:
    """`batch` without the messages whose waiters are done (cancelled)."""
    live = EntryBatch(batch.topic)
    for (flag, body, props), uniq, w, p in zip(split_batch(batch.body()), batch.ids, batch.waiters,
                                               batch.paths, strict=True):
        if not w.done():
            live.add(body, flag, props, uniq, w, p)
    return live
