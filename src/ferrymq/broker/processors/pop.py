"""POP_MESSAGE, ACK_MESSAGE, BATCH_ACK_MESSAGE and CHANGE_MESSAGE_INVISIBLETIME: RocketMQ 5's
remoting headers and answers over the PopService (docs/protocol.md, "Pop consumption")."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from ...common import jsonx
from ...common.codes import RequestCode, ResponseCode
from ...common.headers import PERM_READ, fields, opt_bool, opt_int, opt_str, req_int, req_str
from ...common.names import validate_group
from ...common.popinfo import (
    POP_ORDER_REVIVE_QUEUE,
    ExtraInfoError,
    decode_bitset,
    msg_offset_info,
    order_count_info,
    parse_extra_info,
    real_topic,
    start_offset_info,
)
from ...remoting import Connection, RemotingCommand
from ..clients import parse_subscription
from ..context import BrokerContext
from ..pop.revive import REVIVE_QUEUE
from ..pop.service import INIT_MAX, MAX_POP_BATCH, PopRefused, PopResult, pop_service
from ..pop.state import ChangeOutcome
from . import reply

# Held pops are answered inside the time after which clients give up on a request.
MAX_POLL_MS = 20_000
REVIVE_QID = REVIVE_QUEUE  # the one queue of the revive log (pop/revive.py)


def _pop_header(result: PopResult, revive_qid: int) -> dict[str, str]:
    by_queue = result.by_queue()
    topic = result.messages[0].topic if result.messages else ""
    header = fields(popTime=result.pop_time, invisibleTime=result.invisible_ms,
                    reviveQid=revive_qid, restNum=result.rest)
    if by_queue:
        header["startOffsetInfo"] = start_offset_info(
            topic, {q: ms[0].queue_offset for q, ms in by_queue.items()})
        header["msgOffsetInfo"] = msg_offset_info(
            topic, {q: [m.queue_offset for m in ms] for q, ms in by_queue.items()})
        if result.order:
            header["orderCountInfo"] = order_count_info(
                topic, [(m.queue_id, m.queue_offset, m.reconsume_times) for m in result.messages])
    return header


async def pop_message(broker: BrokerContext, conn: Connection, req: RemotingCommand) -> RemotingCommand | None:
    ext = req.ext_fields
    group = req_str(ext, "consumerGroup")
    validate_group(group)
    topic = req_str(ext, "topic")
    queue_id = opt_int(ext, "queueId", -1)
    max_nums = req_int(ext, "maxMsgNums")
    invisible = req_int(ext, "invisibleTime")
    poll_ms = min(max(0, opt_int(ext, "pollTime", 0)), MAX_POLL_MS)
    order = opt_bool(ext, "order")
    init_mode = opt_int(ext, "initMode", INIT_MAX)
    if max_nums > MAX_POP_BATCH:
        return reply(req, ResponseCode.INVALID_PARAMETER,
                     f"the broker[{broker.config.broker_name}] pop message's num is greater than 32")
    cfg = broker.topics.get(topic)
    if cfg is None:
        return reply(req, ResponseCode.TOPIC_NOT_EXIST, f"topic[{topic}] not exist, apply first please!")
    if not cfg.perm & PERM_READ:
        return reply(req, ResponseCode.NO_PERMISSION, f"the topic[{topic}] peeking message is forbidden")
    sub = parse_subscription(topic, opt_str(ext, "exp", "*"), 0, opt_str(ext, "expType", "TAG") or "TAG",
                             property_filter=broker.config.enable_property_filter)
    if not broker.config.long_polling_enable:
        poll_ms = 0
    try:
        result = await pop_service(broker).pop(group, topic, queue_id, max_nums, invisible,
                                      None if sub.matches_all and sub.selector is None else sub,
                                      order=order,
                                      init_mode=init_mode, poll_ms=poll_ms,
                                      client=conn.remote_addr)
    except PopRefused as exc:
        return reply(req, ResponseCode.INVALID_PARAMETER, exc.reason)
    revive_qid = POP_ORDER_REVIVE_QUEUE if order else REVIVE_QID
    header = _pop_header(result, revive_qid)
    if not result.messages:
        return reply(req, ResponseCode.POLLING_TIMEOUT, "NO_MESSAGE_IN_QUEUE", ext_fields=header)
    broker.stats.add_got(len(result.messages))
    body = b"".join(m.record for m in result.messages)
    broker.stats.count_got(topic, group, len(result.messages), len(body))
    return reply(req, ResponseCode.SUCCESS, "FOUND", ext_fields=header, body=body)


def _check_queue(broker: BrokerContext, req: RemotingCommand, topic: str, queue_id: int,
                 offset: int | None) -> RemotingCommand | None:
    cfg = broker.topics.get(topic)
    if cfg is None:
        return reply(req, ResponseCode.TOPIC_NOT_EXIST, f"topic[{topic}] not exist, apply first please!")
    if queue_id < 0 or queue_id >= cfg.read_queue_nums:
        return reply(req, ResponseCode.MESSAGE_ILLEGAL,
                     f"queueId[{queue_id}] is illegal, topic:[{topic}] "
                     f"topicConfig.readQueueNums:[{cfg.read_queue_nums}]")
    if offset is not None:
        store = broker.store
        assert store is not None
        lo, hi = store.reads.get_min_offset(topic, queue_id), store.reads.get_max_offset(topic, queue_id)
        if offset < lo or offset >= hi:
            return reply(req, ResponseCode.NO_MESSAGE,
                         f"offset is illegal, key:{topic}@{queue_id}, commit:{offset}, store:{lo}~{hi}")
    return None


async def ack_message(broker: BrokerContext, conn: Connection, req: RemotingCommand) -> RemotingCommand | None:
    ext = req.ext_fields
    group = req_str(ext, "consumerGroup")
    topic = req_str(ext, "topic")
    queue_id = req_int(ext, "queueId")
    offset = req_int(ext, "offset")
    try:
        parse_extra_info(req_str(ext, "extraInfo"))
    except ExtraInfoError as exc:
        return reply(req, ResponseCode.MESSAGE_ILLEGAL, str(exc))
    refused = _check_queue(broker, req, topic, queue_id, offset)
    if refused is not None:
        return refused
    await pop_service(broker).ack(group, topic, queue_id, [offset])
    return reply(req, ResponseCode.SUCCESS)


async def batch_ack_message(broker: BrokerContext, conn: Connection,
                            req: RemotingCommand) -> RemotingCommand | None:
    """Body: BatchAckMessageRequestBody, {"brokerName", "acks": [{"c": group, "t": topic,
    "r": retry mark, "so": start offset, "q": queue, "rq", "pt", "it", "b": bitset}]}; bit i
    acknowledges offset so + i."""
    try:
        body = jsonx.loads(req.body or b"{}")
        acks = list(body.get("acks") or [])
    except (ValueError, AttributeError, TypeError):
        return reply(req, ResponseCode.MESSAGE_ILLEGAL, "batch ack body is not valid JSON")
    if not acks:
        return reply(req, ResponseCode.NO_MESSAGE, "no acks in the body")
    store = broker.store
    assert store is not None
    for one in acks:
        try:
            group = str(one.get("c", one.get("consumerGroup")))
            topic = real_topic(str(one.get("t", one.get("topic"))), group,
                               str(one.get("r", one.get("retry", "0"))))
            queue_id = int(one.get("q", one.get("queueId")))
            start = int(one.get("so", one.get("startOffset")))
            bits = decode_bitset(str(one.get("b", one.get("bitSet")) or ""))
        except (ValueError, TypeError, AttributeError) as exc:
            return reply(req, ResponseCode.MESSAGE_ILLEGAL, f"batch ack entry is malformed: {exc}")
        if _check_queue(broker, req, topic, queue_id, None) is not None:
            continue  # RocketMQ skips an entry for a queue it does not have
        lo, hi = store.reads.get_min_offset(topic, queue_id), store.reads.get_max_offset(topic, queue_id)
        offsets = [start + i for i in bits if lo <= start + i < hi]
        await pop_service(broker).ack(group, topic, queue_id, offsets)
    return reply(req, ResponseCode.SUCCESS)


async def change_invisible_time(broker: BrokerContext, conn: Connection,
                                req: RemotingCommand) -> RemotingCommand | None:
    ext = req.ext_fields
    group = req_str(ext, "consumerGroup")
    topic = req_str(ext, "topic")
    queue_id = req_int(ext, "queueId")
    offset = req_int(ext, "offset")
    invisible = req_int(ext, "invisibleTime")
    try:
        info = parse_extra_info(req_str(ext, "extraInfo"))
    except ExtraInfoError as exc:
        return reply(req, ResponseCode.MESSAGE_ILLEGAL, str(exc))
    refused = _check_queue(broker, req, topic, queue_id, offset)
    if refused is not None:
        return refused
    result = await pop_service(broker).change_invisible(group, topic, queue_id, offset, info.pop_time, invisible)
    if result.outcome is not ChangeOutcome.CHANGED:
        why = ("it was handed out again since this receipt handle was issued"
               if result.outcome is ChangeOutcome.STALE else "it is acknowledged or not in flight")
        return reply(req, ResponseCode.NO_MESSAGE,
                     f"cannot change the invisible time of {topic}@{queue_id}:{offset}: {why}")
    return reply(req, ResponseCode.SUCCESS, ext_fields=fields(
        popTime=result.pop_time, invisibleTime=result.invisible_ms, reviveQid=info.revive_qid))


Handler = Callable[[BrokerContext, Connection, RemotingCommand], Awaitable[RemotingCommand | None]]


def _master_only(handler: Handler) -> Handler:
    """Pop state changes with every request, so only the master serves them: a slave's copy
    of the acknowledgements is its master's, not its own."""
    async def guarded(broker: BrokerContext, conn: Connection, req: RemotingCommand) -> RemotingCommand | None:
        refused = broker.refuse_writes()
        if refused:
            return reply(req, ResponseCode.SERVICE_NOT_AVAILABLE, refused)
        return await handler(broker, conn, req)

    return guarded


HANDLERS = {
    RequestCode.POP_MESSAGE: _master_only(pop_message),
    RequestCode.ACK_MESSAGE: _master_only(ack_message),
    RequestCode.BATCH_ACK_MESSAGE: _master_only(batch_ack_message),
    RequestCode.CHANGE_MESSAGE_INVISIBLETIME: _master_only(change_invisible_time),
}
