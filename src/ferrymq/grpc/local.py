"""The Backend of a broker's own gRPC endpoint (RocketMQ's local mode): the broker in the same
process, its topics, put pipeline, pop service and transaction service called directly.
Receipt handles are `ferrymq/grpc/receipt.py:ReceiptHandle`, transaction ids `TransactionId`."""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

from ..broker.clients import ClientRegistry, Subscription
from ..broker.context import BrokerContext
from ..broker.events import MessageEvent, MessageEventKind
from ..broker.groups import GroupRefused
from ..broker.pop import INIT_MAX, ChangeOutcome, PopRefused, pop_service
from ..broker.transaction import TRANSACTION_COMMIT_TYPE, TRANSACTION_ROLLBACK_TYPE
from ..common import props as P
from ..common import topic_types
from ..common.codes import ResponseCode
from ..common.names import dlq_topic
from ..common.record import MessageDecodeError, decode_record
from ..store import StoreMessage
from .backend import Delivery, Limits, PutAnswer, TopicGroup
from .pb import definition_pb2 as pb
from .pb import service_pb2 as spb
from .queues import LocalQueues
from .receipt import ReceiptHandle, TransactionId, decode_handle, decode_transaction_id
from .status import Code, GrpcStatusError, put_code, response_code
from .transactions import recover_command


