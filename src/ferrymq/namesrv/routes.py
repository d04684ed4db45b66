"""The name server's route registry (RocketMQ's RouteInfoManager), free of networking so it can be
tested with an injected clock."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..common.headers import PERM_READ, PERM_WRITE


@dataclass(slots=True)
class QueueData:
    broker_name: str
    read_queue_nums: int
    write_queue_nums: int
    perm: int
    topic_sys_flag: int = 0

    def to_json(self) -> dict[str, Any]:
        return {
            "brokerName": self.broker_name,
            "perm": self.perm,
            "readQueueNums": self.read_queue_nums,
            "topicSysFlag": self.topic_sys_flag,
            "writeQueueNums": self.write_queue_nums,
        }


@dataclass(slots=True)
class BrokerData:
    cluster: str
    broker_name: str
    broker_addrs: dict[int, str] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            # String keys: standard JSON, which every client parses (fastjson's bare 0 is not).
            "brokerAddrs": {str(k): v for k, v in sorted(self.broker_addrs.items())},
            "brokerName": self.broker_name,
            "cluster": self.cluster,
        }


@dataclass(slots=True)
class BrokerLive:
    last_update_ms: int
    data_version: dict[str, Any]
    ha_server_addr: str
    channel: object | None
    broker_id: int = 0


@dataclass(frozen=True, slots=True)
class RegisterResult:
    master_addr: str
    ha_server_addr: str


class RouteRegistry:
    def __init__(
        self,
        *,
        broker_expire_ms: int = 120_000,
        clock: Callable[[], int] = lambda: int(time.time() * 1000),
    ) -> None:
        self._lock = threading.RLock()
        self._clock = clock
        self.broker_expire_ms = broker_expire_ms
        self.topic_queues: dict[str, dict[str, QueueData]] = {}
        # Broker name -> its topics: what a broker's registration or removal touches is found
        # without scanning every topic.
        self.broker_topics: dict[str, set[str]] = {}
        self.brokers: dict[str, BrokerData] = {}
        self.clusters: dict[str, set[str]] = {}
        self.live: dict[str, BrokerLive] = {}
        # Broker names taken out of writes (WIPE_WRITE_PERM_OF_BROKER): their queues are
        # routed without PERM_WRITE until ADD_WRITE_PERM_OF_BROKER. Kept apart from the perms
        # the broker reports, so its periodic registration does not give writes back and
        # adding them back restores each topic's own perm (a read-only topic stays so).
        self.write_wiped: set[str] = set()

    def register_broker(
        self,
        *,
        cluster: str,
        broker_addr: str,
        broker_name: str,
        broker_id: int,
        ha_server_addr: str,
        topic_config: dict[str, Any],
        channel: object | None = None,
    ) -> RegisterResult:
        """topic_config is the TopicConfigSerializeWrapper JSON the broker sends."""
        with self._lock:
            self.clusters.setdefault(cluster, set()).add(broker_name)
            bd = self.brokers.get(broker_name)
            if bd is None:
                bd = self.brokers[broker_name] = BrokerData(cluster, broker_name)
            # One address per id: a broker that moved to a new address replaces the old one.
            for bid, addr in list(bd.broker_addrs.items()):
                if addr == broker_addr and bid != broker_id:
                    del bd.broker_addrs[bid]
            bd.broker_addrs[broker_id] = broker_addr
            version = topic_config.get("dataVersion") or {}
            if broker_id == 0:
                table = topic_config.get("topicConfigTable") or {}
                for name, cfg in table.items():
                    self._update_queue_data(broker_name, str(name), cfg)
                # A topic the master no longer reports has been deleted on that broker.
                for topic in self.broker_topics.get(broker_name, set()) - table.keys():
                    self._remove_queue_data(broker_name, topic)
            self.live[broker_addr] = BrokerLive(self._clock(), version, ha_server_addr, channel, broker_id)
            return self._result(bd, broker_id)

    def register_increment(
        self,
        *,
        broker_addr: str,
        broker_name: str,
        broker_id: int,
        ha_server_addr: str,
        base_version: dict[str, Any],
        topic_config: dict[str, Any],
        deleted: list[str],
        channel: object | None = None,
    ) -> RegisterResult | None:
        """Apply the topics changed since base_version (topic_config holds only those, and the
        new dataVersion). None, with nothing applied, when this registry does not hold the
        broker's table as of base_version: the broker must send the whole table."""
        with self._lock:
            live = self.live.get(broker_addr)
            bd = self.brokers.get(broker_name)
            if (live is None or bd is None or live.broker_id != broker_id
                    or bd.broker_addrs.get(broker_id) != broker_addr
                    or not _same_version(live.data_version, base_version)):
                return None
            if broker_id == 0:
                for name, cfg in (topic_config.get("topicConfigTable") or {}).items():
                    self._update_queue_data(broker_name, str(name), cfg)
                for topic in deleted:
                    self._remove_queue_data(broker_name, topic)
            version = topic_config.get("dataVersion") or {}
            self.live[broker_addr] = BrokerLive(self._clock(), version, ha_server_addr, channel, broker_id)
            return self._result(bd, broker_id)

    def query_data_version(self, broker_addr: str, version: dict[str, Any]) -> tuple[bool, dict[str, Any] | None]:
        """QUERY_DATA_VERSION (an Apache RocketMQ broker deciding whether to register whole):
        (changed, the version held). An unchanged broker counts as heard from."""
        with self._lock:
            live = self.live.get(broker_addr)
            if live is None:
                return True, None
            if not _same_version(live.data_version, version):
                return True, dict(live.data_version)
            live.last_update_ms = self._clock()
            return False, dict(live.data_version)

    def _result(self, bd: BrokerData, broker_id: int) -> RegisterResult:
        master = bd.broker_addrs.get(0, "") if broker_id != 0 else ""
        master_live = self.live.get(master) if master else None
        return RegisterResult(master, master_live.ha_server_addr if master_live else "")

    def _remove_queue_data(self, broker_name: str, topic: str) -> None:
        per_broker = self.topic_queues.get(topic)
        if per_broker is not None:
            per_broker.pop(broker_name, None)
            if not per_broker:
                del self.topic_queues[topic]
        topics = self.broker_topics.get(broker_name)
        if topics is not None:
            topics.discard(topic)
            if not topics:
                del self.broker_topics[broker_name]

    def wipe_write_perm(self, broker_name: str) -> int:
        """Take the broker's queues out of writes in every route; the number of its topics."""
        with self._lock:
            self.write_wiped.add(broker_name)
            return len(self.broker_topics.get(broker_name, ()))

    def add_write_perm(self, broker_name: str) -> int:
        """Undo wipe_write_perm; the number of the broker's topics."""
        with self._lock:
            self.write_wiped.discard(broker_name)
            return len(self.broker_topics.get(broker_name, ()))

    def delete_topic(self, topic: str) -> None:
        """Forget the topic on every broker (DELETE_TOPIC_IN_NAMESRV)."""
        with self._lock:
            for broker_name in list(self.topic_queues.get(topic, {})):
                self._remove_queue_data(broker_name, topic)

    def _update_queue_data(self, broker_name: str, topic: str, cfg: dict[str, Any]) -> None:
        qd = QueueData(
            broker_name=broker_name,
            read_queue_nums=int(cfg.get("readQueueNums", 0)),
            write_queue_nums=int(cfg.get("writeQueueNums", 0)),
            perm=int(cfg.get("perm", PERM_READ | PERM_WRITE)),
            topic_sys_flag=int(cfg.get("topicSysFlag", 0)),
        )
        self.topic_queues.setdefault(topic, {})[broker_name] = qd
        self.broker_topics.setdefault(broker_name, set()).add(topic)

    def unregister_broker(self, *, cluster: str, broker_addr: str, broker_name: str, broker_id: int) -> None:
        with self._lock:
            self.live.pop(broker_addr, None)
            bd = self.brokers.get(broker_name)
            if bd is not None:
                if bd.broker_addrs.get(broker_id) == broker_addr:
                    del bd.broker_addrs[broker_id]
                if not bd.broker_addrs:
                    del self.brokers[broker_name]
                    names = self.clusters.get(cluster)
                    if names is not None:
                        names.discard(broker_name)
                        if not names:
                            del self.clusters[cluster]
                    self._remove_broker_topics(broker_name)

    def _remove_broker_topics(self, broker_name: str) -> None:
        for topic in list(self.broker_topics.get(broker_name, ())):
            self._remove_queue_data(broker_name, topic)

    def _drop_addr(self, addr: str) -> None:
        self.live.pop(addr, None)
        for name, bd in list(self.brokers.items()):
            for bid, a in list(bd.broker_addrs.items()):
                if a == addr:
                    del bd.broker_addrs[bid]
                    if not bd.broker_addrs:
                        del self.brokers[name]
                        for names in self.clusters.values():
                            names.discard(name)
                        for c in [c for c, n in self.clusters.items() if not n]:
                            del self.clusters[c]
                        self._remove_broker_topics(name)

    def drop_master(self, broker_name: str, addr: str) -> bool:
        """Remove `addr` as the group's master (id 0), e.g. once the controller elected another;
        its other entries stay. True when it was listed."""
        with self._lock:
            bd = self.brokers.get(broker_name)
            if bd is None or bd.broker_addrs.get(0) != addr:
                return False
            if len(bd.broker_addrs) == 1:
                self._drop_addr(addr)
            else:
                del bd.broker_addrs[0]
                self.live.pop(addr, None)
            return True

    def on_channel_closed(self, channel: object) -> list[str]:
        with self._lock:
            gone = [addr for addr, live in self.live.items() if live.channel is channel]
            for addr in gone:
                self._drop_addr(addr)
            return gone

    def scan_not_active(self) -> list[str]:
        now = self._clock()
        with self._lock:
            gone = [a for a, live in self.live.items() if now - live.last_update_ms > self.broker_expire_ms]
            for addr in gone:
                self._drop_addr(addr)
            return gone

    def route(self, topic: str) -> dict[str, Any] | None:
        with self._lock:
            per_broker = self.topic_queues.get(topic)
            if not per_broker:
                return None
            brokers = [self.brokers[b].to_json() for b in sorted(per_broker) if b in self.brokers]
            if not brokers:
                return None
            return {
                "brokerDatas": brokers,
                "filterServerTable": {},
                "queueDatas": [self._routed(per_broker[b]) for b in sorted(per_broker)],
            }

    def _routed(self, qd: QueueData) -> dict[str, Any]:
        doc = qd.to_json()
        if qd.broker_name in self.write_wiped:
            doc["perm"] = qd.perm & ~PERM_WRITE
        return doc

    def cluster_info(self) -> dict[str, Any]:
        with self._lock:
            return {
                "brokerAddrTable": {n: bd.to_json() for n, bd in sorted(self.brokers.items())},
                "clusterAddrTable": {c: sorted(n) for c, n in sorted(self.clusters.items())},
            }

    def topic_list(self) -> list[str]:
        with self._lock:
            return sorted(self.topic_queues)


def _same_version(held: dict[str, Any], base: dict[str, Any]) -> bool:
    try:
        return (int(held["counter"]) == int(base["counter"])
                and int(held.get("timestamp", 0)) == int(base.get("timestamp", 0)))
    except (KeyError, TypeError, ValueError):
        return False
