"""PullMessage, UpdateOffset, GetOffset and QueryOffset: the calls of the 5.x pull-style
consumers, which read a queue from an offset they keep and commit it themselves (the remoting
PULL_MESSAGE, UPDATE_CONSUMER_OFFSET, QUERY_CONSUMER_OFFSET and the min / max /
by-timestamp offset queries, over gRPC). Served by a broker's own endpoint (`LocalQueues`,
the broker in the process) and by `ferrymq proxy` (`proxy/queues.py`, the request's broker
group over remoting); a backend without them answers NOT_IMPLEMENTED."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from ..broker.clients import Subscription, SubscriptionParseError, UnsupportedFilterError, parse_subscription
from ..broker.context import BrokerContext
from ..broker.filters import record_filter
from ..common.headers import PERM_READ
from ..common.message import MessageExt
from ..common.record import MessageDecodeError, decode_records
from ..store import GetStatus
from .convert import check_group, check_topic, duration_ms, outgoing, to_millis
from .pb import definition_pb2 as pb
from .pb import service_pb2 as spb
from .status import Code, GrpcStatusError, ok, status

MAX_PULL_BATCH = 1024
DEFAULT_PULL_BATCH = 32
# As ReceiveMessage's long polling: held at most this long, and within the call's deadline.
MAX_POLL_MS = 20_000


@dataclass(frozen=True, slots=True)
class PullAnswer:
    """What a pull found: OK with messages, MESSAGE_NOT_FOUND (nothing at the offset yet), or
    ILLEGAL_OFFSET (the offset is outside the queue); `next_offset` is where to pull next."""

    code: pb.Code
    messages: tuple[MessageExt, ...]
    next_offset: int


@runtime_checkable
class QueueBackend(Protocol):
    """`broker` is the request's broker name (its MessageQueue's): queue ids are per broker
    group; a broker's own endpoint has one group and does not read it."""

    async def pull(self, group: str, topic: str, queue_id: int, offset: int, *, broker: str, max_nums: int,
                   sub: Subscription, poll_ms: int) -> PullAnswer: ...

    async def commit_offset(self, group: str, topic: str, queue_id: int, offset: int, *, broker: str) -> None: ...

    async def committed_offset(self, group: str, topic: str, queue_id: int, *, broker: str) -> int:
        """The group's committed offset on the queue; -1 when it has none."""
        ...

    async def queue_offset(self, topic: str, queue_id: int, policy: pb.QueryOffsetPolicy,
                           timestamp_ms: int, *, broker: str) -> int: ...

    async def read_queues(self, topic: str, broker: str) -> int | None:
        """The topic's readable queue count; None when the topic is unknown here."""
        ...


class LocalQueues:
    """QueueBackend over the broker in this process: the store's reads, the held-pull waiters
    and the offset manager the remoting requests use."""

    _broker: BrokerContext

    async def read_queues(self, topic: str, broker: str) -> int | None:
        cfg = self._broker.topics.get(topic)
        if cfg is None:
            return None
        return cfg.read_queue_nums if cfg.perm & PERM_READ else 0

    async def pull(self, group: str, topic: str, queue_id: int, offset: int, *, broker: str, max_nums: int,
                   sub: Subscription, poll_ms: int) -> PullAnswer:
        return await self._pull(group, topic, queue_id, offset, max_nums=max_nums, sub=sub, poll_ms=poll_ms)

    async def _pull(self, group: str, topic: str, queue_id: int, offset: int, *, max_nums: int,
                    sub: Subscription, poll_ms: int) -> PullAnswer:
        broker = self._broker
        store = broker.store
        assert store is not None
        tag_filter = None if sub.matches_all else sub.accepts
        by_properties = None if sub.selector is None else record_filter(sub.selector)
        while True:
            result = store.reads.get_messages(topic, queue_id, offset, max_nums, tag_filter=tag_filter,
                                              record_filter=by_properties)
            if result.status is GetStatus.FOUND:
                try:
                    msgs = tuple(decode_records(result.data))
                except MessageDecodeError as exc:
                    raise GrpcStatusError(Code.MESSAGE_CORRUPTED, str(exc)) from None
                broker.stats.add_got(len(msgs))
                broker.stats.count_got(topic, group, len(msgs), len(result.data))
                return PullAnswer(Code.OK, msgs, result.next_begin_offset)
            if result.status in (GetStatus.OFFSET_TOO_SMALL, GetStatus.OFFSET_OVERFLOW_BADLY):
                # Where the queue's messages are: its first offset below them, its end above.
                moved = result.min_offset if offset < result.min_offset else result.max_offset
                return PullAnswer(Code.ILLEGAL_OFFSET, (), moved)
            if result.status is GetStatus.NO_MATCHED_MESSAGE or poll_ms <= 0 or broker.waiters is None:
                # Filtered out: the next pull starts past what was read.
                return PullAnswer(Code.MESSAGE_NOT_FOUND, (), max(result.next_begin_offset, offset))
            await broker.waiters.wait(topic, queue_id, offset, poll_ms / 1000)
            poll_ms = 0

    async def commit_offset(self, group: str, topic: str, queue_id: int, offset: int, *, broker: str) -> None:
        offsets = self._broker.offsets
        # Durable before the answer, as UPDATE_CONSUMER_OFFSET is.
        await offsets.wait_durable(offsets.commit(group, topic, queue_id, offset, self._broker.now_ms()))

    async def committed_offset(self, group: str, topic: str, queue_id: int, *, broker: str) -> int:
        return self._broker.offsets.query(group, topic, queue_id)

    async def queue_offset(self, topic: str, queue_id: int, policy: pb.QueryOffsetPolicy,
                           timestamp_ms: int, *, broker: str) -> int:
        store = self._broker.store
        assert store is not None
        if policy == pb.BEGINNING:
            return store.reads.get_min_offset(topic, queue_id)
        if policy == pb.END:
            return store.reads.get_max_offset(topic, queue_id)
        return store.reads.get_offset_by_time(topic, queue_id, timestamp_ms)