class LocalBackend(LocalQueues):
    def __init__(self, broker: BrokerContext) -> None:
        self._broker = broker

    @property
    def limits(self) -> Limits:
        cfg = self._broker.config
        return Limits(max_message_size=cfg.max_message_size, timer_max_delay_sec=cfg.timer_max_delay_sec,
                      reject_transaction_message=cfg.reject_transaction_message,
                      enable_property_filter=cfg.enable_property_filter,
                      long_polling_enable=cfg.long_polling_enable, cluster_name=cfg.broker_cluster_name,
                      check_message_type=cfg.enable_topic_message_type_check)

    @property
    def registry(self) -> ClientRegistry:
        return self._broker.clients

    @property
    def translate(self) -> Callable[[Any], spb.TelemetryCommand | None]:
        return lambda req: recover_command(req, self._broker.now_ms())

    def now_ms(self) -> int:
        return self._broker.now_ms()

    async def retry_max_times(self, group: str) -> int | None:
        cfg = self._broker.groups.find(group)
        return None if cfg is None else cfg.retry_max_times

    async def topic(self, name: str, *, timeout_s: float | None = None) -> list[TopicGroup]:
        cfg = self._broker.topics.get(name)
        if cfg is None:
            return []
        return [TopicGroup(name, self._broker.config.broker_name, cfg.perm, cfg.read_queue_nums, cfg.write_queue_nums,
                           # A FIFO topic is consumed in order even after a change that
                           # left its order flag off (`topic update --perm` sends none).
                           cfg.order or cfg.message_type == topic_types.FIFO, cfg.message_type)]

    def send_isolated(self, broker_name: str) -> bool:
        return False  # one broker group, this one

    async def put(self, topic: TopicGroup, queue_id: int, msgs: list[StoreMessage], *, half: bool,
                  timeout_s: float | None = None) -> PutAnswer:
        # The store's put is not abandoned half-way for a client's deadline: the answer may
        # come late, the message is stored either way.
        broker = self._broker
        result = await (broker.transactions.prepare(msgs[0]) if half else broker.put(msgs))
        code = put_code(result.status)
        if code != Code.OK:
            return PutAnswer(code, result.reason or f"send message failed, sendStatus={result.status.name}")
        return PutAnswer(Code.OK, offsets=tuple(a.queue_offset for a in result.messages),
                         transaction_ids=tuple(TransactionId(a.queue_offset, a.phys_offset).encode() if half else ""
                                               for a in result.messages))

    async def pop(self, group: str, topic: TopicGroup, queue_id: int, *, max_nums: int, invisible_ms: int,
                  sub: Subscription, order: bool, poll_ms: int) -> list[Delivery]:
        broker = self._broker
        try:
            result = await pop_service(broker).pop(
                group, topic.topic, queue_id, max_nums, invisible_ms,
                None if sub.matches_all and sub.selector is None else sub,
                order=order, init_mode=INIT_MAX, poll_ms=poll_ms)
        except PopRefused as exc:
            raise GrpcStatusError(Code.BAD_REQUEST, exc.reason) from None
        except GroupRefused as exc:
            raise GrpcStatusError(response_code(exc.code), str(exc)) from None
        out: list[Delivery] = []
        for popped in result.messages:
            try:
                msg = decode_record(popped.record)
            except MessageDecodeError:
                continue  # unreadable: its lease lapses and the pop service sees it again
            handle = ReceiptHandle(topic.topic, popped.queue_id, popped.queue_offset, result.pop_time, invisible_ms)
            out.append(Delivery(msg, handle.encode()))
        if out:
            broker.stats.add_got(len(out))
            broker.stats.count_got(topic.topic, group, len(out), sum(len(m.record) for m in result.messages))
        return out

    # The broker's own endpoint answers from its own store: there is no hop for a deadline
    # to bound, so timeout_s is not used.
    async def ack(self, group: str, topic: str, handle: str, *, timeout_s: float | None = None) -> None:
        h = _handle(handle, topic)
        await pop_service(self._broker).ack(group, topic, h.queue_id, [h.offset])

    async def change_invisible(self, group: str, topic: str, handle: str, invisible_ms: int, *,
                               timeout_s: float | None = None) -> str:
        h = _handle(handle, topic)
        result = await pop_service(self._broker).change_invisible(
            group, topic, h.queue_id, h.offset, h.pop_time, invisible_ms)
        if result.outcome is ChangeOutcome.STALE:
            raise GrpcStatusError(Code.INVALID_RECEIPT_HANDLE,
                                  "the receipt handle is stale: the message was delivered again since")
        if result.outcome is ChangeOutcome.NOT_IN_FLIGHT:
            raise GrpcStatusError(Code.INVALID_RECEIPT_HANDLE,
                                  "the message is not in flight (acknowledged, or its receipt handle expired)")
        return ReceiptHandle(topic, h.queue_id, h.offset, result.pop_time, invisible_ms).encode()

    async def forward_to_dlq(self, group: str, topic: str, handle: str, delivery_attempt: int,
                             message_id: str, *, timeout_s: float | None = None) -> None:
        broker = self._broker
        h = _handle(handle, topic)
        store = broker.store
        assert store is not None
        entries = store.reads.read_queue_entries(topic, h.queue_id, h.offset, 1)
        raw = store.reads.read_queue_record(topic, h.queue_id, entries[0]) \
            if entries and entries[0].queue_offset == h.offset else None
        if raw is None:
            raise GrpcStatusError(Code.MESSAGE_NOT_FOUND, f"no message at {topic}/{h.queue_id}/{h.offset}")
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
        attempts = max(delivery_attempt, 1)
        result = await broker.put([StoreMessage(
            topic=target.topic_name, queue_id=random.randrange(target.write_queue_nums), body=msg.body,
            properties=props, flag=msg.flag, sys_flag=msg.sys_flag, born_timestamp=msg.born_timestamp,
            born_host=msg.born_host, reconsume_times=attempts - 1)])
        if not result.status.stored:
            raise GrpcStatusError(put_code(result.status), result.reason or result.status.name)
        await pop_service(broker).ack(group, topic, h.queue_id, [h.offset])
        if broker.events.active:
            broker.events.emit(MessageEvent(MessageEventKind.DEAD_LETTERED, topic, h.queue_id, h.offset,
                                            group=group, msg_id=origin_id,
                                            detail={"target": target.topic_name, "reconsume_times": str(attempts - 1)}))

    async def end_transaction(self, topic: str, transaction_id: str, commit: bool) -> tuple[pb.Code, str]:
        txid = decode_transaction_id(transaction_id)
        # The producer group of a gRPC producer is its topic, as RocketMQ's proxy sets it.
        outcome = await self._broker.transactions.end(
            producer_group=topic, tran_state_table_offset=txid.half_offset,
            commit_log_offset=txid.commit_log_offset,
            commit_or_rollback=TRANSACTION_COMMIT_TYPE if commit else TRANSACTION_ROLLBACK_TYPE)
        if outcome.code != ResponseCode.SUCCESS:
            return response_code(outcome.code), outcome.remark or ""
        return Code.OK, ""


def _handle(text: str, topic: str) -> ReceiptHandle:
    handle = decode_handle(text)
    if handle.topic != topic:
        raise GrpcStatusError(Code.INVALID_RECEIPT_HANDLE, "the receipt handle is of another topic")
    return handle
