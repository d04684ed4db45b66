"""The pull loop of one assigned queue: long-poll the broker, hold what arrives in the
queue's ProcessQueue and hand it to the consumer; pause while the queue is over its flow
control thresholds. The locally held offset rides along on each pull (commit-offset flag)."""

from __future__ import annotations

import asyncio
import logging
import time

from ...common.errors import FerryMQError
from ...common.names import MASTER_ID
from ...common.record import MessageDecodeError, decode_records
from ..api import pull_sys_flag
from ..errors import BrokerError, ClientError, GroupNotExistError, NoPermissionError, SubscriptionError
from ..lifecycle import State
from ..loop import wait_event
from ..results import PullStatus
from .crc import drop_corrupt
from .host import QueueHost
from .process_queue import ProcessQueue

log = logging.getLogger("ferrymq.client.pull")

# How often a paused queue looks again at whether it was dropped meanwhile.
FLOW_CONTROL_RECHECK = 1.0
# Answers that refuse the group's pulls until something changes on the broker (RocketMQ's pull
# processor: the group's consume_enable off or the group unknown, the topic not readable, the
# subscription refused), as opposed to a busy broker or one going away.
REFUSALS = (NoPermissionError, GroupNotExistError, SubscriptionError)


async def pull_loop(c: QueueHost, pq: ProcessQueue, offset: int) -> None:
    mq = pq.mq
    opts = c.options
    next_offset = offset
    while not pq.dropped and c.state is State.RUNNING:
        if pq.over_limit():
            # Flow control: the queue holds too much; wait until consumption makes room.
            await wait_event(pq.space, FLOW_CONTROL_RECHECK)
            continue
        if not c.may_pull(pq):
            await asyncio.sleep(c.not_ready_delay())
            continue
        sub = c.effective_subscriptions().get(mq.topic)
        if sub is None:
            await asyncio.sleep(opts.pull_delay_on_error)
            continue
        commit_offset = c.offset_store.read_memory(mq) if c.clustering else -1
        suspend_ms = int(opts.pull_suspend_timeout * 1000)
        addr = None
        asked = time.monotonic()
        try:
            addr = await c.inst.find_read_addr(
                mq.broker_name, mq.topic, c.read_from.get(mq, MASTER_ID)
            )
            if addr is None:
                raise ClientError(f"broker {mq.broker_name} of {mq} has no known address")
            result = await c.inst.api.pull(
                addr,
                mq.broker_name,
                group=c.group,
                topic=mq.topic,
                queue_id=mq.queue_id,
                offset=next_offset,
                max_nums=opts.pull_batch_size,
                sys_flag=pull_sys_flag(commit=commit_offset > 0, suspend=suspend_ms > 0),
                commit_offset=max(commit_offset, 0),
                suspend_ms=suspend_ms,
                expression=sub.expression,
                expression_type=sub.expression_type,
                sub_version=sub.sub_version,
            )
        except FerryMQError as exc:
            if pq.dropped or c.state is not State.RUNNING:
                return
            level = logging.DEBUG if isinstance(exc, BrokerError) else logging.WARNING
            if isinstance(exc, REFUSALS):
                # Asking again will not help until an operator acts (`ferrymq group update G
                # --consume-enable true`, say): said once at WARNING, not hidden at DEBUG.
                same = c.pull_refusal is not None and str(c.pull_refusal) == str(exc)
                level = logging.DEBUG if same else logging.WARNING
                c.pull_refusal = exc
            log.log(level, "%s: pull of %s at %d failed: %s", c.group, mq, next_offset, exc)
            if await c.inst.after_failure(mq.topic, exc):
                # The broker is gone; when the fresh route names another one (a slave while
                # the master is away), pull there at once.
                c.read_from.pop(mq, None)
                again = await c.inst.find_read_addr(mq.broker_name, mq.topic, MASTER_ID)
                if again is not None and again != addr:
                    continue
            await asyncio.sleep(opts.pull_delay_on_error)
            continue
        if pq.dropped:
            return
        c.pull_refusal = None
        pq.last_pull_time = time.monotonic()
        c.read_from[mq] = result.suggest_which_broker_id
        if result.status is PullStatus.FOUND:
            try:
                msgs = drop_corrupt(decode_records(result.body, broker=mq.broker_name),
                                    f"{c.group}: {mq}")
            except MessageDecodeError as exc:
                log.error(
                    "%s: undecodable pull body from %s at %d: %s", c.group, mq, next_offset, exc
                )
                await asyncio.sleep(opts.pull_delay_on_error)
                continue
            next_offset = result.next_begin_offset
            c.consume_stats.pulled(mq.topic, len(msgs), (pq.last_pull_time - asked) * 1000)
            wanted = msgs if sub.matches_all else [m for m in msgs if sub.accepts(m)]
            added = pq.put(wanted)
            if added:
                c.dispatch(pq, added)
            elif pq.empty:
                c.offset_store.update(mq, next_offset, increase_only=True)
        elif result.status in (PullStatus.NO_NEW_MSG, PullStatus.NO_MATCHED_MSG):
            next_offset = result.next_begin_offset
            if pq.empty:
                # Nothing held: everything below next_offset is done (filtered or consumed).
                c.offset_store.update(mq, next_offset, increase_only=True)
        else:  # OFFSET_ILLEGAL: the offset fell out of the queue (expired) or beyond its end
            log.warning(
                "%s: offset %d of %s is illegal; moving to %d",
                c.group,
                next_offset,
                mq,
                result.next_begin_offset,
            )
            c.drop_queue(mq)
            c.offset_store.track(mq, None)
            c.offset_store.update(mq, result.next_begin_offset, increase_only=False)
            await c.offset_store.persist({mq})
            c.offset_store.remove(mq)
            c.trigger_rebalance()
            return
        if opts.pull_interval > 0:
            await asyncio.sleep(opts.pull_interval)
