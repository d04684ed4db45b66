"""Pop consumption on the broker, independent of how requests arrive (the remoting processors
in processors/pop.py; a gRPC endpoint maps ReceiveMessage / AckMessage / ChangeInvisibleDuration
onto the same three calls).

State per (group, topic, queue) is a QueuePop (state.py). What must survive a crash goes
through the offset manager: the committed offset (the lowest offset not acknowledged, so
`ferrymq group progress` shows the lag) and the acknowledged ranges above it, journaled and
fsynced before an acknowledgement is answered. Leases (who holds what until when) are
checkpointed in the revive log before a pop or a change of invisible time is answered
(revive.py) and restored at start: after a restart a message handed out and not acknowledged
is visible again only once its invisible time has passed.

A lease that expires is handed out again with its reconsume count one higher; once that count
would pass the group's retry count (its subscription group's retry_max_times) the message is
copied to %DLQ%<group> and
acknowledged instead, as CONSUMER_SEND_MSG_BACK does for 4.x consumers."""

from __future__ import annotations

import asyncio
import logging
import random
import weakref
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field

from ...common import props as P
from ...common.errors import FerryMQError
from ...common.names import dlq_topic, is_retry_topic
from ...common.record import MessageDecodeError, decode_record
from ...store import GetStatus, StoreMessage
from ..clients import Subscription
from ..context import BrokerContext
from ..events import MessageEvent, MessageEventKind
from ..filters import record_filter
from ..init_offset import young_queue_start
from .records import reconsume_times, with_reconsume_times
from .revive import REVIVE_GROUP, REVIVE_QUEUE, Checkpoint, replay, revive_topic, write_checkpoints
from .state import AckOutcome, ChangeOutcome, Lease, QueuePop

log = logging.getLogger("ferrymq.broker.pop")

INIT_MIN = 0  # ConsumeInitMode.MIN: a group new to a queue starts at its first message
INIT_MAX = 1  # ConsumeInitMode.MAX: at its end
MAX_POP_BATCH = 32  # RocketMQ refuses more per request
MAX_POP_BYTES = 4 << 20  # a response stops growing past this (it always carries one message)
# A message whose dead-letter copy is being written stays invisible this long; if the write
# fails the message is handed out again afterwards.
DLQ_HOLD_MS = 30_000
MAX_WAIT_SLICE = 1.0  # a held pop looks again at least this often (leases expiring)
REVIVE_COMMIT_MS = 1000  # the revive offset is committed at most this often


@dataclass(frozen=True, slots=True)
class PoppedMessage:
    topic: str
    queue_id: int
    queue_offset: int
    record: bytes  # as stored, with RECONSUMETIMES set to this delivery's count
    reconsume_times: int


@dataclass(frozen=True, slots=True)
class PopResult:
    messages: list[PoppedMessage]
    pop_time: int
    invisible_ms: int
    order: bool
    rest: int  # messages not handed out yet in the queues looked at

    def by_queue(self) -> dict[int, list[PoppedMessage]]:
        out: dict[int, list[PoppedMessage]] = defaultdict(list)
        for m in self.messages:
            out[m.queue_id].append(m)
        return dict(out)


@dataclass(frozen=True, slots=True)
class ChangeResult:
    outcome: ChangeOutcome
    pop_time: int  # of the new receipt handle (CHANGED)
    invisible_ms: int


class PopRefused(FerryMQError):
    """A pop the service will not serve (bad queue); carries a reason for the answer."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass(slots=True)
class _Dead:
    state: QueuePop
    queue_id: int
    offset: int
    raw: bytes
    reconsume: int


@dataclass(slots=True)
class _Round:
    messages: list[PoppedMessage] = field(default_factory=list)
    dead: list[_Dead] = field(default_factory=list)
    bytes: int = 0
    rest: int = 0
    # Past this many deliveries a message goes to %DLQ%: the group's retryMaxTimes.
    max_reconsume: int = 16


class PopWaiters:
    """Held pops, woken per topic by arrivals, acknowledgements and invisibility changes."""

    def __init__(self) -> None:
        self._loop: asyncio.AbstractEventLoop | None = None
        self._waiters: dict[str, set[asyncio.Future[None]]] = defaultdict(set)

    async def wait(self, topic: str, timeout_s: float) -> None:
        self._loop = loop = asyncio.get_running_loop()
        fut: asyncio.Future[None] = loop.create_future()
        self._waiters[topic].add(fut)
        try:
            # asyncio.timeout, not wait_for: on 3.11 wait_for can swallow a cancellation.
            async with asyncio.timeout(timeout_s):
                await fut
        except TimeoutError:
            pass
        finally:
            waiting = self._waiters.get(topic)
            if waiting is not None:
                waiting.discard(fut)
                if not waiting:
                    del self._waiters[topic]

    def notify(self, topic: str) -> None:
        for fut in self._waiters.get(topic, ()):
            if not fut.done():
                fut.set_result(None)

    def notify_threadsafe(self, topic: str, queue_id: int, max_offset: int) -> None:
        """The store's arrival listener; it may run on another thread."""
        loop = self._loop
        if loop is None or loop.is_closed() or topic not in self._waiters:
            return
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is loop:
            self.notify(topic)
        else:
            loop.call_soon_threadsafe(self.notify, topic)

    def pending(self) -> int:
        return sum(len(w) for w in self._waiters.values())


