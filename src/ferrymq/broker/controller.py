"""The broker process: store, topic/offset/client state, request processors, registration with
the name server and the periodic work (persisting offsets, expiring clients)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import zlib
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from ..acl import AclFile, AclGuard, GuardScope, sign
from ..acl.signing import credentials_from
from ..common import jsonx
from ..common.codes import RequestCode, ResponseCode
from ..common.headers import fields
from ..common.names import SCHEDULE_TOPIC, TIMER_TOPIC
from ..common.registration import FULL_REQUIRED_FIELD, INCREMENT_FIELD
from ..remoting import (
    ClientConfig,
    RemotingClient,
    RemotingCommand,
    RemotingError,
    RemotingServer,
    ServerConfig,
)
from ..store import CorruptPolicy, MessageStore, PutResult, StoreConfig, StoreMessage
from .clients import ClientRegistry, QueueLocks
from .coalesce import Coalescer
from .config import BrokerConfig, parse_delay_levels
from .events import MessageEvents
from .groups import GroupManager
from .handover import Handover
from .longpoll import PullWaiters
from .notify import GroupChangeNotifier
from .offsets import DelayOffsetManager, OffsetManager
from .processors.registry import register_all
from .put import PutPipeline, Routing
from .replication import Replication
from .roles import MASTER
from .schedule import ScheduleService
from .stats import TrafficStats
from .timer import TimerService, TimerStoreConfig
from .topics import TopicManager
from .trace import TRACED_EVENTS, TraceRecorder
from .transaction import TransactionService

log = logging.getLogger("ferrymq.broker")


class Broker:
    def __init__(self, config: BrokerConfig, *, clock: Callable[[], int] | None = None,
                 disk_usage: Callable[[Any], float] | None = None) -> None:
        self.config = config.validate()
        self._clock = clock or (lambda: int(time.time() * 1000))
        self._disk_usage = disk_usage
        self.levels_ms = parse_delay_levels(config.message_delay_level)
        config_dir = config.store_dir / "config"
        self.topics = TopicManager(config_dir, default_queue_nums=config.default_topic_queue_nums,
                                   on_change=self._topics_changed)
        self.offsets = OffsetManager(config_dir, config.offset_journal_delay_ms / 1000)
        self.groups = GroupManager(
            config_dir, settings=lambda: (self.config.auto_create_subscription_group,
                                          self.config.max_reconsume_times),
            writable=lambda: not self.refuse_writes(), on_change=self.replication_changed)
        self.delay_offsets = DelayOffsetManager(config_dir)
        self.clients = ClientRegistry(channel_expired_ms=config.channel_expired_timeout_ms,
                                      on_consumer_change=self._consumers_changed)
        self.locks = QueueLocks(config.rebalance_lock_max_live_time_ms)
        self.handover = Handover(config.handover_wait_ms, self.clients.releases_queues)
        self.notifier = GroupChangeNotifier(self.clients.member_connections,
                                            config.notify_consumer_ids_changed_delay_ms / 1000)
        # Topic changes are journaled in a worker thread, one append for any number of changes;
        # paced at the append's duration, so a burst cannot keep the disk busy back to back.
        self._topics_writer = Coalescer(self._write_topics, "topics-persist", min_interval=0.05, pace=1.0)
        self._topics_durable = -1
        # A full registration holds the loop while it builds the whole topic table: paced at
        # four times its duration (an incremental one takes well under a millisecond), at most
        # 100 ms apart.
        self._registrar = Coalescer(self._register_work, "register", min_interval=0.1, pace=4.0)
        self._registered_ok = False
        # Name server -> the topic table version it acknowledged last (dataVersion JSON).
        self._ns_versions: dict[str, dict[str, int]] = {}
        self.events = MessageEvents()
        self.stats = TrafficStats()
        self.trace: TraceRecorder | None = None
        if config.trace_enable:
            self.trace = TraceRecorder(self, flush_interval_ms=config.trace_flush_interval_ms,
                                       max_buffered=config.trace_max_buffered)
            self.events.subscribe(self.trace.on_event, kinds=TRACED_EVENTS)
            self.offsets.on_advance = self.trace.on_commit
        self.server = RemotingServer(ServerConfig(
            host=config.host, port=config.listen_port, max_frame_size=config.max_frame_size,
            idle_timeout=config.server_channel_max_idle_time_seconds,
            write_buffer_high=config.write_buffer_high_water_mark,
            write_buffer_low=config.write_buffer_low_water_mark,
            partial_frame_budget=config.partial_frame_budget,
            tls=config.tls_server(),
        ))
        self.acl: AclFile | None = None
        if config.acl_file:
            # A file that cannot be read stops the start: serving without the rules meant is
            # worse than not serving.
            self.acl = AclFile(Path(config.acl_file), poll_interval=config.acl_reload_interval_ms / 1000)
            self.server.set_request_hook(AclGuard(self.acl, GuardScope.BROKER))
        self.credentials = credentials_from(config.access_key, config.secret_key)
        # Also the connection a slave copies its master's metadata over.
        self.namesrv_client = RemotingClient(ClientConfig(tls=config.tls_client()), signer=self._sign)
        self.store: MessageStore | None = None
        self.waiters: PullWaiters | None = None
        self.schedule: ScheduleService | None = None
        self.timer: TimerService | None = None
        self.addr = config.broker_addr
        self.started_ms = 0
        self._tasks: list[asyncio.Task[None]] = []
        self._register_soon = asyncio.Event()
        self._stopping = False
        self.replication = Replication(self)
        self.pipeline = PutPipeline(
            lambda: self.store, self.replication,
            Routing(len(self.levels_ms),
                    config.timer_max_delay_sec * 1000 if config.timer_wheel_enable else None,
                    self.now_ms),
            self.stats, self.events)
        self._master_services = False
        self.transactions = TransactionService(self)
        register_all(self, self.server)

    def _sign(self, req: RemotingCommand) -> None:
        if self.credentials is not None:
            sign(req, self.credentials)

    # --- lifecycle -------------------------------------------------------------------------
    def reconfigure(self, config: BrokerConfig) -> None:
        self.config = config.validate()

    def now_ms(self) -> int:
        return self._clock()

    def connection_table(self) -> dict[str, str]:
        s = self.server.stats()
        return {
            "connectionCount": str(s.connections),
            "connectionWriteBufferedBytes": str(s.write_buffer_bytes),
            "partialFrameBytes": str(s.partial_frame_bytes),
            "idleConnectionsClosed": str(s.closed_idle),
            "partialFrameConnectionsClosed": str(s.closed_over_partial_budget),
            "acceptFailures": str(s.accept_failures),
            "consumerIdsChangedNotices": str(self.notifier.sent),
            # Members that waited for a queue's previous owner to release it, and waits that ran out.
            "consumerHandoverWaits": str(self.handover.waits),
            "consumerHandoverWaitsRunOut": str(self.handover.waited_out),
        }

    @property
    def namesrv_addrs(self) -> list[str]:
        return [a.strip() for a in self.config.namesrv_addr.split(";") if a.strip()]

    async def start(self) -> str:
        host, port = await self.server.start()
        self.addr = f"{host}:{port}"
        cfg = self.config
        store_cfg = StoreConfig(
            store_dir=cfg.store_dir,
            commitlog_segment_size=cfg.mapped_file_size_commitlog,
            consume_queue_entries_per_file=cfg.mapped_file_size_consume_queue_entries,
            flush_disk_type=cfg.flush_type,
            flush_interval_ms=cfg.flush_interval_commitlog_ms,
            sync_flush_timeout_ms=cfg.sync_flush_timeout_ms,
            file_reserved_time_hours=cfg.file_reserved_time,
            disk_clean_ratio=cfg.disk_max_used_space_ratio,
            disk_force_clean_ratio=cfg.disk_force_clean_ratio,
            disk_refuse_ratio=cfg.disk_refuse_ratio,
            max_message_size=cfg.max_message_size,
            store_host=self.addr,
            message_delay_level=cfg.message_delay_level,
            truncate_on_corruption=cfg.truncate_on_corruption,
            on_corrupt_record=CorruptPolicy(cfg.on_corrupt_record),
            scrub_bytes_per_s=cfg.scrub_bytes_per_s,
        )
        store = MessageStore(store_cfg, clock=self._clock, disk_usage=self._disk_usage)
        await asyncio.to_thread(store.start)
        self.store = store
        self.topics.load()
        self._topics_durable = self.topics.version
        self.topics.on_dirty = self._topics_dirty
        self.groups.load()
        self.groups.start_writer()
        self.offsets.load()
        self.offsets.open_journal()  # requests are answered from here on (self.store is set)
        self.delay_offsets.load()
        self.waiters = PullWaiters(asyncio.get_running_loop())
        store.add_arrival_listener(self._on_arrival)
        self.schedule = ScheduleService(self, self.levels_ms)
        if cfg.timer_wheel_enable:
            self.timer = TimerService(self, TimerStoreConfig(
                cfg.store_dir, cfg.timer_precision_ms, cfg.timer_wheel_slots,
                cfg.mapped_file_size_timer_log), flush_interval_ms=cfg.timer_flush_interval_ms)
        self.started_ms = self.now_ms()
        if self.timer is not None:
            # Runs on every broker: a slave's follows its master's (see TimerService.follow).
            self.timer.follow(self.replication.master_timer_position)
            self.timer.start()
        await self.replication.start()
        self._tasks = [
            asyncio.create_task(self._register_loop(), name="ferrymq-register"),
            asyncio.create_task(self._persist_loop(), name="ferrymq-persist"),
            asyncio.create_task(self.offsets.run_flusher(), name="ferrymq-offset-journal"),
            asyncio.create_task(self._scan_loop(), name="ferrymq-scan"),
        ]
        if self.acl is not None:
            self._tasks.append(asyncio.create_task(self.acl.run(), name="ferrymq-acl-reload"))
        if self.trace is not None:
            self._tasks.append(asyncio.create_task(self.trace.run(), name="ferrymq-trace"))
        if store.recovered_abnormally:
            log.warning("store was not shut down cleanly; recovered")
        log.info("broker %s listening on %s (store %s, replication on %s)", cfg.broker_name,
                 self.addr, cfg.store_dir, self.replication.ha_addr)
        return self.addr

    def start_master_services(self) -> None:
        """What only a master runs: delayed and timer delivery and the transaction check (they
        write)."""
        if not self._master_services and self.schedule is not None:
            self._master_services = True
            self.schedule.start()
            self.transactions.start()
            if self.timer is not None:
                self.timer.lead()

    def stop_master_services(self) -> None:
        if self._master_services and self.schedule is not None:
            self._master_services = False
            asyncio.get_running_loop().create_task(self.schedule.stop())
            asyncio.get_running_loop().create_task(self.transactions.stop())
            if self.timer is not None:
                self.timer.follow(self.replication.master_timer_position)

    @property
    def route_broker_id(self) -> int:
        """The id this broker registers under: in controller mode the master is 0."""
        if self.config.controller_addr:
            return 0 if self.replication.role == MASTER else self.config.broker_id
        return self.config.broker_id

    def ha_table(self) -> dict[str, str]:
        return self.replication.runtime_table()

    def refuse_writes(self) -> str:
        return self.replication.refuse_reason()

    def timer_position(self) -> tuple[int, int] | None:
        """(read time, enqueue offset) of this broker's timer wheel, for its slaves."""
        state = self.timer.state if self.timer is not None else None
        return None if state is None else (state.read_time_ms, state.enqueue_offset)

    def suggest_broker_id(self, topic: str, queue_id: int, next_offset: int, slow_broker_id: int = 1) -> int:
        return self.replication.suggest_broker_id(topic, queue_id, next_offset, slow_broker_id)

    async def stop(self) -> None:
        if self._stopping:
            return
        self._stopping = True
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        if self.schedule is not None and self._master_services:
            await self.schedule.stop()
        if self.timer is not None:
            await self.timer.stop()
        await self.transactions.stop()
        await self.replication.stop()
        if self.waiters is not None:
            self.waiters.wake_all()
        self.handover.close()
        self.notifier.close()
        store = self.store
        with contextlib.suppress(Exception):
            await self._registrar.idle()
        if store is not None:  # one that never started never registered, and its name is another's
            with contextlib.suppress(Exception):
                await self._unregister()
        await self.server.stop()
        await self.namesrv_client.close()
        if store is None:
            # The store never started (its directory is another broker's, say): the tables
            # were never loaded, and writing them would overwrite the owner's.
            return
        _persist_at_stop("consumer offsets", self.offsets.persist)
        self.offsets.close()
        _persist_at_stop("delay offsets", self.delay_offsets.persist)
        self.topics.on_dirty = None
        with contextlib.suppress(Exception):
            await self._topics_writer.idle()
        _persist_at_stop("topics", self.topics.persist)
        with contextlib.suppress(Exception):
            await self.groups.writer_idle()
        _persist_at_stop("subscription groups", self.groups.persist)
        if self.trace is not None:
            with contextlib.suppress(Exception):
                await self.trace.flush()  # the last few milliseconds of changes
        await asyncio.to_thread(store.shutdown)

    # --- writes: every message enters the store here ---------------------------------------
    async def put(self, msgs: Sequence[StoreMessage], *, allow_delay: bool = True) -> PutResult:
        """BrokerCore.put: the put pipeline (put.py)."""
        return await self.pipeline.put(msgs, route=allow_delay)

    def _on_arrival(self, topic: str, queue_id: int, max_offset: int) -> None:
        if self.waiters is not None:
            self.waiters.notify(topic, queue_id, max_offset)
        if topic == SCHEDULE_TOPIC and self.schedule is not None:
            loop = self.waiters._loop if self.waiters is not None else None
            if loop is not None and not loop.is_closed():
                loop.call_soon_threadsafe(self.schedule.poke)
        elif topic == TIMER_TOPIC and self.timer is not None:
            loop = self.waiters._loop if self.waiters is not None else None
            if loop is not None and not loop.is_closed():
                loop.call_soon_threadsafe(self.timer.poke)

    # --- consumers -------------------------------------------------------------------------
    def _consumers_changed(self, group: str) -> None:
        self.notifier.changed(group)
        self.handover.members_changed(group)

    # --- name server registration ----------------------------------------------------------
    def _topics_changed(self) -> None:
        self._register_soon.set()
        self.replication.metadata_changed()

    def replication_changed(self) -> None:
        """Metadata slaves copy changed: they are told now, not at their next sync."""
        self.replication.metadata_changed()

    def request_registration(self) -> None:
        self._register_soon.set()

    def _topics_dirty(self) -> None:
        try:
            self._topics_writer.ask_nowait()
        except RuntimeError:  # no running loop (start-up or tools): write here
            self.topics.persist()

    async def _write_topics(self) -> None:
        """Journal the changes made since the last run; rewrite topics.json once the journal
        holds as many lines as half the topics, and at least 1,000 (topic_journal.py)."""
        records, version = self.topics.take_pending()
        if records:
            await asyncio.to_thread(self.topics.append_journal, records)
        self._topics_durable = max(self._topics_durable, version)
        if self.topics.snapshot_due(len(self.topics.topics)):
            snapshot = self.topics.wrapper_json()
            await asyncio.to_thread(self.topics.write, snapshot)

    async def persist_topics(self) -> None:
        if self._topics_durable < self.topics.version:
            await self._topics_writer.ask()

    def register_body(self) -> bytes:
        return jsonx.dumps_bytes({
            "filterServerList": [],
            "topicConfigSerializeWrapper": self.topics.wrapper_json(),
        })

    async def register_once(self) -> bool:
        """Register now; callers at the same time share one registration (each one sees its
        changes registered), so a burst of new topics is not a burst of sends."""
        await self._registrar.ask()
        return self._registered_ok

    async def _register_work(self) -> None:
        addrs = self.namesrv_addrs
        results = await asyncio.gather(*(self._register_with(addr) for addr in addrs))
        self._registered_ok = any(results)

    async def _register_with(self, addr: str) -> bool:
        """RocketMQ 5's incremental registration: a name server that holds this broker's table
        as of a version is sent only what changed since (the periodic one then carries no
        topics at all); a full table when it holds none or another version (it restarted, or
        dropped this broker), which it says in its answer."""
        base = self._ns_versions.get(addr)
        if base is not None:
            changes = self.topics.changes_since(int(base["counter"]))
            body = jsonx.dumps_bytes({
                "filterServerList": [],
                "topicConfigSerializeWrapper": {"dataVersion": changes.data_version,
                                                "topicConfigTable": changes.changed},
                INCREMENT_FIELD: {"baseDataVersion": base, "deletedTopics": changes.deleted},
            })
            resp = await self._send_registration(addr, body)
            if resp is not None and resp.ext_fields.get(FULL_REQUIRED_FIELD) != "true":
                if resp.code == ResponseCode.SUCCESS:
                    self._ns_versions[addr] = changes.data_version
                return self._registered(addr, resp)
            self._ns_versions.pop(addr, None)
            if resp is None:
                return False
        snapshot = self.topics.wrapper_json()
        resp = await self._send_registration(addr, jsonx.dumps_bytes({
            "filterServerList": [], "topicConfigSerializeWrapper": snapshot}))
        if resp is None:
            return False
        if resp.code == ResponseCode.SUCCESS:
            self._ns_versions[addr] = snapshot["dataVersion"]
        return self._registered(addr, resp)

    async def _send_registration(self, addr: str, body: bytes) -> RemotingCommand | None:
        req = RemotingCommand.request(
            RequestCode.REGISTER_BROKER,
            ext_fields=fields(
                brokerAddr=self.addr, brokerId=self.route_broker_id,
                brokerName=self.config.broker_name, clusterName=self.config.broker_cluster_name,
                haServerAddr=self.replication.ha_addr,
                compressed=False, bodyCrc32=zlib.crc32(body) & 0x7FFFFFFF,
            ),
            body=body,
        )
        try:
            return await self.namesrv_client.invoke(addr, req, timeout=3.0)
        except RemotingError as exc:
            log.warning("register to name server %s failed: %s", addr, exc)
            return None

    def _registered(self, addr: str, resp: RemotingCommand) -> bool:
        if resp.code != ResponseCode.SUCCESS:
            log.warning("name server %s refused the registration: %s", addr, resp.remark)
            return False
        self.replication.on_registered(resp.ext_fields.get("masterAddr") or "",
                                       resp.ext_fields.get("haServerAddr") or "")
        return True

    async def _unregister(self) -> None:
        for addr in self.namesrv_addrs:
            req = RemotingCommand.request(
                RequestCode.UNREGISTER_BROKER,
                ext_fields=fields(brokerAddr=self.addr, brokerId=self.route_broker_id,
                                  brokerName=self.config.broker_name,
                                  clusterName=self.config.broker_cluster_name),
            )
            with contextlib.suppress(RemotingError):
                await self.namesrv_client.invoke(addr, req, timeout=1.0)

    async def _register_loop(self) -> None:
        interval = self.config.register_broker_interval_ms / 1000
        while True:
            self._register_soon.clear()
            try:
                await self.register_once()
            except Exception:
                log.exception("registration failed")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._register_soon.wait(), interval)

    async def _persist_loop(self) -> None:
        interval = self.config.flush_consumer_offset_interval_ms / 1000
        while True:
            await asyncio.sleep(interval)
            try:
                await asyncio.to_thread(self._persist_all)
            except Exception:
                log.exception("persisting offsets failed")

    def _persist_all(self) -> None:
        self.offsets.persist()
        self.delay_offsets.persist()

    async def _scan_loop(self) -> None:
        while True:
            await asyncio.sleep(10)
            self.clients.scan_expired(self.now_ms())


def _persist_at_stop(what: str, persist: Callable[[], object]) -> None:
    """A snapshot written as the broker stops. A failure (a full disk) is logged and the stop
    goes on: raised, it ended stop() there, and the store was never shut down (no final flush,
    no clean checkpoint). Answered offset commits are in the journal already."""
    try:
        persist()
    except OSError as exc:
        log.error("stopping: the %s snapshot was not written (%s)", what, exc)
