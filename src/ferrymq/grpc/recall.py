"""RecallMessage (RocketMQ 5.3): a delayed message cancelled before its delivery time by the
recall handle its send answered with. The handle is RocketMQ's RecallMessageHandle v1
("v1 <topic> <broker name> <delivery ms> <message id>", URL-safe base64); the recall stores a
delete marker (TIMER_DEL_UNIQKEY, `ferrymq/broker/timer/message.py:delete_key`) for that
delivery time on the broker that holds the timer, as RocketMQ's RecallMessageProcessor does,
and the timer drops the message when its slot comes."""

from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass

from ..broker.timer.message import delete_key
from ..common import props as P
from ..common import topic_types
from ..store import StoreMessage
from .backend import Backend
from .convert import check_topic
from .pb import service_pb2 as spb
from .status import Code, GrpcStatusError, ok, status

_VERSION = "v1"
RECALL_TAG = "_RECALL_TAG_"


@dataclass(frozen=True, slots=True)
class RecallHandle:
    topic: str
    broker_name: str
    deliver_ms: int
    message_id: str

    def encode(self) -> str:
        raw = " ".join((_VERSION, self.topic, self.broker_name, str(self.deliver_ms), self.message_id))
        return base64.urlsafe_b64encode(raw.encode()).decode()


def decode_handle(text: str) -> RecallHandle:
    try:
        items = base64.urlsafe_b64decode(text.encode()).decode().split(" ")
    except (binascii.Error, UnicodeDecodeError, ValueError):
        items = []
    if len(items) < 5 or items[0] != _VERSION or not items[3].lstrip("-").isdigit():
        raise GrpcStatusError(Code.BAD_REQUEST, "recall handle is invalid")
    return RecallHandle(items[1], items[2], int(items[3]), items[4])


async def recall(backend: Backend, req: spb.RecallMessageRequest, peer: str) -> spb.RecallMessageResponse:
    topic = req.topic.name
    check_topic(topic)
    handle = decode_handle(req.recall_handle)
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
    marker = StoreMessage(
        topic=topic, queue_id=0, body=b"0", born_timestamp=now, born_host=peer,
        properties={P.PROPERTY_TAGS: RECALL_TAG, P.PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX: handle.message_id,
                    P.PROPERTY_TIMER_DEL_UNIQKEY: delete_key(topic, handle.message_id),
                    P.PROPERTY_TIMER_DELIVER_MS: str(handle.deliver_ms)})
    answer = await backend.put(group, 0, [marker], half=False)
    if answer.code != Code.OK:
        return spb.RecallMessageResponse(status=status(answer.code, answer.reason or "recall failed, execute error"))
    return spb.RecallMessageResponse(status=ok(), message_id=handle.message_id)
