"""ReceiveMessage, AckMessage, ChangeInvisibleDuration and ForwardMessageToDeadLetterQueue on the
backend's pop service (the broker's own, or every broker group's through `ferrymq proxy`):
per-message invisibility and acknowledgement for a consumer group, the same state the remoting
POP_MESSAGE / ACK_MESSAGE requests use. A message not acknowledged by
its deadline is delivered again; past the group's retry_max_times it goes to the group's
dead-letter queue."""

from __future__ import annotations

import functools
from collections.abc import AsyncIterator

from ..broker.clients import Subscription, SubscriptionParseError, UnsupportedFilterError
from ..common.headers import PERM_READ
from .backend import Backend, Delivery, TopicGroup
from .budget import Deadline, forward_budget
from .convert import check_group, check_topic, duration_ms, outgoing, timestamp
from .pb import service_pb2 as spb
from .sessions import subscription_of
from .status import Code, GrpcStatusError, ok, status

# RocketMQ's proxy bounds (ProxyConfig): a push consumer that asks the server to renew gets the
# default invisible time; long polling is held at most this long.
DEFAULT_INVISIBLE_MS = 60_000
MIN_INVISIBLE_MS = 1_000
MAX_INVISIBLE_MS = 12 * 3600 * 1000
MAX_LONG_POLLING_MS = 20_000
# Answer a held receive this long before the caller's deadline, so the answer still arrives.
_DEADLINE_MARGIN_MS = 500


def _check_invisible(ms: int) -> int:
    if ms < MIN_INVISIBLE_MS:
        raise GrpcStatusError(Code.ILLEGAL_INVISIBLE_TIME, f"the invisibleTime is too small. min is {MIN_INVISIBLE_MS}")
    if ms > MAX_INVISIBLE_MS:
        raise GrpcStatusError(Code.ILLEGAL_INVISIBLE_TIME, f"the invisibleTime is too large. max is {MAX_INVISIBLE_MS}")
    return ms


