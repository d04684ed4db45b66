"""PULL_MESSAGE with long polling, tag and SQL92 filtering and the commit-offset piggy-back."""

from __future__ import annotations

import time

from ...common.codes import RequestCode, ResponseCode
from ...common.headers import (
    PERM_READ,
    PULL_FLAG_COMMIT_OFFSET,
    PULL_FLAG_SUBSCRIPTION,
    PULL_FLAG_SUSPEND,
    fields,
    opt_int,
    opt_str,
    req_int,
    req_str,
)
from ...remoting import Connection, RemotingCommand
from ...store import GetStatus
from ..clients import Subscription, UnsupportedFilterError, parse_subscription
from ..context import BrokerContext
from ..events import MessageEvent, MessageEventKind
from ..filters import record_filter
from . import reply

MAX_PULL_BATCH = 1024

_STATUS_CODES = {
    GetStatus.FOUND: ResponseCode.SUCCESS,
    GetStatus.MESSAGE_WAS_REMOVING: ResponseCode.PULL_RETRY_IMMEDIATELY,
    GetStatus.NO_MATCHED_MESSAGE: ResponseCode.PULL_RETRY_IMMEDIATELY,
    GetStatus.OFFSET_FOUND_NULL: ResponseCode.PULL_NOT_FOUND,
    GetStatus.OFFSET_OVERFLOW_ONE: ResponseCode.PULL_NOT_FOUND,
    GetStatus.OFFSET_OVERFLOW_BADLY: ResponseCode.PULL_OFFSET_MOVED,
    GetStatus.OFFSET_TOO_SMALL: ResponseCode.PULL_OFFSET_MOVED,
    # on_corrupt_record = stop: the consumer retries, and waits for an operator's skip.
    GetStatus.MESSAGE_DAMAGED: ResponseCode.SYSTEM_ERROR,
}


async def pull_message(broker: BrokerContext, conn: Connection, req: RemotingCommand) -> RemotingCommand | None:
    ext = req.ext_fields
    group = req_str(ext, "consumerGroup")
    topic = req_str(ext, "topic")
    queue_id = req_int(ext, "queueId")
    offset = req_int(ext, "queueOffset")
    max_nums = max(1, min(opt_int(ext, "maxMsgNums", 32), MAX_PULL_BATCH))
    sys_flag = opt_int(ext, "sysFlag", 0)
    # Held pulls are answered well inside the 30 s after which ali-ons gives up on a request.
    suspend_ms = min(opt_int(ext, "suspendTimeoutMillis", 15_000), 20_000)
    group_cfg = broker.groups.consumable(group)  # refused as RocketMQ refuses (GroupRefused)
    cfg = broker.topics.get(topic)
    if cfg is None:
        return reply(req, ResponseCode.TOPIC_NOT_EXIST, f"topic[{topic}] not exist, apply first please!")
    if not cfg.perm & PERM_READ:
        return reply(req, ResponseCode.NO_PERMISSION, f"the topic[{topic}] pulling message is forbidden")
    if queue_id < 0 or queue_id >= cfg.read_queue_nums:
        return reply(req, ResponseCode.SYSTEM_ERROR,
                     f"queueId[{queue_id}] is illegal, topic:[{topic}] topicConfig.readQueueNums:"
                     f"[{cfg.read_queue_nums}] consumer:[{conn.remote_addr}]")
    if sys_flag & PULL_FLAG_SUBSCRIPTION:
        sub: Subscription = parse_subscription(topic, opt_str(ext, "subscription", "*"),
                                               opt_int(ext, "subVersion", 0),
                                               opt_str(ext, "expressionType", "TAG") or "TAG",
                                               property_filter=broker.config.enable_property_filter)
    else:
        info = broker.clients.consumer_group(group)
        if info is None:
            return reply(req, ResponseCode.SUBSCRIPTION_NOT_EXIST,
                         f"the consumer's group info not exist, group: {group}")
        found = info.subscriptions.get(topic)
        if found is None:
            return reply(req, ResponseCode.SUBSCRIPTION_NOT_EXIST,
                         f"the consumer's subscription not exist, group: {group} topic: {topic}")
        if not group_cfg.consume_broadcast_enable and info.message_model == "BROADCASTING":
            return reply(req, ResponseCode.NO_PERMISSION,
                         f"the consumer group[{group}] can not consume by broadcast way")
        if found.selector is not None and not broker.config.enable_property_filter:
            raise UnsupportedFilterError(topic, found.expression_type)
        sub = found
    if broker.clients.is_member(group, conn):
        # Only a member's close is watched, and only a member can be waited for: a tool pulling
        # with the group's name (admin, dashboard, Spark) must not replace the real owner.
        broker.handover.pulled(group, topic, queue_id, conn)
    if sys_flag & PULL_FLAG_COMMIT_OFFSET:
        commit = opt_int(ext, "commitOffset", -1)
        if commit >= 0:
            broker.offsets.commit(group, topic, queue_id, commit, broker.now_ms())
    # A group's first position on a queue is durable before it is served: a broker crash must
    # not make a LAST_OFFSET group start past messages it never saw.
    await broker.offsets.wait_durable(_note_start(broker, group, topic, queue_id, offset))
    allow_suspend = bool(sys_flag & PULL_FLAG_SUSPEND) and broker.config.long_polling_enable
    return await _pull(broker, conn, req, group, topic, queue_id, offset, max_nums, sub,
                       suspend_ms if allow_suspend else 0)


