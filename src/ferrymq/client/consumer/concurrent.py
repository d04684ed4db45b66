"""Concurrent consumption (RocketMQ's ConsumeMessageConcurrentlyService): batches of a queue
run in parallel; after each, failed messages are sent back to the broker's retry path (or,
if that fails, consumed again here later) and the rest leave the process queue."""

from __future__ import annotations

import asyncio
import logging
import time
from typing import TYPE_CHECKING

from ...common.message import MessageExt
from .process_queue import ProcessQueue
from .runner import ListenerRunner
from .types import ConsumeConcurrentlyContext, ConsumeStatus

if TYPE_CHECKING:
    from .push import AsyncPushConsumer

log = logging.getLogger("ferrymq.client.consume")

# A message held past consume_timeout is sent back with this level (RocketMQ: 3).
TIMEOUT_DELAY_LEVEL = 3


def concurrent_status(result: object) -> ConsumeStatus:
    if result is ConsumeStatus.CONSUME_SUCCESS or result == ConsumeStatus.CONSUME_SUCCESS.value:
        return ConsumeStatus.CONSUME_SUCCESS
    return ConsumeStatus.RECONSUME_LATER


class ConcurrentService:
    def __init__(self, consumer: AsyncPushConsumer, runner: ListenerRunner) -> None:
        self.c = consumer
        self.runner = runner
        self.inflight: set[asyncio.Task[None]] = set()
        self._later: set[asyncio.TimerHandle] = set()

    def submit(self, pq: ProcessQueue, msgs: list[MessageExt]) -> None:
        n = self.c.options.consume_message_batch_max_size
        for i in range(0, len(msgs), n):
            task = asyncio.create_task(self._consume(pq, msgs[i : i + n]))
            self.inflight.add(task)
            task.add_done_callback(self.inflight.discard)

    def submit_later(self, pq: ProcessQueue, msgs: list[MessageExt], delay: float) -> None:
        loop = asyncio.get_running_loop()
        handle: asyncio.TimerHandle

        def fire() -> None:
            self._later.discard(handle)
            if not pq.dropped:
                self.submit(pq, msgs)

        handle = loop.call_later(delay, fire)
        self._later.add(handle)

    async def _consume(self, pq: ProcessQueue, msgs: list[MessageExt]) -> None:
        if pq.dropped:
            return
        ctx = ConsumeConcurrentlyContext(pq.mq)
        self.c.reset_retry_topic(msgs)
        status = concurrent_status(await self.runner.call(msgs, ctx))
        if pq.dropped:
            # The queue went to another member meanwhile; it will deliver these again.
            log.debug(
                "%s: %s dropped; result of %d message(s) ignored", self.c.group, pq.mq, len(msgs)
            )
            return
        await self._process(pq, msgs, status, ctx)

    async def _process(
        self,
        pq: ProcessQueue,
        msgs: list[MessageExt],
        status: ConsumeStatus,
        ctx: ConsumeConcurrentlyContext,
    ) -> None:
        if status is ConsumeStatus.CONSUME_SUCCESS:
            ack_index = max(min(ctx.ack_index, len(msgs) - 1), -1)
        else:
            ack_index = -1
        done = list(msgs[: ack_index + 1])
        failed = list(msgs[ack_index + 1 :])
        if failed and not self.c.clustering:
            for m in failed:
                log.warning("%s: BROADCASTING, consuming %s failed; dropped", self.c.group, m)
            done += failed
        elif failed:
            sent = await asyncio.gather(
                *(self.c.send_back(m, ctx.delay_level_when_next_consume) for m in failed)
            )
            kept = [m for m, ok in zip(failed, sent, strict=True) if not ok]
            done += [m for m, ok in zip(failed, sent, strict=True) if ok]
            if kept:
                for m in kept:
                    m.reconsume_times += 1
                log.warning(
                    "%s: %d message(s) of %s could not be sent back; consuming them again in %.1fs",
                    self.c.group,
                    len(kept),
                    pq.mq,
                    self.c.options.local_retry_delay,
                )
                self.submit_later(pq, kept, self.c.options.local_retry_delay)
        if pq.dropped:
            return
        self.c.settle(pq, done)

    async def clean_expired(self) -> None:
        """Messages whose consumption started more than consume_timeout ago are sent back and
        released, so one stuck listener call cannot hold a queue's offset forever."""
        limit_ms = self.c.options.consume_timeout * 1000
        now_ms = time.time() * 1000
        for pq in list(self.c.table.values()):
            if pq.dropped:
                continue
            for m, started in pq.oldest_started():
                if now_ms - started <= limit_ms:
                    continue
                log.warning(
                    "%s: %s has been consuming for over %.0fs; sent back",
                    self.c.group,
                    m,
                    self.c.options.consume_timeout,
                )
                if await self.c.send_back(m, TIMEOUT_DELAY_LEVEL) and not pq.dropped:
                    self.c.settle(pq, [m])

    async def drain(self) -> None:
        """Shutdown: every batch already handed out finishes (so the committed offset covers
        it); retries scheduled for later are abandoned (their offsets stay uncommitted)."""
        for handle in list(self._later):
            handle.cancel()
        self._later.clear()
        while self.inflight:
            await asyncio.gather(*list(self.inflight), return_exceptions=True)
