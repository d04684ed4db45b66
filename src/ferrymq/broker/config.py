"""Broker configuration. Keys mirror RocketMQ's broker.conf in snake_case, so an operator's
knowledge (and config files, after renaming) carries over."""

from __future__ import annotations

import dataclasses
import tomllib
from dataclasses import dataclass
from typing import Any

from ..common.delay import DEFAULT_DELAY_LEVELS, DelayLevelError
from ..common.delay import parse_delay_levels as _parse_levels
from ..common.errors import FerryMQError
from ..common.paths import PathField, StrPath
from ..remoting.tls import ClientAuth, TlsClientSettings, TlsConfigError, TlsMode, TlsServerSettings
from ..store import FlushDiskType


class ConfigError(FerryMQError, ValueError):
    def __init__(self, key: str, reason: str) -> None:
        super().__init__(f"configuration {key!r}: {reason}")
        self.key = key
        self.reason = reason


DEFAULT_GRPC_PORT = 8081


@dataclass(frozen=True)  # no slots: store_dir is a PathField
class BrokerConfig:
    store_dir: PathField = PathField("ferrymq-data")
    host: str = "127.0.0.1"
    listen_port: int = 10911
    namesrv_addr: str = "127.0.0.1:9876"
    broker_name: str = "broker-a"
    broker_cluster_name: str = "DefaultCluster"
    broker_id: int = 0
    broker_role: str = "ASYNC_MASTER"
    flush_disk_type: str = "ASYNC_FLUSH"
    flush_interval_commitlog_ms: int = 500
    sync_flush_timeout_ms: int = 5000
    message_delay_level: str = DEFAULT_DELAY_LEVELS
    max_message_size: int = 4 * 1024 * 1024
    file_reserved_time: float = 72.0  # hours
    mapped_file_size_commitlog: int = 1 << 30
    mapped_file_size_consume_queue_entries: int = 300_000
    auto_create_topic_enable: bool = True
    auto_create_subscription_group: bool = True
    default_topic_queue_nums: int = 8
    max_reconsume_times: int = 16
    long_polling_enable: bool = True
    # Pop consumption: messages of one queue a group may hold invisible at once; more wait.
    pop_max_inflight_per_queue: int = 1024
    short_polling_time_ms: int = 1000
    register_broker_interval_ms: int = 30_000
    flush_consumer_offset_interval_ms: int = 5_000
    # An offset nobody waits for (the one a pull carries) reaches the offset journal within
    # this; commits that are answered (UPDATE_CONSUMER_OFFSET...) are on disk first.
    offset_journal_delay_ms: int = 100
    flush_delay_offset_interval_ms: int = 10_000
    schedule_tick_ms: int = 100
    channel_expired_timeout_ms: int = 120_000
    rebalance_lock_max_live_time_ms: int = 60_000
    disk_max_used_space_ratio: float = 0.75
    disk_force_clean_ratio: float = 0.85
    disk_refuse_ratio: float = 0.90
    max_frame_size: int = 16 * 1024 * 1024
    # Connection bounds (docs/protocol.md, "Resource bounds"): idle connections are closed;
    # a connection stops being read while this many bytes of its replies are unsent; the bytes
    # of frames still arriving are capped over all connections.
    server_channel_max_idle_time_seconds: float = 120.0
    write_buffer_high_water_mark: int = 1 << 20
    write_buffer_low_water_mark: int = 256 << 10
    partial_frame_budget: int = 128 << 20
    # ACL (docs/security.md): RocketMQ's plain_acl.yml; "" turns it off. The file is polled for
    # changes this often. access_key/secret_key sign the broker's own requests (registration
    # with the name server, a slave's requests to its master).
    acl_file: str = ""
    acl_reload_interval_ms: int = 1000
    access_key: str = ""
    secret_key: str = ""
    # A group's members hear of membership changes at most once per this delay, not per change.
    notify_consumer_ids_changed_delay_ms: int = 200
    # A member asking where to start on a queue another member still owns waits up to this
    # long for that owner to release it (broker/handover.py); 0 answers at once, as RocketMQ.
    handover_wait_ms: int = 2000
    # After a crash, a corrupt record followed by valid ones stops the start (the default);
    # set this to discard everything from the corrupt record on instead.
    truncate_on_corruption: bool = False
    # A record damaged at rest: "skip" (report it once, deliver what surrounds it) or "stop"
    # (pulls stop before it until an operator skips it). See docs/storage.md.
    on_corrupt_record: str = "skip"
    # Background check of the whole log after start; 0 turns it off.
    scrub_bytes_per_s: int = 16 * 1024 * 1024
    # Replication (docs/replication.md). Every broker listens on its HA port: in controller
    # mode any replica may become the master.
    # -1: the remoting port + 1 (10912 by default), or a free one when that port is picked
    # freely (0).
    ha_listen_port: int = -1
    ha_master_address: str = ""  # a slave's master HA address; "" = from the name server
    controller_addr: str = ""  # controller mode when set
    ha_slave_sync_interval_ms: int = 3000
    ha_heartbeat_interval_ms: int = 1000
    ha_max_time_slave_not_catchup_ms: int = 15_000
    ha_max_gap_not_in_sync: int = 256 << 20
    controller_heartbeat_interval_ms: int = 1000
    # A controller-mode master that has not heard from the controller for this long stops
    # taking writes (a new master may have been elected meanwhile).
    controller_lease_ms: int = 3000
    # Controller mode, SYNC_MASTER: replicas (the master included) that must have a message
    # before it is answered. 1 (RocketMQ 5's default) lets a master whose slaves are gone keep
    # taking writes: it is then the only replica that can be elected, so nothing acknowledged
    # is lost; 2 refuses writes (SLAVE_NOT_AVAILABLE) without an in-sync slave.
    min_in_sync_replicas: int = 1
    # Controller mode: consumers may read a message before the in-sync replicas have it
    # (RocketMQ's readUnCommitted). Off: a failover cannot hand the queue offset of a message a
    # consumer read to another message, which that consumer would then skip.
    read_uncommitted: bool = False
    slave_read_enable: bool = False
    # The gRPC endpoint for RocketMQ 5 clients (apache.rocketmq.v2, docs/grpc.md). None: 8081,
    # or a free port when the remoting port is picked freely (0); 0: a free port; -1: off.
    grpc_listen_port: int | None = None
    # Percent of physical memory: a record further behind the log's end is no longer "in
    # memory" (likely not cached). With slave_read_enable a consumer that far behind is sent to
    # a slave; a group new to a queue whose first record is still in memory starts at that
    # record (broker/init_offset.py).
    access_message_in_memory_max_ratio: int = 40
    # Transactional messages (docs/transactions.md): a half message nobody ended is checked
    # with its producer group once it is older than the timeout, on each pass of the interval,
    # at most transaction_check_max times; then it is discarded to TRANS_CHECK_MAX_TIME_TOPIC.
    transaction_check_interval_ms: int = 60_000
    transaction_timeout_ms: int = 6_000
    transaction_check_max: int = 15
    reject_transaction_message: bool = False
    # Topic message types (docs/protocol.md, "Topic message types"): a send is checked against
    # its topic's `message.type` (RocketMQ's proxy, enableTopicMessageTypeCheck, on); a MIXED
    # topic is refused unless enable_mixed_message_type (RocketMQ's broker: off).
    enable_topic_message_type_check: bool = True
    enable_mixed_message_type: bool = False
    # Timer messages (docs/storage.md, "Timer wheel"): delivery at any time up to
    # timer_max_delay_sec ahead, to within timer_precision_ms. The wheel has timer_wheel_slots
    # slots of that precision (its horizon); later timers are rolled forward until in reach.
    timer_wheel_enable: bool = True
    timer_precision_ms: int = 100
    timer_wheel_slots: int = 7 * 24 * 3600
    timer_max_delay_sec: int = 3 * 24 * 3600
    mapped_file_size_timer_log: int = 100 * 1024 * 1024
    timer_flush_interval_ms: int = 1000
    # SQL92 subscriptions (docs/filtering.md). On by default, unlike RocketMQ's
    # enablePropertyFilter: off, such subscriptions are refused as RocketMQ refuses them.
    enable_property_filter: bool = True
    # Message trace (docs/trace.md): the broker records every state change of every message
    # in RMQ_SYS_TRACE_TOPIC, a batch of events per record every trace_flush_interval_ms; at
    # most trace_max_buffered changes wait in memory (beyond that they are counted, not kept).
    # 50 ms: consumption measured 0.7x of trace off with 5 ms, 0.8x with 20 ms, even with 50.
    trace_enable: bool = True
    trace_flush_interval_ms: int = 50
    trace_max_buffered: int = 200_000
    # TLS (docs/security.md), RocketMQ's tls.server.* keys: the remoting, HA and gRPC ports in
    # disabled, permissive (TLS and plain on one port) or enforcing mode.
    tls_server_mode: str = "disabled"
    tls_server_cert_path: str = ""
    tls_server_key_path: str = ""
    tls_server_key_password: str = ""
    tls_server_trust_cert_path: str = ""  # CA(s) for client certificates
    tls_server_need_client_auth: str = "none"  # none, optional or require
    # RocketMQ's tls.enable and tls.client.*: the broker's own connections (to name servers,
    # a slave to its master) over TLS.
    tls_enable: bool = False
    tls_client_trust_cert_path: str = ""  # "" = the system's CAs
    tls_client_auth_server: bool = True  # verify the server's certificate
    tls_client_cert_path: str = ""
    tls_client_key_path: str = ""
    # RocketMQ's brokerConfigPath: the file the broker was started with (`--config`), where a
    # runtime UPDATE_BROKER_CONFIG is written back so a restart keeps it. "": none.
    broker_config_path: str = ""

    @property
    def broker_addr(self) -> str:
        return f"{self.host}:{self.listen_port}"

    @property
    def ha_port(self) -> int:
        if self.ha_listen_port >= 0:
            return self.ha_listen_port
        return self.listen_port + 1 if self.listen_port else 0

    @property
    def grpc_port(self) -> int:
        """The gRPC port to bind: -1 when the endpoint is off, 0 for a free one."""
        if self.grpc_listen_port is not None:
            return self.grpc_listen_port
        return DEFAULT_GRPC_PORT if self.listen_port else 0

    def tls_server(self) -> TlsServerSettings:
        return TlsServerSettings(
            mode=TlsMode.parse(self.tls_server_mode), cert_path=self.tls_server_cert_path,
            key_path=self.tls_server_key_path, key_password=self.tls_server_key_password,
            trust_cert_path=self.tls_server_trust_cert_path,
            need_client_auth=ClientAuth.parse(self.tls_server_need_client_auth),
        )

    def tls_client(self) -> TlsClientSettings:
        return TlsClientSettings(
            enabled=self.tls_enable, trust_cert_path=self.tls_client_trust_cert_path,
            verify=self.tls_client_auth_server, cert_path=self.tls_client_cert_path,
            key_path=self.tls_client_key_path,
        )

    @property
    def flush_type(self) -> FlushDiskType:
        return FlushDiskType[self.flush_disk_type]

    def replace(self, **changes: Any) -> BrokerConfig:
        return dataclasses.replace(self, **changes)

    def validate(self) -> BrokerConfig:
        if self.flush_disk_type not in ("ASYNC_FLUSH", "SYNC_FLUSH"):
            raise ConfigError("flush_disk_type", "must be ASYNC_FLUSH or SYNC_FLUSH")
        if self.broker_role not in ("ASYNC_MASTER", "SYNC_MASTER", "SLAVE"):
            raise ConfigError("broker_role", "must be ASYNC_MASTER, SYNC_MASTER or SLAVE")
        if self.controller_addr:
            if self.broker_id < 1:
                raise ConfigError("broker_id", "in controller mode broker ids are replica ids "
                                  ">= 1 (the master is listed as id 0 in routes)")
            if self.broker_role == "SLAVE":
                raise ConfigError("broker_role", "in controller mode the controller picks the "
                                  "master; give ASYNC_MASTER or SYNC_MASTER (whether the master "
                                  "waits for its slaves)")
        elif self.broker_role == "SLAVE" and self.broker_id < 1:
            raise ConfigError("broker_id", "a slave's broker id is 1 or more (0 is the master)")
        elif self.broker_role != "SLAVE" and self.broker_id != 0:
            raise ConfigError("broker_id", f"a master's broker id is 0, not {self.broker_id}")
        if self.min_in_sync_replicas < 1:
            raise ConfigError("min_in_sync_replicas", "must be >= 1 (the master counts)")
        if self.grpc_listen_port is not None and not -1 <= self.grpc_listen_port <= 65535:
            raise ConfigError("grpc_listen_port", "must be a port number (0 picks a free one, -1 turns it off)")
        if self.ha_listen_port < -1 or self.ha_listen_port > 65535:
            raise ConfigError("ha_listen_port", "must be a port number (0 picks a free one)")
        parse_delay_levels(self.message_delay_level)
        if self.server_channel_max_idle_time_seconds < 0:
            raise ConfigError("server_channel_max_idle_time_seconds", "must be >= 0 (0 keeps idle connections)")
        if not 0 < self.write_buffer_low_water_mark <= self.write_buffer_high_water_mark:
            raise ConfigError("write_buffer_low_water_mark", "must be > 0 and <= write_buffer_high_water_mark")
        if self.partial_frame_budget < self.max_frame_size:
            raise ConfigError("partial_frame_budget", "must be at least max_frame_size")
        if self.acl_reload_interval_ms < 1:
            raise ConfigError("acl_reload_interval_ms", "must be >= 1")
        if bool(self.access_key) != bool(self.secret_key):
            raise ConfigError("access_key", "access_key and secret_key go together: give both or neither")
        if self.on_corrupt_record not in ("skip", "stop"):
            raise ConfigError("on_corrupt_record", "must be skip or stop")
        if self.offset_journal_delay_ms < 0:
            raise ConfigError("offset_journal_delay_ms", "must be >= 0 (0 writes at once)")
        if self.notify_consumer_ids_changed_delay_ms < 0:
            raise ConfigError("notify_consumer_ids_changed_delay_ms", "must be >= 0")
        if self.handover_wait_ms < 0:
            raise ConfigError("handover_wait_ms", "must be >= 0")
        if self.transaction_check_interval_ms <= 0:
            raise ConfigError("transaction_check_interval_ms", "must be > 0")
        if self.transaction_timeout_ms < 0:
            raise ConfigError("transaction_timeout_ms", "must be >= 0")
        if self.transaction_check_max < 0:
            raise ConfigError("transaction_check_max", "must be >= 0")
        if self.max_reconsume_times < 0:
            raise ConfigError("max_reconsume_times", "must be >= 0")
        if not 0 <= self.access_message_in_memory_max_ratio <= 100:
            raise ConfigError("access_message_in_memory_max_ratio", "must be 0..100 (percent of physical memory)")
        if self.pop_max_inflight_per_queue < 1:
            raise ConfigError("pop_max_inflight_per_queue", "must be >= 1")
        if not 1 <= self.timer_precision_ms <= 60_000:
            raise ConfigError("timer_precision_ms", "must be 1..60000")
        if self.timer_wheel_slots < 16:
            raise ConfigError("timer_wheel_slots", "must be >= 16")
        if self.timer_max_delay_sec < 1:
            raise ConfigError("timer_max_delay_sec", "must be >= 1")
        if self.mapped_file_size_timer_log < 4096:
            raise ConfigError("mapped_file_size_timer_log", "must be >= 4096 bytes")
        if self.trace_flush_interval_ms < 1:
            raise ConfigError("trace_flush_interval_ms", "must be >= 1")
        if self.trace_max_buffered < 1:
            raise ConfigError("trace_max_buffered", "must be >= 1")
        if self.timer_flush_interval_ms < 1:
            raise ConfigError("timer_flush_interval_ms", "must be >= 1")
        try:
            self.tls_server().validate()
        except TlsConfigError as exc:
            raise ConfigError(exc.key, exc.reason) from None
        return self