class Consumer:
    def __init__(self, backend: Backend) -> None:
        self._backend = backend

    async def _readable(self, topic: str, timeout_s: float | None) -> list[TopicGroup]:
        """The topic's broker groups a consumer may receive from."""
        groups = await self._backend.topic(topic, timeout_s=timeout_s)
        if not groups:
            raise GrpcStatusError(Code.TOPIC_NOT_FOUND, f"topic {topic} not found")
        readable = [g for g in groups if g.perm & PERM_READ]
        if not readable:
            raise GrpcStatusError(Code.FORBIDDEN, f"the topic[{topic}] receiving is forbidden")
        return readable

    async def receive(self, req: spb.ReceiveMessageRequest,
                      time_remaining_s: float | None) -> AsyncIterator[spb.ReceiveMessageResponse]:
        """The proxy's stream: a status, the messages, then the delivery timestamp."""
        backend = self._backend
        group, topic = req.group.name, req.message_queue.topic.name
        check_group(group)
        check_topic(topic)
        groups = await self._readable(topic, forward_budget(time_remaining_s))
        order = any(g.order for g in groups)
        if req.batch_size <= 0:
            raise GrpcStatusError(Code.BAD_REQUEST, "batch size must be > 0")
        if req.auto_renew:
            invisible = duration_ms(req.invisible_duration) if req.HasField("invisible_duration") else 0
            invisible = invisible if invisible >= MIN_INVISIBLE_MS else DEFAULT_INVISIBLE_MS
        else:
            if not req.HasField("invisible_duration"):
                raise GrpcStatusError(Code.ILLEGAL_INVISIBLE_TIME, "invisible duration is required")
            invisible = _check_invisible(duration_ms(req.invisible_duration))
        poll = duration_ms(req.long_polling_timeout) if req.HasField("long_polling_timeout") else MAX_LONG_POLLING_MS
        poll = min(max(poll, 0), MAX_LONG_POLLING_MS)
        if time_remaining_s is not None:
            poll = max(0, min(poll, int(time_remaining_s * 1000) - _DEADLINE_MARGIN_MS))
        limits = backend.limits
        if not limits.long_polling_enable:
            poll = 0
        try:
            sub = subscription_of(topic, req.filter_expression, property_filter=limits.enable_property_filter)
        except (SubscriptionParseError, UnsupportedFilterError) as exc:
            raise GrpcStatusError(Code.ILLEGAL_FILTER_EXPRESSION, str(exc)) from None
        deliveries = await self._pop(group, _starting_at(groups, req.message_queue.broker.name), req.batch_size,
                                     invisible, sub, order, poll)
        if not deliveries:
            yield spb.ReceiveMessageResponse(status=status(Code.MESSAGE_NOT_FOUND, "no new message"))
        else:
            yield spb.ReceiveMessageResponse(status=ok())
            now = backend.now_ms()
            for d in deliveries:
                yield spb.ReceiveMessageResponse(message=outgoing(
                    d.message, topic=topic, receipt_handle=d.handle, invisible_ms=invisible, now_ms=now))
        yield spb.ReceiveMessageResponse(delivery_timestamp=timestamp(backend.now_ms()))

    async def _pop(self, group: str, groups: list[TopicGroup], batch: int, invisible: int, sub: Subscription,
                   order: bool, poll: int) -> list[Delivery]:
        """Any queue of the topic, as the proxy pops: the queue the SDK names is only its pick of
        a broker group. With several groups, each is asked without waiting, from the named one
        on; when none has a message, the named one is long-polled (the SDK's next receive names
        the next group, so an idle consumer's polls go round them all), or the first that
        answered when it did not."""
        pop = functools.partial(self._backend.pop, group, queue_id=-1, max_nums=batch, invisible_ms=invisible,
                                sub=sub, order=order)
        if len(groups) == 1:
            return await pop(groups[0], poll_ms=poll)
        alive: list[TopicGroup] = []
        failure: GrpcStatusError | None = None
        for g in groups:
            try:
                found = await pop(g, poll_ms=0)
            except GrpcStatusError as exc:
                # A group out of reach (its master just died) leaves the others served.
                failure = failure or exc
                continue
            if found:
                return found
            alive.append(g)
        if failure is not None and not alive:
            raise failure
        return await pop(alive[0], poll_ms=poll) if poll > 0 else []

    async def ack(self, req: spb.AckMessageRequest, time_remaining: float | None = None) -> spb.AckMessageResponse:
        group, topic = req.group.name, req.topic.name
        check_group(group)
        check_topic(topic)
        deadline = Deadline.for_client(time_remaining)
        await self._readable(topic, deadline.left())
        entries: list[spb.AckMessageResultEntry] = []
        for entry in req.entries:
            try:
                await self._backend.ack(group, topic, entry.receipt_handle, timeout_s=deadline.left())
                entry_status = ok()
            except GrpcStatusError as exc:
                entry_status = status(exc.code, exc.message)
            entries.append(spb.AckMessageResultEntry(message_id=entry.message_id,
                                                     receipt_handle=entry.receipt_handle, status=entry_status))
        codes = {e.status.code for e in entries}
        if len(codes) > 1:
            top = status(Code.MULTIPLE_RESULTS)
        elif codes:
            only = entries[0].status
            top = status(only.code, only.message)
        else:
            top = status(Code.BAD_REQUEST, "no entry to acknowledge")
        return spb.AckMessageResponse(status=top, entries=entries)

    async def change_invisible(self, req: spb.ChangeInvisibleDurationRequest,
                               time_remaining: float | None = None) -> spb.ChangeInvisibleDurationResponse:
        group, topic = req.group.name, req.topic.name
        check_group(group)
        check_topic(topic)
        deadline = Deadline.for_client(time_remaining)
        await self._readable(topic, deadline.left())
        # 0 is allowed here: "deliver it again now" (a push consumer's failed message).
        invisible = duration_ms(req.invisible_duration)
        if invisible < 0 or invisible > MAX_INVISIBLE_MS:
            raise GrpcStatusError(Code.ILLEGAL_INVISIBLE_TIME, f"the invisibleTime must be 0..{MAX_INVISIBLE_MS}")
        renewed = await self._backend.change_invisible(group, topic, req.receipt_handle, invisible,
                                                       timeout_s=deadline.left())
        return spb.ChangeInvisibleDurationResponse(status=ok(), receipt_handle=renewed)

    async def forward_to_dlq(self, req: spb.ForwardMessageToDeadLetterQueueRequest,
                             time_remaining: float | None = None
                             ) -> spb.ForwardMessageToDeadLetterQueueResponse:
        """A push consumer gave up on a message after its max delivery attempts: a copy goes to
        %DLQ%<group>, and the message is acknowledged."""
        group, topic = req.group.name, req.topic.name
        check_group(group)
        check_topic(topic)
        deadline = Deadline.for_client(time_remaining)
        await self._readable(topic, deadline.left())
        await self._backend.forward_to_dlq(group, topic, req.receipt_handle, req.delivery_attempt, req.message_id,
                                           timeout_s=deadline.left())
        return spb.ForwardMessageToDeadLetterQueueResponse(status=ok())


def _starting_at(groups: list[TopicGroup], broker_name: str) -> list[TopicGroup]:
    for i, g in enumerate(groups):
        if g.broker_name == broker_name:
            return groups[i:] + groups[:i]
    return groups
