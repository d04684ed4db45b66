"""The administration client's operator requests (mqadmin's topicRoute, topicClusterList,
wipeWritePerm/addWritePerm, getNamesrvConfig/updateNamesrvConfig, the KV config,
cleanUnusedTopic, electMaster) and the send round trip to every broker (checkMsgSendRT).
AsyncAdminClient inherits them."""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..common import jsonx
from ..common.addrs import split_addrs
from ..common.codes import CONTROLLER_LEADER_FIELD, RequestCode, ResponseCode
from ..common.errors import FerryMQError
from ..common.headers import fields
from ..common.javaprops import format_properties, parse_properties
from ..common.message import MessageQueue
from ..common.names import CLIENT_INNER_PRODUCER_GROUP, SELF_TEST_TOPIC
from .errors import BrokerError, NoRouteError, UnknownBrokerError, broker_error

if TYPE_CHECKING:
    from .api import MQClientAPI
    from .route import TopicRoute


@dataclass(frozen=True, slots=True)
class SendRoundTrip:
    """One probe of `cluster send-rt`: the queue it went to and how long its send took."""

    broker: str
    queue_id: int
    ok: bool
    rt_ms: float
    error: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {"broker": self.broker, "queue_id": self.queue_id, "ok": self.ok,
                "rt_ms": round(self.rt_ms, 3), "error": self.error}


@dataclass(frozen=True, slots=True)
class CleanedTopics:
    """What one broker's CLEAN_UNUSED_TOPIC deleted: the topics whose consume queues went."""

    broker: str
    broker_id: int
    addr: str
    topics: tuple[str, ...]

    def to_json(self) -> dict[str, Any]:
        return {"broker": self.broker, "broker_id": self.broker_id, "addr": self.addr, "topics": list(self.topics)}


@dataclass(frozen=True, slots=True)
class ElectedMaster:
    """The controller's answer to an election: the group's master, epoch and in-sync replicas."""

    broker: str
    master_id: int
    master_addr: str
    epoch: int
    sync_state_set: tuple[int, ...]
    controller: str

    def to_json(self) -> dict[str, Any]:
        return {"broker": self.broker, "master_id": self.master_id, "master_addr": self.master_addr,
                "epoch": self.epoch, "sync_state_set": list(self.sync_state_set), "controller": self.controller}


