"""SendMessage: the messages of one request go to one queue of the topic on this broker (the
one their message group hashes to, else the next in turn) and are stored as one put."""

from __future__ import annotations

import itertools
import zlib

from ..broker.context import BrokerContext
from ..common.headers import PERM_WRITE
from .convert import Incoming, check_topic, incoming
from .pb import definition_pb2 as pb
from .pb import service_pb2 as spb
from .receipt import TransactionId
from .status import Code, GrpcStatusError, put_code, status

NO_TRANSACTIONS = "this broker refuses transactional messages (reject_transaction_message)"


def group_queue(group: str, queue_nums: int) -> int:
    """The queue a message group always goes to: stable across restarts and processes."""
    return zlib.crc32(group.encode()) % queue_nums


class Sender:
    def __init__(self, broker: BrokerContext) -> None:
        self._broker = broker
        self._turn = itertools.count()

    async def send(self, req: spb.SendMessageRequest, peer: str) -> spb.SendMessageResponse:
        if not req.messages:
            raise GrpcStatusError(Code.BAD_REQUEST, "no message to send")
        broker = self._broker
        topic = req.messages[0].topic.name
        check_topic(topic)
        cfg = broker.topics.get(topic)
        if cfg is None:
            raise GrpcStatusError(Code.TOPIC_NOT_FOUND, f"topic {topic} not found")
        if not cfg.perm & PERM_WRITE or cfg.write_queue_nums <= 0:
            raise GrpcStatusError(Code.FORBIDDEN, f"the topic[{topic}] sending is forbidden")
        first = req.messages[0].system_properties
        if len(req.messages) == 1 and first.HasField("message_group") and first.message_group:
            queue_id = group_queue(first.message_group, cfg.write_queue_nums)
        else:
            queue_id = next(self._turn) % cfg.write_queue_nums
        now = broker.now_ms()
        config = broker.config
        msgs: list[Incoming] = [
            incoming(m, topic=topic, queue_id=queue_id, max_body_size=config.max_message_size, peer=peer,
                     cluster=config.broker_cluster_name, now_ms=now)
            for m in req.messages
        ]
        for m in msgs:
            self._check_kind(m, len(msgs))
        half = msgs[0].message_type == pb.TRANSACTION
        if half:
            result = await broker.transactions.prepare(msgs[0].message)
        else:
            result = await broker.put([m.message for m in msgs])
        code = put_code(result.status)
        if code == Code.BAD_REQUEST and any(m.delivery_ms is not None for m in msgs):
            code = Code.ILLEGAL_DELIVERY_TIME  # the timer refused the delivery time
        if code != Code.OK:
            reason = result.reason or f"send message failed, sendStatus={result.status.name}"
            entry = spb.SendResultEntry(status=status(code, reason))
            return spb.SendMessageResponse(status=status(code, reason), entries=[entry] * len(msgs))
        entries = [
            spb.SendResultEntry(status=status(Code.OK), message_id=m.message_id, offset=a.queue_offset,
                                transaction_id=TransactionId(a.queue_offset, a.phys_offset).encode() if half else "")
            for m, a in zip(msgs, result.messages, strict=True)
        ]
        return spb.SendMessageResponse(status=status(Code.OK), entries=entries)

    def _check_kind(self, m: Incoming, count: int) -> None:
        if m.message_type == pb.TRANSACTION:
            if self._broker.config.reject_transaction_message:
                raise GrpcStatusError(Code.FORBIDDEN, NO_TRANSACTIONS)
            if count > 1:
                raise GrpcStatusError(Code.BAD_REQUEST, "transactional messages are sent one by one")
            if m.delivery_ms is not None or m.message_group:
                raise GrpcStatusError(Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE,
                                      "a transactional message has no message group or delivery time")
        if m.message_type == pb.FIFO and not m.message_group:
            raise GrpcStatusError(Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE, "a FIFO message needs a message group")
        if m.delivery_ms is not None:
            limit = self._broker.now_ms() + self._broker.config.timer_max_delay_sec * 1000
            if m.delivery_ms > limit:
                raise GrpcStatusError(Code.ILLEGAL_DELIVERY_TIME, "the delivery time is further away than the "
                                      f"broker's timer_max_delay_sec ({self._broker.config.timer_max_delay_sec} s)")
