"""RecallMessage (RocketMQ 5.3): a delayed message cancelled before its delivery time by the
recall handle its send answered with. The handle is RocketMQ's RecallMessageHandle v1
("v1 <topic> <broker name> <delivery ms> <message id>", URL-safe base64); the recall stores a
delete marker (TIMER_DEL_UNIQKEY, `ferrymq/broker/timer/message.py:delete_key`) for that
delivery time on the broker that holds the timer, as RocketMQ's RecallMessageProcessor does,
and the timer drops the message when its slot comes."""

from __future__ import annotations

from ..broker.timer.message import recall_marker
from ..common import topic_types
from ..common.recall_handle import RecallHandleError, decode_recall_handle
from .backend import Backend
from .convert import check_topic
from .pb import service_pb2 as spb
from .status import Code, GrpcStatusError, ok, status


async def recall(backend: Backend, req: spb.RecallMessageRequest, peer: str) -> spb.RecallMessageResponse:
    topic = req.topic.name
    check_topic(topic)
    try:
        handle = decode_recall_handle(req.recall_handle)
    except RecallHandleError as exc:
        raise GrpcStatusError(Code.BAD_REQUEST, str(exc)) from None
    if handle.topic != topic:
        raise GrpcStatusError(Code.BAD_REQUEST, "recall failed, topic not match")
    groups = await backend.topic(topic)
    if not groups:
        raise GrpcStatusError(Code.TOPIC_NOT_FOUND, f"topic {topic} not found")
    group = next((g for g in groups if g.broker_name == handle.broker_name), None)
    if group is None:
        raise GrpcStatusError(Code.BAD_REQUEST, "recall failed, broker service not available")
    limits = backend.limits
    if group.message_type is not None and limits.check_message_type:
        try:
            topic_types.check(topic, group.message_type, topic_types.DELAY)
        except topic_types.TopicMessageTypeMismatch as exc:
            raise GrpcStatusError(Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE, str(exc)) from None
    now = backend.now_ms()
    left = handle.deliver_ms - now
    if left <= 0 or left >= limits.timer_max_delay_sec * 1000:
        raise GrpcStatusError(Code.BAD_REQUEST, "recall failed, timestamp invalid")
    marker = recall_marker(topic, handle.message_id, handle.deliver_ms, now, peer)
    answer = await backend.put(group, 0, [marker], half=False)
    if answer.code != Code.OK:
        return spb.RecallMessageResponse(status=status(answer.code, answer.reason or "recall failed, execute error"))
    return spb.RecallMessageResponse(status=ok(), message_id=handle.message_id)
