"""SendMessage: the messages of one request go to one queue of the topic, among the writable
queues of all its broker groups (the one their message group hashes to, else the next in turn
among the groups the backend does not isolate), and are stored as one put, within the client's
deadline."""

from __future__ import annotations

import itertools
import zlib

from ..common import topic_types
from ..common.headers import PERM_WRITE
from ..common.recall_handle import RecallHandle
from ..common.record import properties_map
from .backend import Backend, TopicGroup
from .budget import Deadline
from .convert import Incoming, check_topic, incoming
from .pb import definition_pb2 as pb
from .pb import service_pb2 as spb
from .status import Code, GrpcStatusError, status

NO_TRANSACTIONS = "this broker refuses transactional messages (reject_transaction_message)"


def group_queue(group: str, queue_nums: int) -> int:
    """The queue a message group always goes to: stable across restarts and processes."""
    return zlib.crc32(group.encode()) % queue_nums


def _recall_handle(m: Incoming, group: TopicGroup, now_ms: int) -> str:
    """A timer message's recall handle (RecallMessage); none for a message delivered at once."""
    if m.delivery_ms is None or m.delivery_ms <= now_ms:
        return ""
    return RecallHandle(group.topic, group.broker_name, m.delivery_ms, m.message_id).encode()


class Sender:
    def __init__(self, backend: Backend) -> None:
        self._backend = backend
        self._turn = itertools.count()

    async def send(self, req: spb.SendMessageRequest, peer: str,
                   time_remaining: float | None = None) -> spb.SendMessageResponse:
        if not req.messages:
            raise GrpcStatusError(Code.BAD_REQUEST, "no message to send")
        backend = self._backend
        topic = req.messages[0].topic.name
        check_topic(topic)
        # The route's lookup (a topic's first) and the put share the client's deadline.
        deadline = Deadline.for_client(time_remaining)
        groups = await backend.topic(topic, timeout_s=deadline.left())
        if not groups:
            raise GrpcStatusError(Code.TOPIC_NOT_FOUND, f"topic {topic} not found")
        # Every writable queue of every broker group, in route order: as RocketMQ's proxy
        # picks (SendMessageQueueSelector), the queue the SDK named is not used.
        writable = [(g, i) for g in groups if g.perm & PERM_WRITE for i in range(g.write_queue_nums)]
        if not writable:
            raise GrpcStatusError(Code.FORBIDDEN, f"the topic[{topic}] sending is forbidden")
        first = req.messages[0].system_properties
        if len(req.messages) == 1 and first.HasField("message_group") and first.message_group:
            # A message group keeps its queue whatever befalls its broker: order first.
            group, queue_id = writable[group_queue(first.message_group, len(writable))]
        else:
            # RocketMQ's selectOneByPipeline: the groups a failed send isolated are passed
            # over while another has a writable queue (asked once per group, not per queue).
            isolated = {g.broker_name for g in groups if backend.send_isolated(g.broker_name)}
            usable = writable
            if isolated:
                usable = [q for q in writable if q[0].broker_name not in isolated] or writable
            group, queue_id = usable[next(self._turn) % len(usable)]
        now = backend.now_ms()
        limits = backend.limits
        msgs: list[Incoming] = [
            incoming(m, topic=topic, queue_id=queue_id, max_body_size=limits.max_message_size, peer=peer,
                     cluster=limits.cluster_name, now_ms=now)
            for m in req.messages
        ]
        for m in msgs:
            self._check_kind(m, len(msgs))
        if group.message_type is not None and limits.check_message_type:
            try:
                for m in msgs:
                    topic_types.check_send(topic, group.message_type, properties_map(m.message.properties))
            except topic_types.TopicMessageTypeMismatch as exc:
                # RocketMQ's proxy: ProxyExceptionCode.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE.
                raise GrpcStatusError(Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE, str(exc)) from None
        half = msgs[0].message_type == pb.TRANSACTION
        result = await backend.put(group, queue_id, [m.message for m in msgs], half=half,
                                   timeout_s=deadline.left())
        code = result.code
        if code == Code.BAD_REQUEST and any(m.delivery_ms is not None for m in msgs):
            code = Code.ILLEGAL_DELIVERY_TIME  # the timer refused the delivery time
        if code != Code.OK:
            entry = spb.SendResultEntry(status=status(code, result.reason))
            return spb.SendMessageResponse(status=status(code, result.reason), entries=[entry] * len(msgs))
        entries = [
            spb.SendResultEntry(status=status(Code.OK), message_id=m.message_id, offset=offset,
                                transaction_id=txid, recall_handle=_recall_handle(m, group, now))
            for m, offset, txid in zip(msgs, result.offsets, result.transaction_ids, strict=True)
        ]
        return spb.SendMessageResponse(status=status(Code.OK), entries=entries)

    def _check_kind(self, m: Incoming, count: int) -> None:
        if m.message_type == pb.TRANSACTION:
            if self._backend.limits.reject_transaction_message:
                raise GrpcStatusError(Code.FORBIDDEN, NO_TRANSACTIONS)
            if count > 1:
                raise GrpcStatusError(Code.BAD_REQUEST, "transactional messages are sent one by one")
            if m.delivery_ms is not None or m.message_group:
                raise GrpcStatusError(Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE,
                                      "a transactional message has no message group or delivery time")
        if m.message_type == pb.FIFO and not m.message_group:
            raise GrpcStatusError(Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE, "a FIFO message needs a message group")
        if m.delivery_ms is not None:
            max_delay = self._backend.limits.timer_max_delay_sec
            if m.delivery_ms > self._backend.now_ms() + max_delay * 1000:
                raise GrpcStatusError(Code.ILLEGAL_DELIVERY_TIME, "the delivery time is further away than the "
                                      f"broker's timer_max_delay_sec ({max_delay} s)")
