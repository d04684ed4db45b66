"""One async method per remoting request the clients make (RocketMQ's MQClientAPIImpl):
headers in, typed values out, non-success codes turned into BrokerError. Nothing here keeps
state beyond which name server answered last."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterable, Mapping
from typing import Any

from ..common import jsonx
from ..common.addrs import split_addrs
from ..common.codes import LanguageCode, RequestCode, ResponseCode
from ..common.headers import (
    PERM_READ,
    PERM_WRITE,
    PULL_FLAG_COMMIT_OFFSET,
    PULL_FLAG_SUBSCRIPTION,
    PULL_FLAG_SUSPEND,
    SET_ZERO_IF_NOT_FOUND,
    fields,
    send_header_to_v2,
)
from ..common.javaprops import format_properties, parse_properties
from ..common.jsonx import FrozenKey
from ..common.message import MessageQueue
from ..common.names import AUTO_CREATE_TOPIC_KEY_TOPIC, CLIENT_INNER_PRODUCER_GROUP, retry_topic
from ..common.progress import WITH_ACK_RANGES, Ranges, decode_ranges
from ..remoting import RemotingClient, RemotingCommand, RemotingError
from .errors import broker_error
from .results import PullStatus, RawPullResult
from .route import TopicRoute

_PULL_STATUS: dict[int, PullStatus] = {
    ResponseCode.SUCCESS: PullStatus.FOUND,
    ResponseCode.PULL_NOT_FOUND: PullStatus.NO_NEW_MSG,
    ResponseCode.PULL_RETRY_IMMEDIATELY: PullStatus.NO_MATCHED_MSG,
    ResponseCode.PULL_OFFSET_MOVED: PullStatus.OFFSET_ILLEGAL,
}

# Headroom over a long poll's suspend time before the client gives up on the response.
LONG_POLL_MARGIN = 15.0


def mq_from_key(key: Any) -> MessageQueue:
    """A MessageQueue written as a JSON object key (fastjson style) or a plain dict."""
    data = key.as_dict() if isinstance(key, FrozenKey) else dict(key)
    return MessageQueue(str(data["topic"]), str(data["brokerName"]), int(data["queueId"]))


def mq_json(mq: MessageQueue) -> dict[str, Any]:
    return {"brokerName": mq.broker_name, "queueId": mq.queue_id, "topic": mq.topic}


class MQClientAPI:
    def __init__(self, remoting: RemotingClient, namesrv: str, *, timeout: float = 3.0) -> None:
        self.remoting = remoting
        self.namesrv_addrs = split_addrs(namesrv)
        if not self.namesrv_addrs:
            raise ValueError(f"no name server address in {namesrv!r}")
        self.namesrv = namesrv
        self.timeout = timeout
        self._ns_index = 0

    # --- plumbing ----------------------------------------------------------------------------
    @staticmethod
    def command(
        code: int, ext: Mapping[str, str] | None = None, body: bytes | None = None
    ) -> RemotingCommand:
        cmd = RemotingCommand.request(code, ext_fields=dict(ext) if ext else None, body=body)
        with contextlib.suppress(AttributeError, TypeError):
            cmd.language = LanguageCode.PYTHON
        return cmd

    async def invoke(
        self,
        addr: str,
        code: int,
        ext: Mapping[str, str] | None = None,
        body: bytes | None = None,
        *,
        timeout: float | None = None,
    ) -> RemotingCommand:
        return await self.remoting.invoke(
            addr, self.command(code, ext, body), timeout or self.timeout
        )

    async def invoke_ok(
        self,
        addr: str,
        code: int,
        ext: Mapping[str, str] | None = None,
        body: bytes | None = None,
        *,
        timeout: float | None = None,
        ok: Iterable[int] = (ResponseCode.SUCCESS,),
    ) -> RemotingCommand:
        resp = await self.invoke(addr, code, ext, body, timeout=timeout)
        if resp.code not in tuple(ok):
            raise broker_error(addr, code, resp.code, resp.remark)
        return resp

    async def invoke_oneway(
        self, addr: str, code: int, ext: Mapping[str, str] | None = None, body: bytes | None = None
    ) -> None:
        await self.remoting.invoke_oneway(addr, self.command(code, ext, body))

    async def invoke_namesrv(
        self, code: int, ext: Mapping[str, str] | None = None, body: bytes | None = None
    ) -> RemotingCommand:
        """Ask the name servers in turn, starting with the one that answered last."""
        last: Exception | None = None
        n = len(self.namesrv_addrs)
        for i in range(n):
            idx = (self._ns_index + i) % n
            try:
                resp = await self.invoke(self.namesrv_addrs[idx], code, ext, body)
            except RemotingError as exc:
                last = exc
                continue
            self._ns_index = idx
            return resp
        assert last is not None
        raise last

    # --- name server -------------------------------------------------------------------------
    async def get_route(self, topic: str) -> TopicRoute | None:
        resp = await self.invoke_namesrv(RequestCode.GET_ROUTEINFO_BY_TOPIC, fields(topic=topic))
        if resp.code == ResponseCode.TOPIC_NOT_EXIST:
            return None
        if resp.code != ResponseCode.SUCCESS:
            raise broker_error(
                self.namesrv, RequestCode.GET_ROUTEINFO_BY_TOPIC, resp.code, resp.remark
            )
        return TopicRoute.from_json(topic, jsonx.loads(resp.body or b"{}"))

    async def cluster_info(self) -> dict[str, Any]:
        resp = await self.invoke_namesrv(RequestCode.GET_BROKER_CLUSTER_INFO)
        if resp.code != ResponseCode.SUCCESS:
            raise broker_error(
                self.namesrv, RequestCode.GET_BROKER_CLUSTER_INFO, resp.code, resp.remark
            )
        data: dict[str, Any] = jsonx.loads(resp.body or b"{}")
        return data

    async def topic_list(self) -> list[str]:
        resp = await self.invoke_namesrv(RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER)
        if resp.code != ResponseCode.SUCCESS:
            raise broker_error(
                self.namesrv, RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER, resp.code, resp.remark
            )
        data = jsonx.loads(resp.body or b"{}")
        return sorted(str(t) for t in data.get("topicList") or [])

    # --- offsets -----------------------------------------------------------------------------
    async def _offset_request(self, addr: str, code: int, **values: object) -> int:
        resp = await self.invoke_ok(addr, code, fields(**values))
        return int(resp.ext_fields.get("offset", "0"))

    async def max_offset(self, addr: str, topic: str, queue_id: int) -> int:
        return await self._offset_request(
            addr, RequestCode.GET_MAX_OFFSET, topic=topic, queueId=queue_id
        )

    async def min_offset(self, addr: str, topic: str, queue_id: int) -> int:
        return await self._offset_request(
            addr, RequestCode.GET_MIN_OFFSET, topic=topic, queueId=queue_id
        )

    async def search_offset(self, addr: str, topic: str, queue_id: int, timestamp_ms: int) -> int:
        return await self._offset_request(
            addr,
            RequestCode.SEARCH_OFFSET_BY_TIMESTAMP,
            topic=topic,
            queueId=queue_id,
            timestamp=timestamp_ms,
        )

    async def query_consumer_progress(
        self, addr: str, group: str, topic: str, queue_id: int
    ) -> tuple[int, Ranges]:
        """The committed offset (-1: none) and, from a ferrymq broker, the acknowledged
        [start, end) ranges above it (QUERY_CONSUMER_OFFSET asked withAckRanges; an Apache
        RocketMQ broker ignores the field and sends no ranges)."""
        resp = await self.invoke_ok(
            addr,
            RequestCode.QUERY_CONSUMER_OFFSET,
            {
                **fields(consumerGroup=group, topic=topic, queueId=queue_id),
                WITH_ACK_RANGES: "true",
                SET_ZERO_IF_NOT_FOUND: "false",
            },
            ok=(ResponseCode.SUCCESS, ResponseCode.QUERY_NOT_FOUND),
        )
        if resp.code == ResponseCode.QUERY_NOT_FOUND:
            return -1, []
        offset = int(resp.ext_fields.get("offset", "-1"))
        return offset, decode_ranges(resp.body, offset) if resp.body else []

    async def query_consumer_offset(self, addr: str, group: str, topic: str, queue_id: int) -> int:
        """-1 when the group never committed on the queue (the broker's QUERY_NOT_FOUND)."""
        resp = await self.invoke_ok(
            addr,
            RequestCode.QUERY_CONSUMER_OFFSET,
            {**fields(consumerGroup=group, topic=topic, queueId=queue_id), SET_ZERO_IF_NOT_FOUND: "false"},
            ok=(ResponseCode.SUCCESS, ResponseCode.QUERY_NOT_FOUND),
        )
        if resp.code == ResponseCode.QUERY_NOT_FOUND:
            return -1
        return int(resp.ext_fields.get("offset", "-1"))

    async def update_consumer_offset(
        self, addr: str, group: str, topic: str, queue_id: int, offset: int
    ) -> None:
        await self.invoke_ok(
            addr,
            RequestCode.UPDATE_CONSUMER_OFFSET,
            fields(consumerGroup=group, topic=topic, queueId=queue_id, commitOffset=offset),
        )

    async def update_ack_ranges(
        self,
        addr: str,
        group: str,
        topic: str,
        queue_id: int,
        offset: int,
        ranges: list[tuple[int, int]],
    ) -> bool:
        """ferrymq extension; False when the broker does not know the request (Apache RocketMQ)."""
        resp = await self.invoke(
            addr,
            RequestCode.UPDATE_CONSUMER_ACK_RANGES,
            fields(consumerGroup=group, topic=topic, queueId=queue_id, commitOffset=offset),
            body=jsonx.dumps_bytes([[a, b] for a, b in ranges]),
        )
        if resp.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED:
            return False
        if resp.code != ResponseCode.SUCCESS:
            raise broker_error(addr, RequestCode.UPDATE_CONSUMER_ACK_RANGES, resp.code, resp.remark)
        return True

    # --- messages ----------------------------------------------------------------------------
    async def send(
        self, addr: str, header: Mapping[str, str], body: bytes, *, batch: bool, timeout: float
    ) -> RemotingCommand:
        """SEND_MESSAGE_V2 (or SEND_BATCH_MESSAGE) with the one-letter header names. The caller
        interprets the response code: some codes are worth a retry on another broker."""
        code = RequestCode.SEND_BATCH_MESSAGE if batch else RequestCode.SEND_MESSAGE_V2
        return await self.invoke(addr, code, send_header_to_v2(header), body, timeout=timeout)

    async def send_oneway(self, addr: str, header: Mapping[str, str], body: bytes) -> None:
        await self.invoke_oneway(addr, RequestCode.SEND_MESSAGE_V2, send_header_to_v2(header), body)

    async def pull(
        self,
        addr: str,
        broker: str,
        *,
        group: str,
        topic: str,
        queue_id: int,
        offset: int,
        max_nums: int,
        sys_flag: int,
        commit_offset: int = 0,
        suspend_ms: int = 0,
        expression: str = "*",
        expression_type: str = "TAG",
        sub_version: int = 0,
        timeout: float | None = None,
    ) -> RawPullResult:
        ext = pull_fields(group=group, topic=topic, queue_id=queue_id, offset=offset,
                          max_nums=max_nums, sys_flag=sys_flag, commit_offset=commit_offset,
                          suspend_ms=suspend_ms, expression=expression,
                          expression_type=expression_type, sub_version=sub_version)
        if timeout is None:
            timeout = self.timeout + (suspend_ms / 1000 + LONG_POLL_MARGIN if suspend_ms else 0)
        resp = await self.invoke(addr, RequestCode.PULL_MESSAGE, ext, timeout=timeout)
        return pull_answer(addr, broker, offset, resp)

    async def consumer_send_back(
        self,
        addr: str,
        *,
        commit_log_offset: int,
        group: str,
        delay_level: int,
        origin_msg_id: str,
        origin_topic: str,
        max_reconsume_times: int | None,
        timeout: float | None = None,
    ) -> None:
        """max_reconsume_times None: the header is left out and the group's retryMaxTimes on
        the broker decides whether the message goes to %DLQ%<group>."""
        await self.invoke_ok(
            addr,
            RequestCode.CONSUMER_SEND_MSG_BACK,
            fields(
                offset=commit_log_offset,
                group=group,
                delayLevel=delay_level,
                originMsgId=origin_msg_id,
                originTopic=origin_topic,
                unitMode=False,
                maxReconsumeTimes=max_reconsume_times,
            ),
            timeout=timeout,
        )

    async def send_to_retry_topic(
        self,
        addr: str,
        *,
        group: str,
        body: bytes,
        flag: int,
        properties: str,
        reconsume_times: int,
        max_reconsume_times: int,
        timeout: float | None = None,
    ) -> None:
        """SEND_MESSAGE_V2 into %RETRY%<group> with the counters in the header (RocketMQ's
        inner-producer send, CLIENT_INNER_PRODUCER): the broker stores the message in
        %DLQ%<group> when reconsume_times has reached max_reconsume_times, carrying the count
        the client gave, not the stored copy's. A stored answer that only missed its flush or
        slave is a success, as it is for a producer."""
        header = {
            "producerGroup": CLIENT_INNER_PRODUCER_GROUP,
            "topic": retry_topic(group),
            "defaultTopic": AUTO_CREATE_TOPIC_KEY_TOPIC,
            "defaultTopicQueueNums": "4",
            "queueId": "0",
            "sysFlag": "0",
            "bornTimestamp": str(int(time.time() * 1000)),
            "flag": str(flag),
            "properties": properties,
            "reconsumeTimes": str(reconsume_times),
            "unitMode": "false",
            "batch": "false",
            "maxReconsumeTimes": str(max_reconsume_times),
        }
        await self.invoke_ok(
            addr,
            RequestCode.SEND_MESSAGE_V2,
            send_header_to_v2(header),
            body,
            timeout=timeout,
            ok=(ResponseCode.SUCCESS, ResponseCode.FLUSH_DISK_TIMEOUT,
                ResponseCode.FLUSH_SLAVE_TIMEOUT, ResponseCode.SLAVE_NOT_AVAILABLE),
        )

    async def view_message(self, addr: str, commit_log_offset: int) -> bytes:
        resp = await self.invoke_ok(
            addr, RequestCode.VIEW_MESSAGE_BY_ID, fields(offset=commit_log_offset)
        )
        return resp.body or b""

    async def query_message(
        self,
        addr: str,
        topic: str,
        key: str,
        *,
        max_num: int = 32,
        unique: bool = False,
        begin_ms: int = 0,
        end_ms: int = 2**63 - 1,
    ) -> bytes:
        ext = fields(
            topic=topic, key=key, maxNum=max_num, beginTimestamp=begin_ms, endTimestamp=end_ms
        )
        if unique:
            ext["_UNIQUE_KEY_QUERY"] = "true"
        resp = await self.invoke_ok(
            addr,
            RequestCode.QUERY_MESSAGE,
            ext,
            ok=(ResponseCode.SUCCESS, ResponseCode.QUERY_NOT_FOUND),
        )
        return (resp.body or b"") if resp.code == ResponseCode.SUCCESS else b""

    # --- clients -----------------------------------------------------------------------------
    async def heartbeat(self, addr: str, data: Mapping[str, Any]) -> None:
        await self.invoke_ok(addr, RequestCode.HEART_BEAT, body=jsonx.dumps_bytes(dict(data)))

    async def unregister_client(
        self,
        addr: str,
        client_id: str,
        *,
        producer_group: str | None = None,
        consumer_group: str | None = None,
        timeout: float | None = None,
    ) -> None:
        await self.invoke_ok(
            addr,
            RequestCode.UNREGISTER_CLIENT,
            fields(clientID=client_id, producerGroup=producer_group, consumerGroup=consumer_group),
            timeout=timeout,
        )

    async def consumer_ids(self, addr: str, group: str) -> list[str]:
        resp = await self.invoke(
            addr, RequestCode.GET_CONSUMER_LIST_BY_GROUP, fields(consumerGroup=group)
        )
        if resp.code != ResponseCode.SUCCESS:
            # RocketMQ answers SYSTEM_ERROR for a group with no live member.
            return []
        data = jsonx.loads(resp.body or b"{}")
        return sorted(str(c) for c in data.get("consumerIdList") or [])

    async def lock_batch(
        self, addr: str, group: str, client_id: str, mqs: Iterable[MessageQueue]
    ) -> set[MessageQueue]:
        body = {"clientId": client_id, "consumerGroup": group, "mqSet": [mq_json(m) for m in mqs]}
        resp = await self.invoke_ok(addr, RequestCode.LOCK_BATCH_MQ, body=jsonx.dumps_bytes(body))
        data = jsonx.loads(resp.body or b"{}")
        return {mq_from_key(m) for m in data.get("lockOKMQSet") or []}

    async def unlock_batch(
        self, addr: str, group: str, client_id: str, mqs: Iterable[MessageQueue]
    ) -> None:
        body = {"clientId": client_id, "consumerGroup": group, "mqSet": [mq_json(m) for m in mqs]}
        await self.invoke_ok(addr, RequestCode.UNLOCK_BATCH_MQ, body=jsonx.dumps_bytes(body))

    # --- administration ----------------------------------------------------------------------
    async def create_topic(
        self,
        addr: str,
        topic: str,
        *,
        read_queue_nums: int,
        write_queue_nums: int,
        perm: int = PERM_READ | PERM_WRITE,
        order: bool = False,
        topic_sys_flag: int = 0,
        force: bool = False,
        attributes: str | None = None,
    ) -> None:
        """force: a ferrymq broker lowers the read queues even where that leaves messages no
        group has consumed (without it, it refuses). attributes: RocketMQ's changes,
        "+message.type=FIFO" (a broker keeps the attributes a request does not change)."""
        await self.invoke_ok(
            addr,
            RequestCode.UPDATE_AND_CREATE_TOPIC,
            fields(
                topic=topic,
                defaultTopic="TBW102",
                readQueueNums=read_queue_nums,
                writeQueueNums=write_queue_nums,
                perm=perm,
                topicFilterType="SINGLE_TAG",
                topicSysFlag=topic_sys_flag,
                order=order,
                force=True if force else None,
                attributes=attributes or None,
            ),
        )

    async def topic_config(self, addr: str, topic: str) -> dict[str, Any] | None:
        """GET_TOPIC_CONFIG: the broker's config of the topic (attributes included); None
        when the broker has no such topic, or does not know the request (RocketMQ 4)."""
        resp = await self.invoke_ok(addr, RequestCode.GET_TOPIC_CONFIG, fields(topic=topic),
                                    ok=(ResponseCode.SUCCESS, ResponseCode.TOPIC_NOT_EXIST,
                                        ResponseCode.REQUEST_CODE_NOT_SUPPORTED))
        if resp.code != ResponseCode.SUCCESS:
            return None
        data: dict[str, Any] = jsonx.loads(resp.body or b"{}")
        return data

    async def topic_stats(self, addr: str, topic: str) -> dict[Any, Any] | None:
        resp = await self.invoke_ok(
            addr,
            RequestCode.GET_TOPIC_STATS_INFO,
            fields(topic=topic),
            ok=(ResponseCode.SUCCESS, ResponseCode.TOPIC_NOT_EXIST),
        )
        if resp.code == ResponseCode.TOPIC_NOT_EXIST:
            return None
        data: dict[Any, Any] = jsonx.loads(resp.body or b"{}").get("offsetTable") or {}
        return data

    async def consume_stats(self, addr: str, group: str, topic: str | None) -> dict[str, Any]:
        resp = await self.invoke_ok(
            addr, RequestCode.GET_CONSUME_STATS, fields(consumerGroup=group, topic=topic or None)
        )
        data: dict[str, Any] = jsonx.loads(resp.body or b"{}")
        return data

    async def reset_offset(
        self, addr: str, group: str, topic: str, timestamp_ms: int, *, force: bool = True
    ) -> dict[Any, Any]:
        resp = await self.invoke_ok(
            addr,
            RequestCode.INVOKE_BROKER_TO_RESET_OFFSET,
            fields(topic=topic, group=group, timestamp=timestamp_ms, isForce=force),
        )
        data: dict[Any, Any] = jsonx.loads(resp.body or b"{}").get("offsetTable") or {}
        return data

    async def topic_consumed_by(self, addr: str, topic: str) -> list[str]:
        """Groups that consume or committed on `topic` on this broker (mqadmin topicStatus)."""
        resp = await self.invoke_ok(addr, RequestCode.QUERY_TOPIC_CONSUME_BY_WHO, fields(topic=topic))
        return [str(g) for g in jsonx.loads(resp.body or b"{}").get("groupList") or []]

    async def all_consumer_offsets(self, addr: str) -> dict[str, Any]:
        """The broker's committed offsets, keyed `topic@group` (GET_ALL_CONSUMER_OFFSET)."""
        resp = await self.invoke_ok(addr, RequestCode.GET_ALL_CONSUMER_OFFSET)
        data: dict[str, Any] = jsonx.loads(resp.body or b"{}").get("offsetTable") or {}
        return data

    async def consumer_connections(self, addr: str, group: str) -> dict[str, Any] | None:
        resp = await self.invoke_ok(
            addr,
            RequestCode.GET_CONSUMER_CONNECTION_LIST,
            fields(consumerGroup=group),
            ok=(ResponseCode.SUCCESS, ResponseCode.CONSUMER_NOT_ONLINE),
        )
        if resp.code != ResponseCode.SUCCESS:
            return None
        data: dict[str, Any] = jsonx.loads(resp.body or b"{}")
        return data


    async def delete_topic_in_broker(self, addr: str, topic: str) -> None:
        await self.invoke_ok(addr, RequestCode.DELETE_TOPIC_IN_BROKER, fields(topic=topic))

    async def delete_topic_in_namesrvs(self, topic: str) -> None:
        """Every name server forgets the topic (RocketMQ asks each one, not the first)."""
        for addr in self.namesrv_addrs:
            await self.invoke_ok(addr, RequestCode.DELETE_TOPIC_IN_NAMESRV, fields(topic=topic))

    async def broker_runtime_info(self, addr: str) -> dict[str, str]:
        resp = await self.invoke_ok(addr, RequestCode.GET_BROKER_RUNTIME_INFO)
        table = jsonx.loads(resp.body or b"{}").get("table") or {}
        return {str(k): str(v) for k, v in table.items()}

    async def broker_config(self, addr: str) -> dict[str, str]:
        """The broker's configuration as RocketMQ sends it: `key=value` lines (camelCase)."""
        resp = await self.invoke_ok(addr, RequestCode.GET_BROKER_CONFIG)
        return parse_properties((resp.body or b"").decode("utf-8"))

    async def update_broker_config(self, addr: str, values: Mapping[str, str]) -> None:
        await self.invoke_ok(
            addr, RequestCode.UPDATE_BROKER_CONFIG, body=format_properties(values).encode("utf-8")
        )

    async def store_damage(self, addr: str) -> bytes:
        resp = await self.invoke_ok(addr, RequestCode.QUERY_STORE_DAMAGE)
        return resp.body or b""

    async def message_trace(self, addr: str, msg_id: str) -> bytes:
        resp = await self.invoke_ok(addr, RequestCode.QUERY_MESSAGE_TRACE, fields(msgId=msg_id))
        return resp.body or b""

    async def skip_store_range(
        self, addr: str, topic: str, queue_id: int, from_offset: int, to_offset: int
    ) -> None:
        await self.invoke_ok(
            addr,
            RequestCode.SKIP_STORE_RANGE,
            fields(topic=topic, queueId=queue_id, fromOffset=from_offset, toOffset=to_offset),
        )


def pull_fields(*, group: str, topic: str, queue_id: int, offset: int, max_nums: int,
                sys_flag: int, commit_offset: int = 0, suspend_ms: int = 0,
                expression: str = "*", expression_type: str = "TAG",
                sub_version: int = 0) -> dict[str, str]:
    """A PULL_MESSAGE request's extFields (PullMessageRequestHeader)."""
    return fields(
        consumerGroup=group,
        topic=topic,
        queueId=queue_id,
        queueOffset=offset,
        maxMsgNums=max_nums,
        sysFlag=sys_flag,
        commitOffset=commit_offset,
        suspendTimeoutMillis=suspend_ms,
        subscription=expression or "*",
        subVersion=sub_version,
        expressionType=expression_type,
    )


def pull_answer(addr: str, broker: str, offset: int, resp: RemotingCommand) -> RawPullResult:
    """A PULL_MESSAGE response as a result (the body left encoded), or its BrokerError."""
    status = _PULL_STATUS.get(resp.code)  # IntEnum keys hash like the plain ints
    if status is None:
        raise broker_error(addr, RequestCode.PULL_MESSAGE, resp.code, resp.remark)
    e = resp.ext_fields
    return RawPullResult(
        status=status,
        body=(resp.body or b"") if status == PullStatus.FOUND else b"",
        next_begin_offset=int(e.get("nextBeginOffset", offset)),
        min_offset=int(e.get("minOffset", 0)),
        max_offset=int(e.get("maxOffset", 0)),
        broker=broker,
        suggest_which_broker_id=int(e.get("suggestWhichBrokerId", 0)),
    )


def pull_sys_flag(*, commit: bool, suspend: bool, subscription: bool = True) -> int:
    flag = 0
    if commit:
        flag |= PULL_FLAG_COMMIT_OFFSET
    if suspend:
        flag |= PULL_FLAG_SUSPEND
    if subscription:
        flag |= PULL_FLAG_SUBSCRIPTION
    return flag