def parse_delay_levels(text: str) -> list[int]:
    """'1s 5s 1m' -> [1000, 5000, 60000], as a config error naming the key when it is wrong."""
    try:
        return list(_parse_levels(text))
    except DelayLevelError as exc:
        raise ConfigError("message_delay_level", exc.reason) from None


_CAMEL_ALIASES = {
    "storePathRootDir": "store_dir",
    "listenPort": "listen_port",
    "namesrvAddr": "namesrv_addr",
    "brokerName": "broker_name",
    "brokerClusterName": "broker_cluster_name",
    "brokerId": "broker_id",
    "brokerRole": "broker_role",
    "flushDiskType": "flush_disk_type",
    "messageDelayLevel": "message_delay_level",
    "maxMessageSize": "max_message_size",
    "fileReservedTime": "file_reserved_time",
    "autoCreateTopicEnable": "auto_create_topic_enable",
    "defaultTopicQueueNums": "default_topic_queue_nums",
    "mapedFileSizeCommitLog": "mapped_file_size_commitlog",
    "mappedFileSizeCommitLog": "mapped_file_size_commitlog",
    "brokerIP1": "host",
    "serverChannelMaxIdleTimeSeconds": "server_channel_max_idle_time_seconds",
    "writeBufferHighWaterMark": "write_buffer_high_water_mark",
    "writeBufferLowWaterMark": "write_buffer_low_water_mark",
    "haListenPort": "ha_listen_port",
    "haMasterAddress": "ha_master_address",
    "controllerAddr": "controller_addr",
    "haMaxTimeSlaveNotCatchup": "ha_max_time_slave_not_catchup_ms",
    "haMaxGapNotInSync": "ha_max_gap_not_in_sync",
    "slaveReadEnable": "slave_read_enable",
    "minInSyncReplicas": "min_in_sync_replicas",
    "readUnCommitted": "read_uncommitted",
    "accessMessageInMemoryMaxRatio": "access_message_in_memory_max_ratio",
    "transactionCheckInterval": "transaction_check_interval_ms",
    "transactionTimeOut": "transaction_timeout_ms",
    "transactionCheckMax": "transaction_check_max",
    "rejectTransactionMessage": "reject_transaction_message",
    "enableTopicMessageTypeCheck": "enable_topic_message_type_check",
    "enableMixedMessageType": "enable_mixed_message_type",
    "timerWheelEnable": "timer_wheel_enable",
    "timerPrecisionMs": "timer_precision_ms",
    "timerMaxDelaySec": "timer_max_delay_sec",
    "mappedFileSizeTimerLog": "mapped_file_size_timer_log",
    "timerFlushIntervalMs": "timer_flush_interval_ms",
    "enablePropertyFilter": "enable_property_filter",
    "grpcServerPort": "grpc_listen_port",
    "aclFile": "acl_file",
    "accessKey": "access_key",
    "secretKey": "secret_key",
    "traceEnable": "trace_enable",
    # RocketMQ's TLS system properties, as quoted keys ("tls.server.mode" = ...) or as tables.
    "tls.server.mode": "tls_server_mode",
    "tls.server.certPath": "tls_server_cert_path",
    "tls.server.keyPath": "tls_server_key_path",
    "tls.server.keyPassword": "tls_server_key_password",
    "tls.server.trustCertPath": "tls_server_trust_cert_path",
    "tls.server.need.client.auth": "tls_server_need_client_auth",
    "tls.enable": "tls_enable",
    "tls.client.trustCertPath": "tls_client_trust_cert_path",
    "tls.client.authServer": "tls_client_auth_server",
    "tls.client.certPath": "tls_client_cert_path",
    "tls.client.keyPath": "tls_client_key_path",
}