class PopService:
    def __init__(self, broker: BrokerContext) -> None:
        self.broker = broker
        self.waiters = PopWaiters()
        self._states: dict[tuple[str, str, int], QueuePop] = {}
        self._rr: dict[tuple[str, str], int] = defaultdict(int)
        self._listening = False
        self._recovered = False
        self._revive_committed_at: int | None = None  # when the revive offset was last committed

    # --- state -----------------------------------------------------------------------------------
    def _max_inflight(self) -> int:
        return self.broker.config.pop_max_inflight_per_queue

    def _state(self, group: str, topic: str, queue_id: int, init_mode: int) -> tuple[QueuePop, int]:
        """The queue's state, built from the group's committed progress when there is none
        yet or the progress moved under it (an offset reset). A group new to the queue gets
        its start committed first; the sequence returned is that commit's (0: none)."""
        offsets = self.broker.offsets
        key = (group, topic, queue_id)
        progress = offsets.progress(group, topic, queue_id)
        state = self._states.get(key)
        if progress is None or progress.offset < 0:
            store = self.broker.store
            assert store is not None
            reads = store.reads
            if init_mode == INIT_MIN or is_retry_topic(topic):
                start = reads.get_min_offset(topic, queue_id)
            else:
                # MAX: a young queue still starts at 0, as RocketMQ's getInitOffset with
                # initPopOffsetByCheckMsgInMem (a group created after the first sends gets them);
                # an old one at its last message ("pop last one, then commit offset"), so a new
                # group sees at once that the queue is live.
                young = young_queue_start(store, topic, queue_id,
                                          self.broker.config.access_message_in_memory_max_ratio)
                if young is None:
                    start = max(reads.get_min_offset(topic, queue_id),
                                reads.get_max_offset(topic, queue_id) - 1)
                else:
                    start = young
            seq = offsets.commit(group, topic, queue_id, start, self.broker.now_ms())
            state = self._states[key] = QueuePop(start, [], self._max_inflight())
            return state, seq
        if state is None or state.committed != progress.offset:
            state = self._states[key] = QueuePop(progress.offset, list(progress.acked), self._max_inflight())
        return state, 0

    def _commit(self, group: str, topic: str, queue_id: int, state: QueuePop) -> int:
        return self.broker.offsets.commit(group, topic, queue_id, state.committed,
                                          self.broker.now_ms(), acked=list(state.acked))

    def inflight(self, group: str, topic: str, queue_id: int) -> int:
        state = self._states.get((group, topic, queue_id))
        return 0 if state is None else len(state.leases)

    def _recover(self) -> None:
        """Once, before the first request is served: the leases of the revive log, from the
        revive group's committed offset on, into the states of their queues."""
        store = self.broker.store
        if self._recovered or store is None:
            return
        self._recovered = True
        cluster = self.broker.config.broker_cluster_name
        start = self.broker.offsets.query(REVIVE_GROUP, revive_topic(cluster), REVIVE_QUEUE)
        restored = 0
        for (group, topic, qid), leases in replay(store, cluster, max(0, start)).items():
            progress = self.broker.offsets.progress(group, topic, qid)
            if progress is None or progress.offset < 0:
                continue
            key = (group, topic, qid)
            state = self._states.get(key)
            if state is None or state.committed != progress.offset:
                state = self._states[key] = QueuePop(progress.offset, list(progress.acked),
                                                     self._max_inflight())
            restored += sum(state.restore(lease) for lease in leases.values())
        if restored:
            log.info("pop: %d leases restored from the revive log", restored)

    async def _checkpoint(self, group: str, topic: str,
                          leases: dict[int, list[Lease]]) -> None:
        """Checkpoint the leases (by queue) before the request is answered, then commit the
        revive offset (at most every REVIVE_COMMIT_MS)."""
        items: list[tuple[Checkpoint, list[Lease]]] = []
        for qid, group_leases in leases.items():
            # A pop gives one pop time and deadline to all it hands out on a queue.
            first = group_leases[0]
            items.append((Checkpoint(group, topic, qid, first.pop_time, first.deadline,
                                     tuple((le.offset, le.attempts) for le in group_leases)),
                          group_leases))
        await write_checkpoints(self.broker, items)
        now = self.broker.now_ms()
        last = self._revive_committed_at
        if last is None or not 0 <= now - last < REVIVE_COMMIT_MS:
            self._revive_committed_at = now
            self._commit_revive_offset()

    def _commit_revive_offset(self) -> None:
        """The lowest revive-log offset a live lease was checkpointed at (the log's end with
        none): a restart replays from there."""
        store = self.broker.store
        if store is None:
            return
        topic = revive_topic(self.broker.config.broker_cluster_name)
        now = self.broker.now_ms()
        low = store.reads.get_max_offset(topic, REVIVE_QUEUE)
        for state in self._states.values():
            for lease in state.leases.values():
                if lease.deadline > now and 0 <= lease.ck < low:
                    low = lease.ck
        if low > self.broker.offsets.query(REVIVE_GROUP, topic, REVIVE_QUEUE):
            self.broker.offsets.commit(REVIVE_GROUP, topic, REVIVE_QUEUE, low, now)

    def _listen(self) -> None:
        if not self._listening and self.broker.store is not None:
            self.broker.store.add_arrival_listener(self.waiters.notify_threadsafe)
            self._listening = True

    # --- pop -------------------------------------------------------------------------------------
    async def pop(self, group: str, topic: str, queue_id: int, max_nums: int, invisible_ms: int,
                  sub: Subscription | None, *, order: bool = False, init_mode: int = INIT_MAX,
                  poll_ms: int = 0, client: str = "") -> PopResult:
        """Up to max_nums messages of `topic` (queue_id < 0: any of its read queues),
        invisible to the group for invisible_ms. With nothing to hand out, waits up to
        poll_ms for an arrival, an acknowledgement or an expiring lease. A group its
        subscription group entry refuses raises GroupRefused (both fronts answer it as
        RocketMQ's pop processor does)."""
        self.broker.groups.consumable(group)
        cfg = self.broker.topics.get(topic)
        if cfg is None:
            raise PopRefused(f"topic[{topic}] not exist")
        if queue_id >= cfg.read_queue_nums:
            raise PopRefused(f"queueId[{queue_id}] is illegal, topic:[{topic}] "
                             f"topicConfig.readQueueNums:[{cfg.read_queue_nums}]")
        if invisible_ms <= 0:
            raise PopRefused(f"invisibleTime {invisible_ms} must be > 0")
        max_nums = max(1, min(max_nums, MAX_POP_BATCH))
        self._recover()
        self._listen()
        loop = asyncio.get_running_loop()
        end = loop.time() + max(0, poll_ms) / 1000
        while True:
            if queue_id >= 0:
                qids = [queue_id]
            else:
                n = cfg.read_queue_nums
                start = self._rr[(group, topic)] % n if n else 0
                self._rr[(group, topic)] += 1
                qids = [(start + i) % n for i in range(n)]
            result = await self._pop_round(group, topic, qids, max_nums, invisible_ms, sub, order,
                                           init_mode)
            remaining = end - loop.time()
            if result.messages and self.broker.events.active:
                self._popped(group, client, result)
            if result.messages or remaining <= 0:
                return result
            wait = min(remaining, MAX_WAIT_SLICE)
            deadlines = [d for q in qids if (s := self._states.get((group, topic, q))) is not None
                         and (d := s.next_deadline()) is not None]
            if deadlines:
                wait = min(wait, max(0.005, (min(deadlines) - self.broker.now_ms()) / 1000))
            await self.waiters.wait(topic, wait)

    def _popped(self, group: str, client: str, result: PopResult) -> None:
        for qid, msgs in result.by_queue().items():
            self.broker.events.emit(MessageEvent(
                MessageEventKind.POPPED, msgs[0].topic, qid, msgs[0].queue_offset,
                count=len(msgs), group=group, client=client,
                detail={"offsets": ",".join(str(m.queue_offset) for m in msgs),
                        "invisible_ms": str(result.invisible_ms)}))

    async def _pop_round(self, group: str, topic: str, qids: Sequence[int], max_nums: int,
                         invisible_ms: int, sub: Subscription | None, order: bool,
                         init_mode: int) -> PopResult:
        now = self.broker.now_ms()
        group_cfg = self.broker.groups.get(group)
        rnd = _Round(max_reconsume=group_cfg.retry_max_times if group_cfg is not None
                     else self.broker.config.max_reconsume_times)
        seqs: list[int] = []
        for qid in qids:
            state, seq = self._state(group, topic, qid, init_mode)
            seqs.append(seq)
            room = max_nums - len(rnd.messages)
            if room > 0 and rnd.bytes < MAX_POP_BYTES and self._pop_queue(
                    state, topic, qid, room, now, invisible_ms, sub, order, rnd):
                seqs.append(self._commit(group, topic, qid, state))
            store = self.broker.store
            assert store is not None
            rnd.rest += state.backlog(store.reads.get_max_offset(topic, qid))
        for dead in rnd.dead:
            if await self._dead_letter(group, topic, dead):
                dead.state.ack(dead.offset)
                seqs.append(self._commit(group, topic, dead.queue_id, dead.state))
        if rnd.messages:
            by_queue: dict[int, list[Lease]] = defaultdict(list)
            for m in rnd.messages:
                lease = self._states[(group, topic, m.queue_id)].leases.get(m.queue_offset)
                if lease is not None:
                    by_queue[m.queue_id].append(lease)
            await self._checkpoint(group, topic, by_queue)
        # A group's start on a queue is durable before it is served: a crash must not move
        # a MAX group past messages it never saw.
        await self.broker.offsets.wait_durable(max(seqs, default=0))
        return PopResult(rnd.messages, now, invisible_ms, order, rnd.rest)

    def _pop_queue(self, state: QueuePop, topic: str, qid: int, n: int, now: int,
                   invisible_ms: int, sub: Subscription | None, order: bool, rnd: _Round) -> bool:
        """Hand out what the state offers on one queue; True when acknowledged offsets
        changed (filtered out, gone from the store)."""
        store = self.broker.store
        assert store is not None
        changed = state.skip_below(store.reads.get_min_offset(topic, qid))
        max_reconsume = rnd.max_reconsume
        by_properties = None if sub is None or sub.selector is None else record_filter(sub.selector)
        for cand in state.candidates(now, n, store.reads.get_max_offset(topic, qid), order=order):
            if rnd.bytes >= MAX_POP_BYTES:
                break
            entries = store.reads.read_queue_entries(topic, qid, cand.offset, 1)
            if not entries or entries[0].queue_offset != cand.offset:
                if cand.offset < store.reads.get_min_offset(topic, qid):
                    state.ack(cand.offset)
                    changed = True
                    continue
                break
            entry = entries[0]
            if sub is not None and not sub.accepts(entry.tag_code):
                state.ack(cand.offset)  # not for this group: consumed, as a pull skips it
                changed = True
                continue
            status, raw = store.reads.read_queue_record_status(topic, qid, entry)
            if (status is GetStatus.MESSAGE_DAMAGED and store.reads.skips_damaged) or (
                    status is GetStatus.MESSAGE_WAS_REMOVING
                    and entry.phys_offset < store.min_phy_offset):
                # Damaged (reported), or naming bytes retention removed: passed over, as a
                # pull passes them; held, the queue never moved again.
                state.ack(cand.offset)
                changed = True
                continue
            if status is not GetStatus.FOUND:
                log.warning("pop %s/%d: record at offset %d unreadable; queue held",
                            topic, qid, cand.offset)
                break
            if by_properties is not None and not by_properties(raw, 0, len(raw)):
                state.ack(cand.offset)  # rejected by the group's SQL92 selector
                changed = True
                continue
            reconsume = reconsume_times(raw) + cand.attempts
            if cand.attempts > 0 and reconsume > max_reconsume:
                state.hold(cand.offset, now + DLQ_HOLD_MS)
                rnd.dead.append(_Dead(state, qid, cand.offset, raw, reconsume))
                continue
            state.lease(cand.offset, now, invisible_ms)
            rnd.messages.append(PoppedMessage(topic, qid, cand.offset,
                                              with_reconsume_times(raw, reconsume), reconsume))
            rnd.bytes += len(raw)
        return changed

    async def _dead_letter(self, group: str, topic: str, dead: _Dead) -> bool:
        try:
            msg = decode_record(dead.raw, decompress=False)
        except MessageDecodeError as exc:
            log.warning("pop %s/%d offset %d: unreadable, not dead-lettered: %s",
                        topic, dead.queue_id, dead.offset, exc)
            return True  # nothing to copy; acknowledged so the queue moves on
        props = dict(msg.properties)
        props.setdefault(P.PROPERTY_RETRY_TOPIC, msg.topic)
        props.pop(P.PROPERTY_WAIT_STORE_MSG_OK, None)
        props.pop(P.PROPERTY_DELAY_TIME_LEVEL, None)
        origin_id = props.get(P.PROPERTY_ORIGIN_MESSAGE_ID) or msg.msg_id
        props[P.PROPERTY_ORIGIN_MESSAGE_ID] = origin_id
        version = self.broker.topics.version
        target = self.broker.topics.create_group_topic(dlq_topic(group))
        if self.broker.topics.version != version:
            await self.broker.persist_topics()
        inner = StoreMessage(
            topic=target.topic_name, queue_id=random.randrange(target.write_queue_nums),
            body=msg.body, properties=props, flag=msg.flag, sys_flag=msg.sys_flag,
            born_timestamp=msg.born_timestamp, born_host=msg.born_host,
            reconsume_times=dead.reconsume,
        )
        result = await self.broker.put([inner])
        if not result.status.stored:
            log.warning("pop %s/%d offset %d: dead-letter copy refused (%s); retried later",
                        topic, dead.queue_id, dead.offset, result.status.name)
            return False
        if self.broker.events.active:
            self.broker.events.emit(MessageEvent(
                MessageEventKind.DEAD_LETTERED, topic, dead.queue_id, dead.offset, group=group,
                msg_id=origin_id, detail={"target": target.topic_name,
                                          "reconsume_times": str(dead.reconsume)}))
        return True

    # --- acknowledgement -------------------------------------------------------------------------
    async def ack(self, group: str, topic: str, queue_id: int, offsets: Sequence[int]) -> int:
        """Acknowledge offsets of one queue; returns once that is durable. The count newly
        acknowledged is returned (an offset acknowledged before counts 0). A receipt handle
        that is stale (the message was handed out again since) still acknowledges: the
        message was consumed."""
        if self.broker.offsets.progress(group, topic, queue_id) is None:
            return 0  # the group never popped this queue: nothing to acknowledge
        self._recover()
        state, seq = self._state(group, topic, queue_id, INIT_MAX)
        done = [o for o in offsets if state.ack(o) is AckOutcome.ACKED]
        acked = len(done)
        if acked and self.broker.events.active:
            self.broker.events.emit(MessageEvent(
                MessageEventKind.ACKED, topic, queue_id, done[0], count=acked, group=group,
                detail={"offsets": ",".join(map(str, done))}))
        if acked:
            seq = self._commit(group, topic, queue_id, state)
            self.waiters.notify(topic)
        await self.broker.offsets.wait_durable(seq)
        return acked

    async def change_invisible(self, group: str, topic: str, queue_id: int, offset: int,
                               pop_time: int, invisible_ms: int) -> ChangeResult:
        """A new deadline, now + invisible_ms, for the message handed out at pop_time (its
        receipt handle's); the new handle carries the returned pop_time."""
        self._recover()
        now = self.broker.now_ms()
        state = self._states.get((group, topic, queue_id))
        progress = self.broker.offsets.progress(group, topic, queue_id)
        if state is None or progress is None or state.committed != progress.offset:
            return ChangeResult(ChangeOutcome.NOT_IN_FLIGHT, now, invisible_ms)
        outcome = state.change(offset, pop_time, now, max(0, invisible_ms))
        if outcome is ChangeOutcome.CHANGED:
            await self._checkpoint(group, topic, {queue_id: [state.leases[offset]]})
            self.waiters.notify(topic)
            if self.broker.events.active:
                self.broker.events.emit(MessageEvent(
                    MessageEventKind.INVISIBLE_CHANGED, topic, queue_id, offset, group=group,
                    detail={"invisible_ms": str(invisible_ms)}))
        return ChangeResult(outcome, now, invisible_ms)


_SERVICES: weakref.WeakKeyDictionary[BrokerContext, PopService] = weakref.WeakKeyDictionary()


def pop_service(broker: BrokerContext) -> PopService:
    """The broker's pop service, made on first use: every front end (remoting processors, a
    gRPC endpoint) reaches the same state through it."""
    service = _SERVICES.get(broker)
    if service is None:
        service = _SERVICES[broker] = PopService(broker)
    return service
