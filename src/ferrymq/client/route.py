"""Topic routes as the name server returns them (RocketMQ's TopicRouteData), and the queue
lists derived from them: writable queues for producers, readable queues for consumers."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ..common.headers import PERM_READ, PERM_WRITE
from ..common.message import MessageQueue
from ..common.names import MASTER_ID


@dataclass(frozen=True, slots=True)
class QueueData:
    broker_name: str
    read_queue_nums: int
    write_queue_nums: int
    perm: int
    topic_sys_flag: int = 0

    @property
    def readable(self) -> bool:
        return bool(self.perm & PERM_READ)

    @property
    def writable(self) -> bool:
        return bool(self.perm & PERM_WRITE)


def read_addr(addrs: Mapping[int, str], suggested: int) -> str | None:
    """Where to pull a broker group from (RocketMQ's PullAPIWrapper): the broker id the last
    pull answer suggested when the route lists it, else the master, else any slave."""
    return (
        addrs.get(suggested)
        or addrs.get(MASTER_ID)
        or next((a for _, a in sorted(addrs.items())), None)
    )


@dataclass(frozen=True, slots=True)
class BrokerData:
    cluster: str
    broker_name: str
    broker_addrs: Mapping[int, str] = field(default_factory=dict)

    @property
    def master_addr(self) -> str | None:
        return self.broker_addrs.get(MASTER_ID)

    def any_addr(self) -> str | None:
        """The master, else any slave (reads are served by slaves when the master is down)."""
        return read_addr(self.broker_addrs, MASTER_ID)


@dataclass(frozen=True, slots=True)
class TopicRoute:
    topic: str
    queue_datas: tuple[QueueData, ...]
    broker_datas: tuple[BrokerData, ...]

    @classmethod
    def from_json(cls, topic: str, data: Mapping[str, Any]) -> TopicRoute:
        queues = tuple(
            sorted(
                (
                    QueueData(
                        broker_name=str(q["brokerName"]),
                        read_queue_nums=int(q.get("readQueueNums", 0)),
                        write_queue_nums=int(q.get("writeQueueNums", 0)),
                        perm=int(q.get("perm", PERM_READ | PERM_WRITE)),
                        topic_sys_flag=int(q.get("topicSysFlag", 0)),
                    )
                    for q in data.get("queueDatas") or []
                ),
                key=lambda q: q.broker_name,
            )
        )
        brokers = tuple(
            sorted(
                (
                    BrokerData(
                        cluster=str(b.get("cluster", "")),
                        broker_name=str(b["brokerName"]),
                        # fastjson writes the id keys bare ({0:"addr"}); jsonx gives ints or strs.
                        broker_addrs={
                            int(k): str(v) for k, v in (b.get("brokerAddrs") or {}).items()
                        },
                    )
                    for b in data.get("brokerDatas") or []
                ),
                key=lambda b: b.broker_name,
            )
        )
        return cls(topic, queues, brokers)

    @property
    def brokers(self) -> dict[str, str]:
        """broker name -> master address (brokers without a live master are left out)."""
        return {b.broker_name: b.master_addr for b in self.broker_datas if b.master_addr}

    def broker_data(self, broker_name: str) -> BrokerData | None:
        for b in self.broker_datas:
            if b.broker_name == broker_name:
                return b
        return None

    def write_queues(self, topic: str | None = None) -> list[MessageQueue]:
        """Queues a producer may send to; `topic` renames them (routes borrowed from TBW102)."""
        name = topic or self.topic
        masters = self.brokers
        return [
            MessageQueue(name, q.broker_name, i)
            for q in self.queue_datas
            if q.writable and q.broker_name in masters
            for i in range(q.write_queue_nums)
        ]

    def read_queues(self) -> list[MessageQueue]:
        return sorted(
            MessageQueue(self.topic, q.broker_name, i)
            for q in self.queue_datas
            if q.readable
            for i in range(q.read_queue_nums)
        )

    def same_as(self, other: TopicRoute | None) -> bool:
        return (
            other is not None
            and self.queue_datas == other.queue_datas
            and self.broker_datas == other.broker_datas
        )
