"""Orderly consumption (RocketMQ's ConsumeMessageOrderlyService): each queue is consumed by
one task at a time, in offset order, and only while this member holds the queue's lock on
the broker. A failed batch suspends its own queue and is retried locally; past
max_reconsume_times it goes to the dead-letter queue and the queue moves on."""

from __future__ import annotations

import asyncio
import logging
import time

from ...common.message import MessageExt
from .host import ConsumeHost
from .process_queue import ProcessQueue
from .runner import ListenerRunner
from .types import ConsumeOrderlyContext, ConsumeOrderlyStatus

log = logging.getLogger("ferrymq.client.consume")


def orderly_succeeded(result: object) -> bool:
    return result in (
        ConsumeOrderlyStatus.SUCCESS,
        ConsumeOrderlyStatus.COMMIT,
        ConsumeOrderlyStatus.SUCCESS.value,
        ConsumeOrderlyStatus.COMMIT.value,
    )


class OrderlyService:
    def __init__(self, consumer: ConsumeHost, runner: ListenerRunner) -> None:
        self.c = consumer
        self.runner = runner
        self.tasks: dict[ProcessQueue, asyncio.Task[None]] = {}
        self.stopping = False

    def submit(self, pq: ProcessQueue) -> None:
        """New messages arrived: start the queue's consume task unless one is running or the
        queue is suspended (pq.consuming stays set while a retry is scheduled)."""
        if not pq.consuming and pq.has_pending():
            self._start(pq)

    def _start(self, pq: ProcessQueue) -> None:
        if self.stopping or pq.dropped:
            pq.consuming = False
            return
        pq.consuming = True
        task = asyncio.create_task(self._run(pq), name=f"ferrymq-orderly-{pq.mq}")
        self.tasks[pq] = task
        task.add_done_callback(lambda _t: self.tasks.pop(pq, None))

    def resume_later(self, pq: ProcessQueue, delay: float) -> None:
        asyncio.get_running_loop().call_later(delay, self._start, pq)

    async def _run(self, pq: ProcessQueue) -> None:
        keep_flag = False
        try:
            while not self.stopping and not pq.dropped:
                if self.c.clustering and (not pq.locked or self.c.lock_expired(pq)):
                    keep_flag = True
                    self.c.lock_later(pq)
                    return
                msgs = pq.take(self.c.options.consume_message_batch_max_size)
                if not msgs:
                    return
                self.c.reset_retry_topic(msgs)
                ctx = ConsumeOrderlyContext(pq.mq)
                started = time.monotonic()
                ok = orderly_succeeded(await self.runner.call(msgs, ctx))
                self.c.consume_stats.consumed(pq.mq.topic, len(msgs) if ok else 0,
                                              0 if ok else len(msgs), 1,
                                              (time.monotonic() - started) * 1000)
                if pq.dropped:
                    # Handed over while the batch ran: this member still holds the broker
                    # lock (it is given up only after this task ends), so a finished batch is
                    # committed and goes out with the offset persisted before the unlock.
                    if ok:
                        self.c.settle_orderly(pq, closing=True)
                    return
                if ok:
                    self.c.settle_orderly(pq)
                    continue
                if not await self._failed(pq, msgs, ctx):
                    keep_flag = True
                    return
        finally:
            if not keep_flag:
                pq.consuming = False

    async def _failed(
        self, pq: ProcessQueue, msgs: list[MessageExt], ctx: ConsumeOrderlyContext
    ) -> bool:
        """False: the queue is suspended and retried later. True: nothing left to retry (all
        went to the DLQ or, broadcasting, were dropped) and the queue goes on."""
        limit = self.c.options.orderly_max_reconsume_times
        suspend = False
        for m in msgs:
            if m.reconsume_times < limit:
                suspend = True
                m.reconsume_times += 1
            elif not self.c.clustering:
                log.warning("%s: BROADCASTING, %s failed %d times; dropped", self.c.group, m, limit)
            elif await self.c.dead_letter(m):
                log.warning(
                    "%s: %s failed %d times; moved to the dead-letter queue",
                    self.c.group,
                    m,
                    m.reconsume_times,
                )
            else:
                suspend = True
                m.reconsume_times += 1
        if suspend:
            pq.reconsume(msgs)
            millis = ctx.suspend_current_queue_time_millis
            delay = millis / 1000 if millis > 0 else self.c.options.suspend_current_queue_time
            self.resume_later(pq, delay)
            return False
        self.c.settle_orderly(pq)
        return True

    def lock_acquired(self, pq: ProcessQueue) -> None:
        pq.locked = True
        pq.last_lock_time = time.monotonic()

    async def wait_queue_idle(self, pq: ProcessQueue, timeout: float) -> bool:
        task = self.tasks.get(pq)
        if task is None:
            return True
        done, _ = await asyncio.wait({task}, timeout=timeout)
        return bool(done)

    async def drain(self) -> None:
        self.stopping = True
        while self.tasks:
            await asyncio.gather(*list(self.tasks.values()), return_exceptions=True)
