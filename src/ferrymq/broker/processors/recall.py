"""RECALL_MESSAGE (RocketMQ 5.3's RecallMessageProcessor): a delayed message cancelled before its
delivery time by the recall handle its send answered with; the broker stores a delete marker
for that time (`ferrymq/broker/timer/message.py:recall_marker`) and its timer drops the message
when the slot comes. RocketMQ's broker has this off by default (recallMessageEnable); ferrymq
serves it, as its gRPC RecallMessage."""

from __future__ import annotations

from ...common.codes import RequestCode, ResponseCode
from ...common.headers import fields, req_str
from ...common.recall_handle import RecallHandleError, decode_recall_handle
from ...remoting import Connection, RemotingCommand
from ..context import BrokerContext
from ..timer.message import recall_marker
from . import reply


async def recall_message(broker: BrokerContext, conn: Connection, req: RemotingCommand) -> RemotingCommand | None:
    ext = req.ext_fields
    topic = req_str(ext, "topic")
    if broker.topics.get(topic) is None:
        return reply(req, ResponseCode.TOPIC_NOT_EXIST, f"recall failed, the topic[{topic}] not exist")
    try:
        handle = decode_recall_handle(req_str(ext, "recallHandle"))
    except RecallHandleError as exc:
        return reply(req, ResponseCode.ILLEGAL_OPERATION, str(exc))
    if handle.topic != topic:
        return reply(req, ResponseCode.ILLEGAL_OPERATION, "recall failed, topic not match")
    if handle.broker_name != broker.config.broker_name:
        return reply(req, ResponseCode.ILLEGAL_OPERATION, "recall failed, broker service not available")
    now = broker.now_ms()
    left = handle.deliver_ms - now
    if left <= 0 or left >= broker.config.timer_max_delay_sec * 1000:
        return reply(req, ResponseCode.ILLEGAL_OPERATION, "recall failed, timestamp invalid")
    result = await broker.put([recall_marker(topic, handle.message_id, handle.deliver_ms, now,
                                             conn.remote_addr or "127.0.0.1:0")])
    if not result.status.stored:
        # A slave, or a master that may not write, refuses the put as it refuses a send.
        return reply(req, ResponseCode.SYSTEM_ERROR, result.reason or "recall failed, execute error")
    return reply(req, ResponseCode.SUCCESS, ext_fields=fields(msgId=handle.message_id))


HANDLERS = {RequestCode.RECALL_MESSAGE: recall_message}
