"""A broker's part in replication: its role, the HA port (every broker listens: in controller
mode any replica may become the master), the stream from its master when it is a slave, the
periodic copy of its master's metadata, and SYNC_MASTER's wait for slaves."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import TYPE_CHECKING

from ..common import jsonx
from ..common.codes import RequestCode, ResponseCode
from ..common.headers import fields
from ..common.names import SCHEDULE_TOPIC
from ..ha import HaMaster, HaMasterConfig, HaSlave, HaSlaveConfig, ReplicaAck
from ..remoting import RemotingCommand, RemotingError
from ..store import PutResult, PutStatus
from .failover import ControllerAgent
from .init_offset import in_memory_window
from .offsets import TOPIC_GROUP_SEPARATOR, parse_table_json
from .roles import MASTER, SLAVE, UNDECIDED
from .topics import TopicConfig

if TYPE_CHECKING:
    from .core import ReplicatedBroker

log = logging.getLogger("ferrymq.broker.ha")


class Replication:
    def __init__(self, broker: ReplicatedBroker) -> None:
        self.broker = broker
        self.role = UNDECIDED
        self.epoch = 0
        self.master: HaMaster | None = None
        self.slave: HaSlave | None = None
        self.ha_addr = ""
        # A slave's master: remoting address (metadata copies, offset pushes) and HA address.
        self.master_addr = ""
        self.master_ha_addr = broker.config.ha_master_address
        self._sync_task: asyncio.Task[None] | None = None
        self.synced_ms = 0
        self.agent: ControllerAgent | None = None
        self._sync_now = asyncio.Event()
        # The master's timer wheel position as last copied (docs/replication.md).
        self.master_timer: tuple[int, int] | None = None

    # --- lifecycle -------------------------------------------------------------------------
    async def start(self) -> str:
        broker, cfg = self.broker, self.broker.config
        store = broker.store
        assert store is not None
        self.master = HaMaster(store, HaMasterConfig(
            host=cfg.host, port=cfg.ha_port,
            heartbeat_interval_ms=cfg.ha_heartbeat_interval_ms,
            max_time_slave_not_catchup_ms=cfg.ha_max_time_slave_not_catchup_ms,
            max_gap_not_in_sync=cfg.ha_max_gap_not_in_sync,
            tls=cfg.tls_server(),
        ), master_addr=lambda: broker.addr, clock=broker.now_ms)
        self.ha_addr = await self.master.start()
        if cfg.controller_addr:
            self.agent = ControllerAgent(broker, self)
            self.master.policy = self.agent
            self.master.min_slaves = cfg.min_in_sync_replicas - 1
            # Readers see what the in-sync set has (store/visibility.py): a failover can cut
            # anything else, and hand its queue offsets to other messages.
            self.master.gate_reads = not cfg.read_uncommitted
            self.agent.start()
        elif cfg.broker_role == "SLAVE":
            self.become_slave(cfg.ha_master_address, "")
        else:
            self.become_master(max(1, store.replica.epochs.last_epoch))
        return self.ha_addr

    async def stop(self) -> None:
        if self.agent is not None:
            await self.agent.stop()
        if self._sync_task is not None:
            self._sync_task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._sync_task
        if self.slave is not None:
            await self.slave.stop()
        if self.master is not None:
            await self.master.stop()

    # --- roles -----------------------------------------------------------------------------
    def become_master(self, epoch: int) -> None:
        store = self.broker.store
        assert store is not None
        if self.slave is not None:
            slave, self.slave = self.slave, None
            asyncio.get_running_loop().create_task(slave.stop())
        store.replica.epochs.begin(epoch, store.max_phy_offset)
        self._topics_for_queues()
        self.epoch = epoch
        self.role = MASTER
        self.master_addr = ""
        self.broker.offsets.local_commits = None
        self.broker.start_master_services()
        log.info("%s is the master (epoch %d) from offset %d", self.broker.config.broker_name,
                 epoch, store.max_phy_offset)

    def _topics_for_queues(self) -> None:
        """A slave's topic copy can lag its log by a sync interval: a new master serves every
        topic it holds messages of, or clients could not find them in its route."""
        store = self.broker.store
        assert store is not None
        for topic, qids in store.reads.queues().items():
            if topic != SCHEDULE_TOPIC and self.broker.topics.get(topic) is None:
                n = max(qids) + 1
                self.broker.topics.upsert(TopicConfig(topic, read_queue_nums=n, write_queue_nums=n))
                log.info("topic %s (%d queues) known from the log only: configured", topic, n)

    def become_slave(self, master_ha_addr: str, master_addr: str) -> None:
        store = self.broker.store
        assert store is not None
        was = self.role
        self.role = SLAVE
        self.master_ha_addr = master_ha_addr or self.master_ha_addr
        self.master_addr = master_addr or self.master_addr
        if self.broker.offsets.local_commits is None:
            self.broker.offsets.local_commits = set()
        if was == MASTER:
            self.broker.stop_master_services()
            self.drop_slaves()
        if self.slave is None:
            cfg = self.broker.config
            self.slave = HaSlave(store, HaSlaveConfig(cfg.broker_name, cfg.broker_id, self.broker.addr,
                                                      tls=cfg.tls_client()),
                                 self._master_ha, on_metadata=self._sync_now.set)
            self.slave.start()
        else:
            self.slave.drop_connection()  # follow the new master now
        if self._sync_task is None:
            self._sync_task = asyncio.get_running_loop().create_task(self._sync_loop(),
                                                                     name="ferrymq-slave-sync")

    def _master_ha(self) -> str:
        """Asked before every connection attempt. A static slave that is not connected asks the
        name server again: its master may have registered since, or restarted elsewhere."""
        if not self.broker.config.controller_addr and not self.broker.config.ha_master_address:
            self.broker.request_registration()
        return self.master_ha_addr

    def drop_slaves(self) -> None:
        if self.master is not None:
            self.master.demote()

    def metadata_changed(self) -> None:
        if self.role == MASTER and self.master is not None:
            self.master.notify_metadata()

    def on_registered(self, master_addr: str, master_ha_addr: str) -> None:
        """A static slave learns its master's addresses from the name server's answer."""
        if self.role != SLAVE or self.broker.config.controller_addr:
            return
        if master_addr:
            self.master_addr = master_addr
        if master_ha_addr and not self.broker.config.ha_master_address:
            self.master_ha_addr = master_ha_addr

    # --- writes ----------------------------------------------------------------------------
    def refuse_reason(self) -> str:
        if self.role == SLAVE:
            return (f"the broker {self.broker.addr} is a slave of {self.broker.config.broker_name}; "
                    "send to its master")
        if self.role == UNDECIDED:
            return "the broker is waiting for the controller to name its group's master"
        if self.agent is not None:
            return self.agent.fenced()
        return ""

    async def after_put(self, result: PutResult) -> PutResult:
        """SYNC_MASTER: answer once the slaves waited for have the batch."""
        if (self.broker.config.broker_role != "SYNC_MASTER" or result.status is not PutStatus.PUT_OK
                or self.master is None):
            return result
        ack = await self.master.wait_replicated(result.end_offset,
                                                self.broker.config.sync_flush_timeout_ms / 1000)
        if ack is ReplicaAck.DEMOTED:
            result.status = PutStatus.FLUSH_SLAVE_TIMEOUT
            result.reason = ("the broker stopped being its group's master before a slave "
                             "confirmed the message; it may be lost")
        elif ack is ReplicaAck.TIMEOUT:
            result.status = PutStatus.FLUSH_SLAVE_TIMEOUT
            result.reason = (f"no in-sync slave confirmed the message within "
                             f"{self.broker.config.sync_flush_timeout_ms} ms")
        elif ack is ReplicaAck.NO_SLAVE:
            result.status = PutStatus.SLAVE_NOT_AVAILABLE
            result.reason = ("no slave is connected and in sync" if self.agent is None else
                             f"fewer than {self.broker.config.min_in_sync_replicas} replicas are in sync")
        return result

    # --- reads --------------------------------------------------------------------------------
    def suggest_broker_id(self, topic: str, queue_id: int, next_offset: int, slow_broker_id: int = 1) -> int:
        """suggestWhichBrokerId of a pull answer: the master, or (slave_read_enable) an in-sync
        slave when the consumer's next message is far enough behind to have left the cache."""
        cfg, m, store = self.broker.config, self.master, self.broker.store
        if self.role != MASTER or not cfg.slave_read_enable or m is None or not m.in_sync:
            return 0
        assert store is not None
        entries = store.reads.read_queue_entries(topic, queue_id, next_offset, 1)
        if not entries:
            return 0
        behind = store.max_phy_offset - entries[0].phys_offset
        if behind > in_memory_window(cfg.access_message_in_memory_max_ratio):
            # The group's choice (RocketMQ's whichBrokerWhenConsumeSlowly) while it is in sync;
            # RocketMQ sends the consumer there even when it is not, and its pulls then fail.
            return slow_broker_id if slow_broker_id in m.in_sync else min(m.in_sync)
        return 0

    # --- the slave's copy of its master's metadata -----------------------------------------
    async def _sync_loop(self) -> None:
        interval = self.broker.config.ha_slave_sync_interval_ms / 1000
        while True:
            if self.role == SLAVE and self.slave is not None and self.slave.master_addr:
                self.master_addr = self.slave.master_addr  # what the master calls itself
            if self.role == SLAVE and self.master_addr:
                try:
                    await self.sync_once()
                except (RemotingError, ValueError, KeyError, TypeError) as exc:
                    log.info("copying metadata from %s failed: %s", self.master_addr, exc)
            self._sync_now.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._sync_now.wait(), interval)

    async def _ask(self, addr: str, code: RequestCode) -> object:
        if self.role != SLAVE:
            raise ValueError("no longer a slave")
        client = self.broker.namesrv_client
        resp = await client.invoke(addr, RemotingCommand.request(code), timeout=5.0)
        if resp.code != ResponseCode.SUCCESS:
            raise ValueError(f"{code.name} answered {resp.code}: {resp.remark}")
        return jsonx.loads(resp.body or b"{}")

    async def sync_once(self) -> None:
        broker = self.broker
        addr = self.master_addr  # the role, and with it this address, may change while we wait
        topics = await self._ask(addr, RequestCode.GET_ALL_TOPIC_CONFIG)
        assert isinstance(topics, dict)
        broker.topics.adopt(topics.get("topicConfigTable") or {})
        groups = await self._ask(addr, RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG)
        assert isinstance(groups, dict)
        broker.groups.adopt(groups.get("subscriptionGroupTable") or {})
        offsets = await self._ask(addr, RequestCode.GET_ALL_CONSUMER_OFFSET)
        assert isinstance(offsets, dict)
        for key, qid, offset in broker.offsets.adopt(parse_table_json(offsets)):
            await self._push_offset(addr, key, qid, offset)
        delays = await self._ask(addr, RequestCode.GET_ALL_DELAY_OFFSET)
        assert isinstance(delays, dict)
        for level, offset in (delays.get("offsetTable") or {}).items():
            broker.delay_offsets.set(int(level), int(offset))
        timer = delays.get("ferrymqTimer")
        if isinstance(timer, dict) and "readTimeMs" in timer and "enqueueOffset" in timer:
            self.master_timer = (int(timer["readTimeMs"]), int(timer["enqueueOffset"]))
        self.synced_ms = broker.now_ms()

    async def _push_offset(self, addr: str, key: str, queue_id: int, offset: int) -> None:
        topic, _, group = key.partition(TOPIC_GROUP_SEPARATOR)
        req = RemotingCommand.request(RequestCode.UPDATE_CONSUMER_OFFSET, ext_fields=fields(
            consumerGroup=group, topic=topic, queueId=queue_id, commitOffset=offset))
        resp = await self.broker.namesrv_client.invoke(addr, req, timeout=5.0)
        if resp.code == ResponseCode.SUCCESS:
            log.info("offset %s/%d=%d committed here while the master was away: sent to it",
                     key, queue_id, offset)

    def master_timer_position(self) -> tuple[int, int] | None:
        return self.master_timer

    # --- figures ---------------------------------------------------------------------------
    def runtime_table(self) -> dict[str, str]:
        cfg = self.broker.config
        role = cfg.broker_role if self.role == MASTER else ("SLAVE" if self.role == SLAVE else "UNDECIDED")
        table = {"brokerRole": role, "brokerId": str(cfg.broker_id), "haListenAddr": self.ha_addr,
                 "epoch": str(self.epoch)}
        fenced = self.agent.fenced() if self.agent is not None else ""
        if fenced:
            table["fenced"] = fenced
        if self.agent is not None:
            table["controllerMasterId"] = str(self.agent.master_id)
            table["syncStateSet"] = ",".join(str(i) for i in sorted(self.agent.sync_state_set))
        if self.role == MASTER and self.master is not None:
            table["haSlaves"] = jsonx.dumps(self.master.slaves_table())
            table["inSyncSlaves"] = ",".join(str(i) for i in sorted(self.master.in_sync))
        if self.role == SLAVE:
            s = self.slave
            table.update({
                "masterAddr": self.master_addr, "masterHaAddr": self.master_ha_addr,
                "haConnected": "true" if s is not None and s.connected else "false",
                "slaveLagBytes": str(s.lag_bytes if s is not None else -1),
                "slaveLagMs": str(s.lag_ms if s is not None and s.connected else -1),
                "slaveSyncTimestamp": str(self.synced_ms),
            })
        return table
