"""Rebalance (RocketMQ's RebalanceImpl): for every subscribed topic, split its readable queues
among the group's live members, drop the queues this member lost and start pulling the ones
it gained, from the committed offset or, for a queue the group never consumed, from where
consume_from_where says."""

from __future__ import annotations

import asyncio
import logging
import random
import time

from ...common.errors import FerryMQError
from ...common.message import MessageQueue
from ...common.names import is_retry_topic
from ..errors import ClientError
from ..lifecycle import State
from ..route import TopicRoute
from .allocate import resolve
from .host import QueueHost
from .types import ConsumeFromWhere

log = logging.getLogger("ferrymq.client.rebalance")


class Rebalancer:
    def __init__(self, consumer: QueueHost) -> None:
        self.consumer = consumer
        self.strategy = resolve(consumer.options.allocate_strategy)
        self._lock = asyncio.Lock()

    async def rebalance(self) -> None:
        c = self.consumer
        async with self._lock:
            subs = c.effective_subscriptions()
            # The subscribed topics first: at start, their messages wait while the group's
            # retry topic (usually empty) is looked up.
            # Each topic's queues are updated as soon as its assignment is known, side by side:
            # a queue taken over may wait for its previous owner's release (up to 2 s), which
            # must not hold the other topics back.
            updates: list[asyncio.Future[None]] = []
            try:
                for topic in sorted(subs, key=lambda t: (is_retry_topic(t), t)):
                    if c.state is not State.RUNNING:
                        break
                    try:
                        assigned = await self._assignment(topic)
                    except FerryMQError as exc:
                        log.warning("%s: rebalance of %s skipped: %s", c.group, topic, exc)
                        continue
                    if assigned is not None:
                        updates.append(asyncio.ensure_future(self.update_table(topic, assigned)))
                results = await asyncio.gather(*updates, return_exceptions=True)
            except BaseException:  # cancelled (shutdown): so are the updates still running
                for update in updates:
                    update.cancel()
                raise
            for result in results:
                if isinstance(result, BaseException):
                    raise result
            if c.state is not State.RUNNING:
                return
            # Queues of topics no longer subscribed.
            for mq in [mq for mq in c.table if mq.topic not in subs]:
                await self._remove(mq)

    async def _assignment(self, topic: str) -> set[MessageQueue] | None:
        c = self.consumer
        route = c.inst.routes.get(topic)
        if route is None or not route.read_queues():
            route = await c.inst.update_route(topic)
        if route is None:
            log.debug("%s: no route for %s yet", c.group, topic)
            return None
        mqs = route.read_queues()
        if not c.clustering:
            return set(mqs)
        cids = await self._member_ids(route)
        if not cids:
            log.debug("%s: no member list for %s yet", c.group, topic)
            return None
        return set(self.strategy(c.group, c.client_id, mqs, cids))

    async def _member_ids(self, route: TopicRoute) -> list[str]:
        c = self.consumer
        # Every group's master, or a slave while it is away: each knows the members.
        addrs = [a for a in (b.any_addr() for b in route.broker_datas) if a is not None]
        random.shuffle(addrs)
        for addr in addrs:
            try:
                ids = await c.inst.api.consumer_ids(addr, c.group)
            except FerryMQError as exc:
                log.debug("%s: member list from %s failed: %s", c.group, addr, exc)
                continue
            if ids:
                return ids
        return []

    async def update_table(self, topic: str, assigned: set[MessageQueue]) -> None:
        c = self.consumer
        for mq in [mq for mq in c.table if mq.topic == topic and mq not in assigned]:
            await self._remove(mq)
        # Each gained queue starts pulling as soon as its own start offset is known; the
        # lookups (a round trip or two each) run side by side instead of one after another.
        await asyncio.gather(*(self._take(mq) for mq in sorted(assigned - set(c.table))))

    async def _take(self, mq: MessageQueue) -> None:
        c = self.consumer
        if c.state is not State.RUNNING:
            return
        if not await c.lock_queue(mq):
            log.debug("%s: %s is locked by another member; later", c.group, mq)
            return
        c.offset_store.remove(mq)
        try:
            offset = await self.compute_pull_from(mq)
        except FerryMQError as exc:
            log.warning("%s: start offset of %s unknown (%s); later", c.group, mq, exc)
            return
        if c.state is not State.RUNNING or mq in c.table:
            return
        # Messages above the offset that the group already acknowledged (precise
        # acknowledgement, by a member that had the queue or an earlier run) are skipped.
        pq = c.new_process_queue(mq, c.offset_store.loaded_ranges(mq))
        if c.orderly:
            pq.locked = True
            pq.last_lock_time = time.monotonic()
        # The start point counts as committed, so a restart before the first message
        # resumes here instead of recomputing (a LAST_OFFSET group would skip messages).
        c.offset_store.update(mq, offset, increase_only=False)
        log.info("%s: consuming %s from offset %d", c.group, mq, offset)
        c.start_queue(mq, pq, offset)

    async def _remove(self, mq: MessageQueue) -> None:
        c = self.consumer
        pq = c.drop_queue(mq)
        if pq is not None:
            log.info("%s: %s moved to another member", c.group, mq)
            await c.release_queue(mq, pq)

    async def compute_pull_from(self, mq: MessageQueue) -> int:
        c = self.consumer
        last = await c.offset_store.read_store(mq, taking=True)
        if last >= 0:
            return last
        if is_retry_topic(mq.topic):
            return 0
        addr = await c.inst.find_broker_addr(mq.broker_name, mq.topic)
        if addr is None:
            raise ClientError(f"broker {mq.broker_name} of {mq} has no known address")
        api = c.inst.api
        where = c.options.consume_from_where
        if where is ConsumeFromWhere.FIRST_OFFSET:
            return await api.min_offset(addr, mq.topic, mq.queue_id)
        if where is ConsumeFromWhere.TIMESTAMP:
            return await api.search_offset(addr, mq.topic, mq.queue_id, c.start_timestamp_ms)
        return await api.max_offset(addr, mq.topic, mq.queue_id)
