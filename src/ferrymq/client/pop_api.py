"""The pop requests a SimpleConsumer makes (RocketMQ 5's MQClientAPIImpl.popMessageAsync,
ackMessageAsync, changeInvisibleTimeAsync): headers in, decoded messages with their receipt
handles out. A popped message's receipt handle is RocketMQ's extraInfo (common/popinfo.py),
built here from the response header as RocketMQ's client builds it."""

from __future__ import annotations

import time
from dataclasses import dataclass

from ..common.codes import RequestCode, ResponseCode
from ..common.headers import fields
from ..common.message import MessageExt
from ..common.popinfo import (
    PROPERTY_FIRST_POP_TIME,
    PROPERTY_POP_CK,
    ExtraInfo,
    parse_msg_offset_info,
    parse_order_count_info,
    parse_start_offset_info,
    retry_mark,
)
from ..common.record import decode_records
from .api import LONG_POLL_MARGIN, MQClientAPI
from .errors import broker_error

_NOT_FOUND = (ResponseCode.POLLING_TIMEOUT, ResponseCode.POLLING_FULL, ResponseCode.PULL_NOT_FOUND)


@dataclass(frozen=True, slots=True)
class Popped:
    message: MessageExt
    handle: ExtraInfo


@dataclass(frozen=True, slots=True)
class PopAnswer:
    messages: list[Popped]
    rest: int  # messages the broker still has for the group in the queues it looked at


async def pop(api: MQClientAPI, addr: str, broker_name: str, *, group: str, topic: str,
              queue_id: int = -1, max_nums: int, invisible_ms: int, poll_ms: int,
              expression: str = "*", expression_type: str = "TAG", order: bool = False,
              init_mode: int = 1) -> PopAnswer:
    ext = fields(consumerGroup=group, topic=topic, queueId=queue_id, maxMsgNums=max_nums,
                 invisibleTime=invisible_ms, pollTime=poll_ms, bornTime=int(time.time() * 1000),
                 initMode=init_mode, expType=expression_type, exp=expression or "*", order=order)
    timeout = api.timeout + (poll_ms / 1000 + LONG_POLL_MARGIN if poll_ms else 0)
    resp = await api.invoke(addr, RequestCode.POP_MESSAGE, ext, timeout=timeout)
    e = resp.ext_fields
    rest = int(e.get("restNum") or 0)
    if resp.code in _NOT_FOUND:
        return PopAnswer([], rest)
    if resp.code != ResponseCode.SUCCESS:
        raise broker_error(addr, RequestCode.POP_MESSAGE, resp.code, resp.remark)
    pop_time, invisible = int(e["popTime"]), int(e["invisibleTime"])
    revive_qid = int(e.get("reviveQid") or 0)
    starts = parse_start_offset_info(e.get("startOffsetInfo"))
    counts = parse_order_count_info(e.get("orderCountInfo")) if order else {}
    parse_msg_offset_info(e.get("msgOffsetInfo"))  # malformed info fails here, not at ack
    out: list[Popped] = []
    for m in decode_records(resp.body or b"", broker=broker_name):
        mark = retry_mark(m.topic)
        start = starts.get(f"{mark}@{m.queue_id}", m.queue_offset)
        handle = ExtraInfo(start, pop_time, invisible, revive_qid, mark, broker_name,
                           m.queue_id, m.queue_offset)
        count = counts.get(f"{mark}@qo{m.queue_id}%{m.queue_offset}")
        if count is not None and count > 0:
            m.reconsume_times = count
        m.properties[PROPERTY_POP_CK] = handle.encode()
        m.properties.setdefault(PROPERTY_FIRST_POP_TIME, str(pop_time))
        out.append(Popped(m, handle))
    return PopAnswer(out, rest)


async def ack(api: MQClientAPI, addr: str, *, group: str, topic: str, handle: ExtraInfo,
              timeout: float | None = None) -> None:
    """timeout, here and below: the request's (None: the client's request timeout)."""
    await api.invoke_ok(addr, RequestCode.ACK_MESSAGE, fields(
        consumerGroup=group, topic=topic, queueId=handle.queue_id, extraInfo=handle.encode(),
        offset=handle.queue_offset), timeout=timeout)


async def change_invisible(api: MQClientAPI, addr: str, *, group: str, topic: str,
                           handle: ExtraInfo, invisible_ms: int, timeout: float | None = None) -> ExtraInfo:
    """The new receipt handle."""
    resp = await api.invoke_ok(addr, RequestCode.CHANGE_MESSAGE_INVISIBLETIME, fields(
        consumerGroup=group, topic=topic, queueId=handle.queue_id, extraInfo=handle.encode(),
        offset=handle.queue_offset, invisibleTime=invisible_ms), timeout=timeout)
    e = resp.ext_fields
    return handle.renewed(int(e["popTime"]), int(e["invisibleTime"]))