class NamesrvAdmin:
    if TYPE_CHECKING:
        namesrv: str

        @property
        def api(self) -> MQClientAPI: ...

        async def brokers(self) -> dict[str, str]: ...

        async def topic_route(self, topic: str, *, refresh: bool = False) -> TopicRoute: ...

    # --- routes as the name server keeps them -------------------------------------------------
    async def topic_route_data(self, topic: str) -> dict[str, Any]:
        """The topic's route as the name server sends it (mqadmin topicRoute): brokerDatas,
        queueDatas, and orderTopicConf when the name server adds one."""
        resp = await self.api.invoke_namesrv(RequestCode.GET_ROUTEINFO_BY_TOPIC, fields(topic=topic))
        if resp.code == ResponseCode.TOPIC_NOT_EXIST:
            raise NoRouteError(topic, self.namesrv)
        if resp.code != ResponseCode.SUCCESS:
            raise broker_error(self.namesrv, RequestCode.GET_ROUTEINFO_BY_TOPIC, resp.code, resp.remark)
        data: dict[str, Any] = jsonx.loads(resp.body or b"{}")
        return data

    async def topic_clusters(self, topic: str) -> list[str]:
        """The clusters whose brokers serve the topic (mqadmin topicClusterList)."""
        route = await self.topic_route(topic, refresh=True)
        info = await self.api.cluster_info()
        names = {q.broker_name for q in route.queue_datas}
        return sorted(str(c) for c, members in (info.get("clusterAddrTable") or {}).items()
                      if names & {str(m) for m in members or []})

    # --- write permission of a broker ---------------------------------------------------------
    async def wipe_write_perm(self, broker: str) -> dict[str, int]:
        """Take the broker's queues out of writes in every name server's routes: producers
        move to the other brokers as they refresh their routes, consumers still read it. Per
        name server, the number of the broker's topics."""
        return await self._write_perm(RequestCode.WIPE_WRITE_PERM_OF_BROKER, "wipeTopicCount", broker)

    async def add_write_perm(self, broker: str) -> dict[str, int]:
        """Undo wipe_write_perm."""
        return await self._write_perm(RequestCode.ADD_WRITE_PERM_OF_BROKER, "addTopicCount", broker)

    async def _write_perm(self, code: int, count_field: str, broker: str) -> dict[str, int]:
        known = await self.brokers()
        if broker not in known:
            # The name server would remember any name as wiped: a typo would go unnoticed.
            raise UnknownBrokerError(broker, self.namesrv, tuple(sorted(known)))
        out: dict[str, int] = {}
        for addr in self.api.namesrv_addrs:
            resp = await self.api.invoke_ok(addr, code, fields(brokerName=broker))
            out[addr] = int(resp.ext_fields.get(count_field) or 0)
        return out

    # --- name server configuration ------------------------------------------------------------
    async def namesrv_config(self) -> dict[str, dict[str, str]]:
        """Every name server's configuration, by address (GET_NAMESRV_CONFIG)."""
        out: dict[str, dict[str, str]] = {}
        for addr in self.api.namesrv_addrs:
            resp = await self.api.invoke_ok(addr, RequestCode.GET_NAMESRV_CONFIG)
            out[addr] = parse_properties((resp.body or b"").decode("utf-8"))
        return out

    async def update_namesrv_config(self, values: Mapping[str, str]) -> list[str]:
        """Change keys at runtime on every name server (UPDATE_NAMESRV_CONFIG); a name server
        refuses, with INVALID_PARAMETER naming it, a key it reads only at start."""
        body = format_properties(values).encode("utf-8")
        for addr in self.api.namesrv_addrs:
            await self.api.invoke_ok(addr, RequestCode.UPDATE_NAMESRV_CONFIG, body=body)
        return list(self.api.namesrv_addrs)

    # --- KV config ----------------------------------------------------------------------------
    async def kv_get(self, namespace: str, key: str) -> str | None:
        """The value, or None when the name server has no such key."""
        resp = await self.api.invoke_namesrv(RequestCode.GET_KV_CONFIG, fields(namespace=namespace, key=key))
        if resp.code == ResponseCode.QUERY_NOT_FOUND:
            return None
        if resp.code != ResponseCode.SUCCESS:
            raise broker_error(self.namesrv, RequestCode.GET_KV_CONFIG, resp.code, resp.remark)
        return resp.ext_fields.get("value", "")

    async def kv_list(self, namespace: str) -> dict[str, str]:
        """Every key of the namespace (GET_KVLIST_BY_NAMESPACE); empty when it has none."""
        resp = await self.api.invoke_namesrv(RequestCode.GET_KVLIST_BY_NAMESPACE, fields(namespace=namespace))
        if resp.code == ResponseCode.QUERY_NOT_FOUND:
            return {}
        if resp.code != ResponseCode.SUCCESS:
            raise broker_error(self.namesrv, RequestCode.GET_KVLIST_BY_NAMESPACE, resp.code, resp.remark)
        table = jsonx.loads(resp.body or b"{}").get("table") or {}
        return {str(k): str(v) for k, v in sorted(table.items())}

    async def kv_put(self, namespace: str, key: str, value: str) -> list[str]:
        """Set the key on every name server, as RocketMQ's createAndUpdateKvConfig does."""
        for addr in self.api.namesrv_addrs:
            await self.api.invoke_ok(addr, RequestCode.PUT_KV_CONFIG,
                                     fields(namespace=namespace, key=key, value=value))
        return list(self.api.namesrv_addrs)

    async def kv_delete(self, namespace: str, key: str) -> list[str]:
        for addr in self.api.namesrv_addrs:
            await self.api.invoke_ok(addr, RequestCode.DELETE_KV_CONFIG, fields(namespace=namespace, key=key))
        return list(self.api.namesrv_addrs)

    # --- brokers ------------------------------------------------------------------------------
    async def clean_unused_topics(
        self, *, broker: str | None = None, cluster: str | None = None
    ) -> list[CleanedTopics]:
        """Have every broker, slaves too (of `cluster`, or the group `broker`), delete the
        consume queues of topics it has no configuration for (CLEAN_UNUSED_TOPIC, mqadmin
        cleanUnusedTopic): a slave copies its master's topic deletions but not the deletion of
        their queues. Per broker, the topics cleaned (none listed by a broker that does not say,
        as Apache RocketMQ's)."""
        info = await self.api.cluster_info()
        groups = info.get("brokerAddrTable") or {}
        names = set((info.get("clusterAddrTable") or {}).get(cluster) or []) if cluster else set(groups)
        if broker is not None:
            names &= {broker}
            if not names:
                raise UnknownBrokerError(broker, self.namesrv, tuple(sorted(groups)))
        out: list[CleanedTopics] = []
        for name in sorted(names):
            for bid, addr in sorted((int(k), str(v)) for k, v in (groups[name].get("brokerAddrs") or {}).items()):
                resp = await self.api.invoke_ok(addr, RequestCode.CLEAN_UNUSED_TOPIC)
                doc = jsonx.loads(resp.body) if resp.body else {}
                out.append(CleanedTopics(str(name), bid, addr, tuple(str(t) for t in doc.get("topics") or [])))
        return out

    # --- controller mode ----------------------------------------------------------------------
    async def elect_master(self, broker: str, broker_id: int, *, controller: str | None = None) -> ElectedMaster:
        """Make replica `broker_id` the master of broker group `broker` (controller mode,
        mqadmin electMaster): the controller refuses a replica that is not alive or not in
        the sync state set. Asked of `controller` (';'-separated), by default of the name
        servers (run with --enable-controller); in quorum mode a follower names the leader,
        which is asked in turn."""
        addrs = split_addrs(controller) if controller else list(self.api.namesrv_addrs)
        info = await self.api.cluster_info()
        cluster = str(((info.get("brokerAddrTable") or {}).get(broker) or {}).get("cluster", ""))
        header = fields(clusterName=cluster, brokerName=broker, brokerId=broker_id, designateElect=True,
                        invokeTime=int(time.time() * 1000))
        unsupported: BrokerError | None = None
        for addr in addrs:
            resp = await self.api.invoke(addr, RequestCode.CONTROLLER_ELECT_MASTER, header)
            leader = resp.ext_fields.get(CONTROLLER_LEADER_FIELD)
            if resp.code == ResponseCode.CONTROLLER_NOT_LEADER and leader:
                addr = leader
                resp = await self.api.invoke(addr, RequestCode.CONTROLLER_ELECT_MASTER, header)
            if resp.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED:
                # A name server without a controller: another one may have it.
                unsupported = broker_error(addr, RequestCode.CONTROLLER_ELECT_MASTER, resp.code, resp.remark)
                continue
            if resp.code != ResponseCode.SUCCESS:
                raise broker_error(addr, RequestCode.CONTROLLER_ELECT_MASTER, resp.code, resp.remark)
            view = jsonx.loads(resp.body or b"{}")
            return ElectedMaster(broker, int(view.get("masterId", -1)), str(view.get("masterAddr", "")),
                                 int(view.get("epoch", 0)), tuple(int(i) for i in view.get("syncStateSet") or []),
                                 addr)
        assert unsupported is not None
        raise unsupported

    # --- send round trip ----------------------------------------------------------------------
    async def send_round_trips(
        self, topic: str = SELF_TEST_TOPIC, *, count: int = 1, size: int = 128
    ) -> list[SendRoundTrip]:
        """Send `count` probe messages of `size` bytes to the first write queue of each broker
        of `topic`, one at a time, timing each send (mqadmin checkMsgSendRT). Every broker
        serves SELF_TEST_TOPIC, which no application consumes. A failed send is a row with its
        error, the other brokers are still probed."""
        route = await self.topic_route(topic, refresh=True)
        firsts: dict[str, MessageQueue] = {}
        for mq in route.write_queues(topic):
            firsts.setdefault(mq.broker_name, mq)
        if not firsts:
            raise NoRouteError(topic, self.namesrv, "no broker takes writes for it")
        body = b"x" * size
        out: list[SendRoundTrip] = []
        for name, mq in sorted(firsts.items()):
            addr = route.brokers.get(name)
            for _ in range(count):
                start = time.perf_counter()
                error = None
                try:
                    if addr is None:
                        raise NoRouteError(topic, self.namesrv, f"broker {name} has no master")
                    resp = await self.api.send(addr, _probe_header(topic, mq.queue_id), body, batch=False,
                                               timeout=self.api.timeout)
                    if resp.code != ResponseCode.SUCCESS:
                        error = str(broker_error(addr, RequestCode.SEND_MESSAGE_V2, resp.code, resp.remark))
                except (FerryMQError, OSError) as exc:
                    error = str(exc)
                rt = (time.perf_counter() - start) * 1000
                out.append(SendRoundTrip(name, mq.queue_id, error is None, rt, error))
        return out


def _probe_header(topic: str, queue_id: int) -> dict[str, str]:
    return {
        "producerGroup": CLIENT_INNER_PRODUCER_GROUP,
        "topic": topic,
        "defaultTopic": "TBW102",
        "defaultTopicQueueNums": "1",
        "queueId": str(queue_id),
        "sysFlag": "0",
        "bornTimestamp": str(int(time.time() * 1000)),
        "flag": "0",
        "properties": "",
        "reconsumeTimes": "0",
        "unitMode": "false",
        "batch": "false",
    }