class QueueCalls:
    """The four RPCs' checks and answers over a QueueBackend (None: not served here)."""

    def __init__(self, backend: object, *, property_filter: bool) -> None:
        self._queues = backend if isinstance(backend, QueueBackend) else None
        self._property_filter = property_filter

    def _backend(self) -> QueueBackend:
        if self._queues is None:
            raise GrpcStatusError(Code.NOT_IMPLEMENTED, "pull-style calls are served by a broker's own gRPC "
                                  "endpoint, not by this one")
        return self._queues

    async def _queue(self, mq: pb.MessageQueue, *, group: str | None) -> tuple[QueueBackend, str, int]:
        backend = self._backend()
        topic = mq.topic.name
        check_topic(topic)
        if group is not None:
            check_group(group)
        queues = await backend.read_queues(topic, mq.broker.name)
        if queues is None:
            raise GrpcStatusError(Code.TOPIC_NOT_FOUND, f"topic {topic} not found")
        if not 0 <= mq.id < queues:
            raise GrpcStatusError(Code.BAD_REQUEST, f"queue {mq.id} of topic {topic} is not readable "
                                  f"(readable queues: {queues})")
        return backend, topic, mq.id

    async def pull(self, req: spb.PullMessageRequest, time_left_s: float | None,
                   now_ms: int) -> AsyncIterator[spb.PullMessageResponse]:
        """The answer as a stream: the status, the messages, then the offset to pull next."""
        backend, topic, queue_id = await self._queue(req.message_queue, group=req.group.name)
        if req.offset < 0:
            raise GrpcStatusError(Code.ILLEGAL_OFFSET, f"offset {req.offset} is negative")
        if req.batch_size < 0 or req.batch_size > MAX_PULL_BATCH:
            raise GrpcStatusError(Code.BAD_REQUEST, f"batch_size {req.batch_size} is not within 1..{MAX_PULL_BATCH}")
        poll_ms = min(duration_ms(req.long_polling_timeout), MAX_POLL_MS)
        if time_left_s is not None:
            # Answered inside the call's deadline, with time to spare for the answer itself.
            poll_ms = max(0, min(poll_ms, int(time_left_s * 1000) - 500))
        sub = self._subscription(topic, req.filter_expression)
        answer = await backend.pull(req.group.name, topic, queue_id, req.offset, broker=req.message_queue.broker.name,
                                    max_nums=req.batch_size or DEFAULT_PULL_BATCH, sub=sub, poll_ms=poll_ms)
        yield spb.PullMessageResponse(status=ok() if answer.code == Code.OK else status(answer.code))
        for m in answer.messages:
            yield spb.PullMessageResponse(message=outgoing(m, now_ms=now_ms))
        yield spb.PullMessageResponse(next_offset=answer.next_offset)

    def _subscription(self, topic: str, expr: pb.FilterExpression) -> Subscription:
        kind = "SQL92" if expr.type == pb.SQL else "TAG"
        try:
            return parse_subscription(topic, expr.expression or "*", 0, kind, property_filter=self._property_filter)
        except (SubscriptionParseError, UnsupportedFilterError) as exc:
            raise GrpcStatusError(Code.ILLEGAL_FILTER_EXPRESSION, str(exc)) from None

    async def update_offset(self, req: spb.UpdateOffsetRequest) -> spb.UpdateOffsetResponse:
        backend, topic, queue_id = await self._queue(req.message_queue, group=req.group.name)
        if req.offset < 0:
            raise GrpcStatusError(Code.ILLEGAL_OFFSET, f"offset {req.offset} is negative")
        await backend.commit_offset(req.group.name, topic, queue_id, req.offset, broker=req.message_queue.broker.name)
        return spb.UpdateOffsetResponse(status=ok())

    async def get_offset(self, req: spb.GetOffsetRequest) -> spb.GetOffsetResponse:
        backend, topic, queue_id = await self._queue(req.message_queue, group=req.group.name)
        offset = await backend.committed_offset(req.group.name, topic, queue_id, broker=req.message_queue.broker.name)
        if offset < 0:
            return spb.GetOffsetResponse(status=status(
                Code.OFFSET_NOT_FOUND, f"group {req.group.name} has no offset on {topic}/{queue_id}"))
        return spb.GetOffsetResponse(status=ok(), offset=offset)

    async def query_offset(self, req: spb.QueryOffsetRequest) -> spb.QueryOffsetResponse:
        backend, topic, queue_id = await self._queue(req.message_queue, group=None)
        policy = req.query_offset_policy
        if policy == pb.TIMESTAMP and not req.HasField("timestamp"):
            raise GrpcStatusError(Code.BAD_REQUEST, "query_offset_policy TIMESTAMP needs a timestamp")
        at = to_millis(req.timestamp) if req.HasField("timestamp") else 0
        return spb.QueryOffsetResponse(status=ok(), offset=await backend.queue_offset(
            topic, queue_id, policy, at, broker=req.message_queue.broker.name))