def _dotted(prefix: str, table: dict[str, Any]) -> dict[str, Any]:
    """`[tls.server] mode = ...` (or `tls.server.mode = ...`) as "tls.server.mode"."""
    flat: dict[str, Any] = {}
    for key, value in table.items():
        name = f"{prefix}.{key}"
        if isinstance(value, dict):
            flat.update(_dotted(name, value))
        else:
            flat[name] = value
    return flat


def load_config(path: StrPath | None, base: BrokerConfig | None = None, **overrides: Any) -> BrokerConfig:
    """TOML file (snake_case or broker.conf camelCase keys), then explicit overrides."""
    cfg = base or BrokerConfig()
    values: dict[str, Any] = {}
    if path is not None:
        with open(path, "rb") as fh:
            raw = tomllib.load(fh)
        section = raw.get("broker", raw)
        if isinstance(section.get("tls"), dict):
            section = {**section, **_dotted("tls", section["tls"])}
        names = {f.name: f for f in dataclasses.fields(BrokerConfig)}
        for key, value in section.items():
            if isinstance(value, dict):
                continue
            name = _CAMEL_ALIASES.get(key, key)
            if name not in names:
                raise ConfigError(key, "unknown key")
            values[name] = value
    values.update({k: v for k, v in overrides.items() if v is not None})
    return dataclasses.replace(cfg, **values).validate()
