"""Delayed delivery (RocketMQ's ScheduleMessageService).

A message with delay level L is stored in SCHEDULE_TOPIC_XXXX queue L-1 with its real topic and
queue in properties, and the consume-queue tag code set to its delivery time. Each level's
queue is in delivery-time order, so the service only looks at the head of each queue; progress
per level is kept in delayOffset.json and survives restarts."""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

from ..common import props as P
from ..common.names import SCHEDULE_TOPIC
from ..common.record import MessageDecodeError, decode_record, properties_map
from ..store import StoreMessage

if TYPE_CHECKING:
    from .core import BrokerCore

log = logging.getLogger("ferrymq.broker.schedule")

BATCH = 64


def to_scheduled(msg: StoreMessage, level: int, max_level: int) -> StoreMessage:
    """Redirect a delayed message to its level's schedule queue (capped at the longest level)."""
    level = min(level, max_level)
    props = dict(properties_map(msg.properties))
    props[P.PROPERTY_REAL_TOPIC] = msg.topic
    props[P.PROPERTY_REAL_QUEUE_ID] = str(msg.queue_id)
    props[P.PROPERTY_DELAY_TIME_LEVEL] = str(level)
    return StoreMessage(
        topic=SCHEDULE_TOPIC,
        queue_id=level - 1,
        body=msg.body,
        properties=props,
        flag=msg.flag,
        sys_flag=msg.sys_flag,
        born_timestamp=msg.born_timestamp,
        born_host=msg.born_host,
        reconsume_times=msg.reconsume_times,
        prepared_transaction_offset=msg.prepared_transaction_offset,
    )


class ScheduleService:
    def __init__(self, broker: BrokerCore, levels_ms: list[int]) -> None:
        self.broker = broker
        self.levels_ms = levels_ms
        self._task: asyncio.Task[None] | None = None
        self._wake = asyncio.Event()

    @property
    def max_level(self) -> int:
        return len(self.levels_ms)

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="ferrymq-schedule")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
            self._task = None

    def poke(self) -> None:
        self._wake.set()

    async def _run(self) -> None:
        tick = self.broker.config.schedule_tick_ms / 1000
        while True:
            try:
                delivered = 0
                for level in range(1, self.max_level + 1):
                    delivered += await self.deliver_due(level)
                if delivered:
                    continue
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("delay schedule pass failed; retrying")
            self._wake.clear()
            try:
                await asyncio.wait_for(self._wake.wait(), tick)
            except TimeoutError:
                pass

    async def deliver_due(self, level: int) -> int:
        """Deliver every message of `level` whose time has come; returns how many."""
        broker = self.broker
        store = broker.store
        assert store is not None
        queue_id = level - 1
        offset = broker.delay_offsets.get(level)
        min_offset = store.reads.get_min_offset(SCHEDULE_TOPIC, queue_id)
        if offset < min_offset:
            offset = min_offset
        now = broker.now_ms()
        delivered = 0
        while True:
            entries = store.reads.read_queue_entries(SCHEDULE_TOPIC, queue_id, offset, BATCH)
            if not entries:
                break
            for entry in entries:
                if entry.tag_code > now:
                    broker.delay_offsets.set(level, offset)
                    return delivered
                raw = store.reads.read_queue_record(SCHEDULE_TOPIC, queue_id, entry)
                if raw is not None:
                    ok = await self._redeliver(raw, entry.phys_offset)
                    if not ok:
                        # Keep the offset: the message is retried on the next pass.
                        broker.delay_offsets.set(level, offset)
                        return delivered
                    delivered += 1
                offset = entry.queue_offset + 1
            broker.delay_offsets.set(level, offset)
        return delivered

    async def _redeliver(self, raw: bytes, phys_offset: int) -> bool:
        try:
            msg = decode_record(raw, decompress=False)
        except MessageDecodeError as exc:
            log.error("schedule queue points at an unreadable record at %d: %s; skipped", phys_offset, exc)
            return True
        props = dict(msg.properties)
        real_topic = props.pop(P.PROPERTY_REAL_TOPIC, None)
        real_qid = props.pop(P.PROPERTY_REAL_QUEUE_ID, "0")
        props.pop(P.PROPERTY_DELAY_TIME_LEVEL, None)
        if not real_topic:
            log.error("scheduled message at %d has no REAL_TOPIC; skipped", phys_offset)
            return True
        inner = StoreMessage(
            topic=real_topic,
            queue_id=int(real_qid),
            body=msg.body,
            properties=props,
            flag=msg.flag,
            sys_flag=msg.sys_flag,
            born_timestamp=msg.born_timestamp,
            born_host=msg.born_host,
            reconsume_times=msg.reconsume_times,
            prepared_transaction_offset=msg.prepared_transaction_offset,
        )
        result = await self.broker.put([inner], allow_delay=False)
        if not result.status.stored:
            log.warning("delayed delivery to %s failed (%s); will retry", real_topic, result.status.name)
            return False
        return True
