"""Raw remoting requests for broker tests: every field spelled out as a client puts it on the
wire, so these tests pin the broker's protocol independently of ferrymq's own clients."""

from __future__ import annotations

import time

from ferrymq.common import jsonx
from ferrymq.common.codes import RequestCode, ResponseCode
from ferrymq.common.message import MessageExt
from ferrymq.common.props import properties_to_string
from ferrymq.common.record import decode_records
from ferrymq.remoting import ClientConfig, RemotingClient, RemotingCommand

PULL_FLAG_COMMIT = 0x1
PULL_FLAG_SUSPEND = 0x2
PULL_FLAG_SUBSCRIPTION = 0x4


class Wire:
    def __init__(self, namesrv: str, broker: str) -> None:
        self.namesrv = namesrv
        self.broker = broker
        self.client = RemotingClient(ClientConfig(connect_timeout=3.0))

    async def close(self) -> None:
        await self.client.close()

    async def call(self, code: int, body: bytes | None = None, *, addr: str | None = None,
                   timeout: float = 5.0, **ext: object) -> RemotingCommand:
        fields = {k: str(v).lower() if isinstance(v, bool) else str(v) for k, v in ext.items()}
        req = RemotingCommand.request(code, ext_fields=fields, body=body)
        return await self.client.invoke(addr or self.broker, req, timeout)

    async def create_topic(self, topic: str, queues: int = 4) -> None:
        resp = await self.call(RequestCode.UPDATE_AND_CREATE_TOPIC, topic=topic, defaultTopic="TBW102",
                               readQueueNums=queues, writeQueueNums=queues, perm=6, topicFilterType="SINGLE_TAG",
                               topicSysFlag=0, order=False)
        assert resp.code == ResponseCode.SUCCESS, resp.remark

    async def send(self, topic: str, body: bytes, *, queue_id: int = 0, tags: str | None = None,
                   keys: str | None = None, props: dict[str, str] | None = None,
                   reconsume: int = 0, max_reconsume: int | None = None) -> RemotingCommand:
        p = dict(props or {})
        if tags is not None:
            p["TAGS"] = tags
        if keys is not None:
            p["KEYS"] = keys
        ext: dict[str, object] = dict(producerGroup="wire-producer", topic=topic, defaultTopic="TBW102",
                                      defaultTopicQueueNums=4, queueId=queue_id, sysFlag=0,
                                      bornTimestamp=int(time.time() * 1000), flag=0,
                                      properties=properties_to_string(p), reconsumeTimes=reconsume,
                                      unitMode=False, batch=False)
        if max_reconsume is not None:
            ext["maxReconsumeTimes"] = max_reconsume
        return await self.call(RequestCode.SEND_MESSAGE, body, **ext)

    async def pull(self, topic: str, queue_id: int, offset: int, *, group: str = "wire-group",
                   max_nums: int = 32, expression: str = "*", suspend_ms: int = 0,
                   commit_offset: int = -1, timeout: float = 5.0,
                   expression_type: str = "TAG") -> RemotingCommand:
        flag = PULL_FLAG_SUBSCRIPTION | (PULL_FLAG_SUSPEND if suspend_ms else 0)
        if commit_offset >= 0:
            flag |= PULL_FLAG_COMMIT
        return await self.call(RequestCode.PULL_MESSAGE, consumerGroup=group, topic=topic, queueId=queue_id,
                               queueOffset=offset, maxMsgNums=max_nums, sysFlag=flag, commitOffset=commit_offset,
                               suspendTimeoutMillis=suspend_ms, subscription=expression, subVersion=0,
                               expressionType=expression_type, timeout=timeout + suspend_ms / 1000)

    async def pull_all(self, topic: str, queue_id: int, offset: int = 0, **kw: object) -> list[MessageExt]:
        out: list[MessageExt] = []
        while True:
            resp = await self.pull(topic, queue_id, offset, **kw)  # type: ignore[arg-type]
            if resp.code != ResponseCode.SUCCESS:
                return out
            out.extend(decode_records(resp.body or b""))
            offset = int(resp.ext_fields["nextBeginOffset"])

    async def route(self, topic: str) -> dict[str, object] | None:
        resp = await self.call(RequestCode.GET_ROUTEINFO_BY_TOPIC, addr=self.namesrv, topic=topic)
        if resp.code != ResponseCode.SUCCESS:
            return None
        data: dict[str, object] = jsonx.loads(resp.body or b"{}")
        return data
