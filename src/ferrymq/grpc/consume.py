"""ReceiveMessage, AckMessage, ChangeInvisibleDuration and ForwardMessageToDeadLetterQueue on the
broker's pop service: per-message invisibility and acknowledgement for a consumer group, the
same state the remoting POP_MESSAGE / ACK_MESSAGE requests use. A message not acknowledged by
its deadline is delivered again; past the broker's max_reconsume_times it goes to the group's
dead-letter queue."""

from __future__ import annotations

import random
from collections.abc import AsyncIterator

from ..broker.clients import SubscriptionParseError, UnsupportedFilterError
from ..broker.context import BrokerContext
from ..broker.events import MessageEvent, MessageEventKind
from ..broker.pop import INIT_MAX, ChangeOutcome, PopRefused, pop_service
from ..common import props as P
from ..common.headers import PERM_READ
from ..common.names import dlq_topic
from ..common.record import MessageDecodeError, decode_record
from ..store import StoreMessage
from .convert import check_group, check_topic, duration_ms, outgoing, timestamp
from .pb import service_pb2 as spb
from .receipt import ReceiptHandle, decode_handle
from .sessions import subscription_of
from .status import Code, GrpcStatusError, ok, put_code, status

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
    def __init__(self, broker: BrokerContext) -> None:
        self._broker = broker

    def _readable(self, topic: str) -> bool:
        cfg = self._broker.topics.get(topic)
        if cfg is None:
            raise GrpcStatusError(Code.TOPIC_NOT_FOUND, f"topic {topic} not found")
        if not cfg.perm & PERM_READ:
            raise GrpcStatusError(Code.FORBIDDEN, f"the topic[{topic}] receiving is forbidden")
        return cfg.order

    async def receive(self, req: spb.ReceiveMessageRequest,
                      time_remaining_s: float | None) -> AsyncIterator[spb.ReceiveMessageResponse]:
        """The proxy's stream: a status, the messages, then the delivery timestamp."""
        broker = self._broker
        group, topic = req.group.name, req.message_queue.topic.name
        check_group(group)
        check_topic(topic)
        order = self._readable(topic)
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
        if not broker.config.long_polling_enable:
            poll = 0
        try:
            sub = subscription_of(topic, req.filter_expression, property_filter=broker.config.enable_property_filter)
        except (SubscriptionParseError, UnsupportedFilterError) as exc:
            raise GrpcStatusError(Code.ILLEGAL_FILTER_EXPRESSION, str(exc)) from None
        try:
            # Any queue of the topic on this broker, as the proxy pops: the queue the SDK names
            # is only its pick of a broker.
            result = await pop_service(broker).pop(
                group, topic, -1, req.batch_size, invisible,
                None if sub.matches_all and sub.selector is None else sub,
                order=order, init_mode=INIT_MAX, poll_ms=poll)
        except PopRefused as exc:
            raise GrpcStatusError(Code.BAD_REQUEST, exc.reason) from None
        if not result.messages:
            yield spb.ReceiveMessageResponse(status=status(Code.MESSAGE_NOT_FOUND, "no new message"))
        else:
            broker.stats.add_got(len(result.messages))
            broker.stats.count_got(topic, group, len(result.messages), sum(len(m.record) for m in result.messages))
            yield spb.ReceiveMessageResponse(status=ok())
            now = broker.now_ms()
            for popped in result.messages:
                try:
                    msg = decode_record(popped.record)
                except MessageDecodeError:
                    continue  # unreadable: its lease lapses and the pop service sees it again
                handle = ReceiptHandle(topic, popped.queue_id, popped.queue_offset, result.pop_time, invisible)
                yield spb.ReceiveMessageResponse(message=outgoing(
                    msg, topic=topic, receipt_handle=handle.encode(), invisible_ms=invisible, now_ms=now))
        yield spb.ReceiveMessageResponse(delivery_timestamp=timestamp(broker.now_ms()))

    async def ack(self, req: spb.AckMessageRequest) -> spb.AckMessageResponse:
        group, topic = req.group.name, req.topic.name
        check_group(group)
        check_topic(topic)
        self._readable(topic)
        service = pop_service(self._broker)
        entries: list[spb.AckMessageResultEntry] = []
        for entry in req.entries:
            try:
                handle = decode_handle(entry.receipt_handle)
                if handle.topic != topic:
                    raise GrpcStatusError(Code.INVALID_RECEIPT_HANDLE, "the receipt handle is of another topic")
                await service.ack(group, topic, handle.queue_id, [handle.offset])
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

    async def change_invisible(self, req: spb.ChangeInvisibleDurationRequest) -> spb.ChangeInvisibleDurationResponse:
        group, topic = req.group.name, req.topic.name
        check_group(group)
        check_topic(topic)
        self._readable(topic)
        handle = decode_handle(req.receipt_handle)
        if handle.topic != topic:
            raise GrpcStatusError(Code.INVALID_RECEIPT_HANDLE, "the receipt handle is of another topic")
        # 0 is allowed here: "deliver it again now" (a push consumer's failed message).
        invisible = duration_ms(req.invisible_duration)
        if invisible < 0 or invisible > MAX_INVISIBLE_MS:
            raise GrpcStatusError(Code.ILLEGAL_INVISIBLE_TIME, f"the invisibleTime must be 0..{MAX_INVISIBLE_MS}")
        result = await pop_service(self._broker).change_invisible(
            group, topic, handle.queue_id, handle.offset, handle.pop_time, invisible)
        if result.outcome is ChangeOutcome.STALE:
            raise GrpcStatusError(Code.INVALID_RECEIPT_HANDLE,
                                  "the receipt handle is stale: the message was delivered again since")
        if result.outcome is ChangeOutcome.NOT_IN_FLIGHT:
            raise GrpcStatusError(Code.INVALID_RECEIPT_HANDLE,
                                  "the message is not in flight (acknowledged, or its receipt handle expired)")
        renewed = ReceiptHandle(topic, handle.queue_id, handle.offset, result.pop_time, invisible)
        return spb.ChangeInvisibleDurationResponse(status=ok(), receipt_handle=renewed.encode())

    async def forward_to_dlq(self, req: spb.ForwardMessageToDeadLetterQueueRequest
                             ) -> spb.ForwardMessageToDeadLetterQueueResponse:
        """A push consumer gave up on a message after its max delivery attempts: a copy goes to
        %DLQ%<group>, and the message is acknowledged."""
        broker = self._broker
        group, topic = req.group.name, req.topic.name
        check_group(group)
        check_topic(topic)
        self._readable(topic)
        handle = decode_handle(req.receipt_handle)
        if handle.topic != topic:
            raise GrpcStatusError(Code.INVALID_RECEIPT_HANDLE, "the receipt handle is of another topic")
        store = broker.store
        assert store is not None
        entries = store.reads.read_queue_entries(topic, handle.queue_id, handle.offset, 1)
        raw = store.reads.read_queue_record(topic, handle.queue_id, entries[0]) \
            if entries and entries[0].queue_offset == handle.offset else None
        if raw is None:
            raise GrpcStatusError(Code.MESSAGE_NOT_FOUND, f"no message at {topic}/{handle.queue_id}/{handle.offset}")
        msg = decode_record(raw, decompress=False)
        props = dict(msg.properties)
        props.setdefault(P.PROPERTY_RETRY_TOPIC, msg.topic)
        props.pop(P.PROPERTY_DELAY_TIME_LEVEL, None)
        origin_id = props.get(P.PROPERTY_ORIGIN_MESSAGE_ID) or msg.msg_id
        props[P.PROPERTY_ORIGIN_MESSAGE_ID] = origin_id
        version = broker.topics.version
        target = broker.topics.create_group_topic(dlq_topic(group))
        if broker.topics.version != version:
            await broker.persist_topics()
        attempts = max(req.delivery_attempt, 1)
        result = await broker.put([StoreMessage(
            topic=target.topic_name, queue_id=random.randrange(target.write_queue_nums), body=msg.body,
            properties=props, flag=msg.flag, sys_flag=msg.sys_flag, born_timestamp=msg.born_timestamp,
            born_host=msg.born_host, reconsume_times=attempts - 1)])
        if not result.status.stored:
            raise GrpcStatusError(put_code(result.status), result.reason or result.status.name)
        await pop_service(broker).ack(group, topic, handle.queue_id, [handle.offset])
        if broker.events.active:
            broker.events.emit(MessageEvent(MessageEventKind.DEAD_LETTERED, topic, handle.queue_id, handle.offset,
                                            group=group, msg_id=origin_id,
                                            detail={"target": target.topic_name, "reconsume_times": str(attempts - 1)}))
        return spb.ForwardMessageToDeadLetterQueueResponse(status=ok())
