"""The pull-style calls (PullMessage, UpdateOffset, GetOffset, QueryOffset) through `ferrymq
proxy`: the request's MessageQueue names its broker group, and the call goes to that group's
master over remoting as a 4.x consumer's would (PULL_MESSAGE with the request's filter and long
polling held by the broker, UPDATE_CONSUMER_OFFSET, QUERY_CONSUMER_OFFSET, GET_MIN_OFFSET,
GET_MAX_OFFSET, SEARCH_OFFSET_BY_TIMESTAMP), as RocketMQ's proxy forwards them."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TypeVar

from ..broker.clients import Subscription
from ..client.api import pull_sys_flag
from ..client.errors import BrokerError
from ..client.instance import ClientInstance
from ..client.results import PullStatus
from ..common.errors import FerryMQError
from ..common.headers import PERM_READ
from ..common.record import MessageDecodeError, decode_records
from ..grpc.backend import TopicGroup
from ..grpc.pb import definition_pb2 as pb
from ..grpc.queues import PullAnswer
from ..grpc.status import Code, GrpcStatusError, response_code
from ..remoting import RemotingError

T = TypeVar("T")


async def _call(what: str, broker: str, work: Awaitable[T]) -> T:
    try:
        return await work
    except BrokerError as exc:
        raise GrpcStatusError(response_code(exc.code), exc.remark or str(exc)) from None
    except (RemotingError, FerryMQError) as exc:
        raise GrpcStatusError(Code.PROXY_TIMEOUT, f"{what} on broker group {broker} failed: {exc}") from None


class ClusterQueues:
    """QueueBackend over the broker groups of a ClusterBackend (which provides these three)."""

    _inst: ClientInstance
    topic: Callable[[str], Awaitable[list[TopicGroup]]]
    _master: Callable[[str, str], Awaitable[str]]

    async def read_queues(self, topic: str, broker: str) -> int | None:
        groups = await self.topic(topic)
        if not groups:
            return None
        group = next((g for g in groups if g.broker_name == broker), None)
        if group is None:
            raise GrpcStatusError(Code.BAD_REQUEST, f"broker group {broker!r} has no queue of topic {topic} "
                                  f"(its groups: {', '.join(sorted(g.broker_name for g in groups))})")
        return group.read_queue_nums if group.perm & PERM_READ else 0

    async def pull(self, group: str, topic: str, queue_id: int, offset: int, *, broker: str, max_nums: int,
                   sub: Subscription, poll_ms: int) -> PullAnswer:
        addr = await self._master(broker, topic)
        raw = await _call("pull", broker, self._inst.api.pull(
            addr, broker, group=group, topic=topic, queue_id=queue_id, offset=offset, max_nums=max_nums,
            sys_flag=pull_sys_flag(commit=False, suspend=poll_ms > 0), suspend_ms=max(poll_ms, 0),
            expression=sub.expression, expression_type=sub.expression_type))
        if raw.status is PullStatus.FOUND:
            try:
                msgs = tuple(decode_records(raw.body, broker=broker))
            except MessageDecodeError as exc:
                raise GrpcStatusError(Code.MESSAGE_CORRUPTED, str(exc)) from None
            return PullAnswer(Code.OK, msgs, raw.next_begin_offset)
        if raw.status is PullStatus.OFFSET_ILLEGAL:
            # Where the queue's messages are, as a broker's own endpoint answers (the remoting
            # answer's nextBeginOffset is RocketMQ's: 0 above a queue that starts at 0).
            moved = raw.min_offset if offset < raw.min_offset else raw.max_offset
            return PullAnswer(Code.ILLEGAL_OFFSET, (), moved)
        return PullAnswer(Code.MESSAGE_NOT_FOUND, (), max(raw.next_begin_offset, offset))

    async def commit_offset(self, group: str, topic: str, queue_id: int, offset: int, *, broker: str) -> None:
        addr = await self._master(broker, topic)
        await _call("offset update", broker, self._inst.api.update_consumer_offset(addr, group, topic, queue_id,
                                                                                   offset))

    async def committed_offset(self, group: str, topic: str, queue_id: int, *, broker: str) -> int:
        addr = await self._master(broker, topic)
        return await _call("offset query", broker, self._inst.api.query_consumer_offset(addr, group, topic, queue_id))

    async def queue_offset(self, topic: str, queue_id: int, policy: pb.QueryOffsetPolicy,
                           timestamp_ms: int, *, broker: str) -> int:
        addr = await self._master(broker, topic)
        api = self._inst.api
        if policy == pb.BEGINNING:
            return await _call("min offset", broker, api.min_offset(addr, topic, queue_id))
        if policy == pb.END:
            return await _call("max offset", broker, api.max_offset(addr, topic, queue_id))
        return await _call("offset search", broker, api.search_offset(addr, topic, queue_id, timestamp_ms))