def _note_start(broker: BrokerContext, group: str, topic: str, queue_id: int, offset: int) -> int:
    """A clustering group pulling a queue where it has no offset starts there: that position
    is committed, so messages arriving while the consumer is down are not skipped on restart.
    Clients that commit only the queues they consumed from (the C++ client), or that commit -1
    for an empty queue (ali-ons), would otherwise restart at the max offset."""
    if broker.offsets.query(group, topic, queue_id) >= 0:
        return 0
    info = broker.clients.consumer_group(group)
    if info is not None and info.message_model == "CLUSTERING":
        seq = broker.offsets.commit(group, topic, queue_id, offset, broker.now_ms())
        if (info.consume_from_where == "CONSUME_FROM_FIRST_OFFSET" and broker.store is not None
                and offset <= broker.store.reads.get_min_offset(topic, queue_id)):
            # Lost in a crash, this start would be computed again as the queue's first offset:
            # the same place or an earlier one, nothing skipped. So the group's first pull
            # (on the path of every new consumer's first message) does not wait for the fsync.
            return 0
        return seq
    broker.offsets.note_pull(group, topic, queue_id, offset)
    return 0


def _slow_broker_id(broker: BrokerContext, group: str) -> int:
    cfg = broker.groups.get(group)
    return cfg.which_broker_when_consume_slowly if cfg is not None else 1


async def _pull(broker: BrokerContext, conn: Connection, req: RemotingCommand, group: str, topic: str,
                queue_id: int, offset: int, max_nums: int, sub: Subscription,
                suspend_ms: int) -> RemotingCommand:
    store = broker.store
    assert store is not None
    started = time.perf_counter()
    tag_filter = None if sub.matches_all else sub.accepts
    by_properties = None if sub.selector is None else record_filter(sub.selector)
    result = store.reads.get_messages(topic, queue_id, offset, max_nums, tag_filter=tag_filter,
                                record_filter=by_properties)
    code = _STATUS_CODES.get(result.status)
    if code is None:  # NO_MATCHED_LOGIC_QUEUE / NO_MESSAGE_IN_QUEUE
        code = ResponseCode.PULL_OFFSET_MOVED if offset != 0 else ResponseCode.PULL_NOT_FOUND
    if code == ResponseCode.PULL_NOT_FOUND and suspend_ms > 0 and broker.waiters is not None:
        # Hold the request until a message arrives beyond `offset`, then pull once more.
        await broker.waiters.wait(topic, queue_id, offset, suspend_ms / 1000)
        return await _pull(broker, conn, req, group, topic, queue_id, offset, max_nums, sub, 0)
    header = fields(
        nextBeginOffset=result.next_begin_offset,
        minOffset=result.min_offset,
        maxOffset=result.max_offset,
        suggestWhichBrokerId=broker.suggest_broker_id(topic, queue_id, result.next_begin_offset,
                                                      _slow_broker_id(broker, group)),
    )
    if code == ResponseCode.SUCCESS:
        stats = broker.stats
        stats.add_got(result.count)
        stats.count_got(topic, group, result.count, len(result.data))
        # Found pulls only, from the store read on: a held pull's wait is not its latency.
        stats.pull_latency.observe(time.perf_counter() - started)
        if broker.trace is not None:
            broker.trace.delivered(topic, queue_id, offset, result.next_begin_offset, group,
                                   conn.remote_addr)
        if broker.events.wants(MessageEventKind.DELIVERED):
            broker.events.emit(MessageEvent(MessageEventKind.DELIVERED, topic, queue_id, offset,
                                            count=result.count, group=group, client=conn.remote_addr))
        return reply(req, code, ext_fields=header, body=result.data)
    remark = {
        ResponseCode.PULL_NOT_FOUND: "no new message",
        ResponseCode.PULL_RETRY_IMMEDIATELY: "no matched message, pull again",
        ResponseCode.PULL_OFFSET_MOVED: f"offset {offset} moved ({result.status.name})",
        ResponseCode.SYSTEM_ERROR: f"the message at offset {result.next_begin_offset} of "
                                   f"{topic}/{queue_id} is damaged; see `ferrymq store damage`",
    }.get(code)
    return reply(req, code, remark, ext_fields=header)


HANDLERS = {RequestCode.PULL_MESSAGE: pull_message}
