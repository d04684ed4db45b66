"""Concurrent consumption (RocketMQ's ConsumeMessageConcurrentlyService): batches of a queue
run in parallel; after each, failed messages are sent back to the broker's retry path (or,
if that fails, consumed again here later) and the rest leave the process queue.

Finished requests come back from the runner in runs; the consumed messages of a run are
acknowledged with one process-queue removal and one offset update per queue."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import defaultdict

from ...common.message import MessageExt
from .host import ConsumeHost
from .process_queue import ProcessQueue
from .runner import ConsumeRequest, ListenerRunner
from .types import ConsumeConcurrentlyContext, ConsumeStatus

log = logging.getLogger("ferrymq.client.consume")

# A message held past consume_timeout is sent back with this level (RocketMQ: 3).
TIMEOUT_DELAY_LEVEL = 3
_SUCCESS = ConsumeStatus.CONSUME_SUCCESS


def concurrent_status(result: object) -> ConsumeStatus:
    if result is ConsumeStatus.CONSUME_SUCCESS or result == ConsumeStatus.CONSUME_SUCCESS.value:
        return ConsumeStatus.CONSUME_SUCCESS
    return ConsumeStatus.RECONSUME_LATER


class ConcurrentService:
    def __init__(self, host: ConsumeHost, runner: ListenerRunner) -> None:
        self.c = host
        self.runner = runner
        runner.on_done = self._finished
        self._later: set[asyncio.TimerHandle] = set()
        self._sending: set[asyncio.Task[None]] = set()
        self._closing: set[ProcessQueue] = set()
        self._progress: asyncio.Event | None = None  # set after every run handed back

    def submit(self, pq: ProcessQueue, msgs: list[MessageExt]) -> None:
        n = self.c.options.consume_message_batch_max_size
        if self.c.is_retry(pq.mq):
            self.c.reset_retry_topic(msgs)
        mq = pq.mq
        if n == 1:
            reqs = [ConsumeRequest(pq, [m], ConsumeConcurrentlyContext(mq)) for m in msgs]
        else:
            reqs = [
                ConsumeRequest(pq, msgs[i : i + n], ConsumeConcurrentlyContext(mq))
                for i in range(0, len(msgs), n)
            ]
        # Less than a full pull: caught up, so the listener is handed the lock at once.
        self.runner.submit(reqs, prompt=len(msgs) < self.c.options.pull_batch_size)

    def submit_later(self, pq: ProcessQueue, msgs: list[MessageExt], delay: float) -> None:
        loop = asyncio.get_running_loop()
        handle: asyncio.TimerHandle

        def fire() -> None:
            self._later.discard(handle)
            if not pq.dropped:
                self.submit(pq, msgs)

        handle = loop.call_later(delay, fire)
        self._later.add(handle)

    def _finished(self, reqs: list[ConsumeRequest]) -> None:
        try:
            self._settle_finished(reqs)
        finally:
            if self._progress is not None:
                self._progress.set()

    def _settle_finished(self, reqs: list[ConsumeRequest]) -> None:
        done: dict[ProcessQueue, list[MessageExt]] = defaultdict(list)
        closing = self._closing
        # topic -> [consumed, failed, listener calls, seconds in them], for the running info.
        counts: dict[str, list[float]] = {}
        now = time.time()
        for req in reqs:
            pq = req.pq
            if not req.ran or (pq.dropped and pq not in closing):
                # The queue went to another member meanwhile; it will deliver these again.
                continue
            ctx: ConsumeConcurrentlyContext = req.ctx
            msgs = req.msgs
            result = req.result
            row = counts.get(pq.mq.topic)
            if row is None:
                row = counts[pq.mq.topic] = [0, 0, 0, 0.0]
            row[2] += 1
            row[3] += now - req.started
            if result is _SUCCESS and ctx.ack_index >= len(msgs) - 1:
                done[pq] += msgs  # the common case: the whole batch consumed
                row[0] += len(msgs)
                continue
            if concurrent_status(result) is ConsumeStatus.CONSUME_SUCCESS:
                ack_index = max(min(ctx.ack_index, len(msgs) - 1), -1)
            else:
                ack_index = -1
            done[pq] += msgs[: ack_index + 1]
            failed = msgs[ack_index + 1 :]
            row[0] += ack_index + 1
            row[1] += len(failed)
            if failed and not self.c.clustering:
                for m in failed:
                    log.warning("%s: BROADCASTING, consuming %s failed; dropped", self.c.group, m)
                done[pq] += failed
            elif failed:
                task = asyncio.get_running_loop().create_task(self._send_back(pq, failed, ctx))
                self._sending.add(task)
                task.add_done_callback(self._sending.discard)
        for pq, msgs in done.items():
            self.c.settle(pq, msgs, closing=pq in closing)
        for topic, (n_ok, n_failed, calls, secs) in counts.items():
            self.c.consume_stats.consumed(topic, int(n_ok), int(n_failed), int(calls), secs * 1000)

    async def _send_back(
        self, pq: ProcessQueue, failed: list[MessageExt], ctx: ConsumeConcurrentlyContext
    ) -> None:
        sent = await asyncio.gather(
            *(self.c.send_back(m, ctx.delay_level_when_next_consume) for m in failed)
        )
        kept = [m for m, ok in zip(failed, sent, strict=True) if not ok]
        done = [m for m, ok in zip(failed, sent, strict=True) if ok]
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
        if done and not pq.dropped:
            self.c.settle(pq, done)

    def close_queue(self, pq: ProcessQueue) -> None:
        """The queue is being handed over: acknowledge what finished on it already, so the
        offset persisted next covers it; only what is still in the listener comes again."""
        self._closing.add(pq)
        try:
            self.runner.collect()
        finally:
            self._closing.discard(pq)

    def begin_close(self, pq: ProcessQueue) -> None:
        """The queue was just dropped and is being handed over: runs on it handed back from
        now on are acknowledged, not dropped (finish_queue ends this)."""
        self._closing.add(pq)

    async def finish_queue(self, pq: ProcessQueue, wait: float) -> None:
        """close_queue, after waiting up to `wait` seconds for the listener calls still
        running on the queue, so that what they consume is acknowledged too and the next owner
        (which waits for our release: broker/handover.py) does not deliver it again."""
        self._closing.add(pq)
        try:
            loop = asyncio.get_running_loop()
            deadline = loop.time() + wait
            while True:
                self.runner.collect()
                left = deadline - loop.time()
                if left <= 0 or not self.runner.busy_with(pq):
                    break
                if self._progress is None:
                    self._progress = asyncio.Event()
                self._progress.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._progress.wait(), left)
        finally:
            self._closing.discard(pq)

    async def clean_expired(self) -> None:
        """Messages whose consumption started more than consume_timeout ago are sent back and
        released, so one stuck listener call cannot hold a queue's offset forever."""
        limit = self.c.options.consume_timeout
        now = time.time()
        for req in self.runner.running():
            pq = req.pq
            if pq.dropped or now - req.started <= limit:
                continue
            for m in req.msgs:
                log.warning(
                    "%s: %s has been consuming for over %.0fs; sent back", self.c.group, m, limit
                )
                if await self.c.send_back(m, TIMEOUT_DELAY_LEVEL) and not pq.dropped:
                    self.c.settle(pq, [m])

    async def drain(self) -> None:
        """Shutdown: every batch already handed out finishes (so the committed offset covers
        it); retries scheduled for later are abandoned (their offsets stay uncommitted)."""
        for handle in list(self._later):
            handle.cancel()
        self._later.clear()
        await self.runner.wait_idle()
        while self._sending:
            await asyncio.gather(*list(self._sending), return_exceptions=True)
