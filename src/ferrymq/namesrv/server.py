"""The name server process: REGISTER/UNREGISTER_BROKER and route queries over remoting."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
from dataclasses import dataclass, field
from typing import Any

from ..acl import AclFile, AclGuard, GuardScope
from ..common import jsonx
from ..common.codes import RequestCode, ResponseCode
from ..common.dirlock import DirectoryLock
from ..common.errors import FerryMQError
from ..common.headers import fields, opt_int, opt_str, req_int, req_str
from ..common.javaprops import format_properties, parse_properties
from ..common.paths import OptionalPathField, PathField
from ..common.registration import FULL_REQUIRED_FIELD, INCREMENT_FIELD
from ..remoting import Connection, RemotingCommand, RemotingServer, ServerConfig
from ..remoting.tls import TlsServerSettings
from .controller import ReplicaController
from .controller_api import ControllerApi
from .etcd import EtcdUnavailableError, parse_endpoints
from .kvconfig import ORDER_TOPIC_CONFIG, KvConfig
from .operator_requests import OperatorRequests
from .quorum import DEFAULT_LEASE_TTL_S, EtcdQuorum, QuorumConfig
from .routes import RouteRegistry

log = logging.getLogger("ferrymq.namesrv")


class NamesrvConfigError(FerryMQError, ValueError):
    """Name server settings that cannot work together, or a quorum it cannot reach at start."""

    def __init__(self, key: str, reason: str) -> None:
        super().__init__(f"{key}: {reason}")
        self.key = key
        self.reason = reason


@dataclass(frozen=True)  # no slots: controller_dir and acl_file are path fields
class NamesrvConfig:
    host: str = "127.0.0.1"
    port: int = 9876
    broker_expire_ms: int = 120_000
    scan_interval_ms: int = 10_000
    # Controller mode (docs/replication.md, "Controller"): this name server also picks each
    # broker group's master.
    enable_controller: bool = False
    controller_dir: PathField = PathField("ferrymq-controller")
    controller_lease_ms: int = 3000
    controller_scan_interval_ms: int = 500
    # Quorum mode (docs/replication.md, "Three controllers"): the etcd endpoints
    # ("http://h:p,http://h:p,...") the controllers of several name servers agree through; the
    # state then lives in etcd, not in controller_dir. "": one controller, controller.json.
    controller_etcd: str = ""
    controller_etcd_prefix: str = "/ferrymq/controller"
    controller_etcd_lease_s: int | None = None  # None: 2 (QuorumConfig's); only with controller_etcd
    # plain_acl.yml (docs/security.md): broker registrations, unregistrations and route deletions
    # must then be signed by an admin account of it. None: no checks.
    acl_file: OptionalPathField = OptionalPathField()
    acl_reload_interval_ms: int = 1000
    tls: TlsServerSettings = field(default_factory=TlsServerSettings)  # docs/security.md
    # RocketMQ's kvConfigPath: where the KV config is kept (None: in memory only).
    kv_config_path: OptionalPathField = OptionalPathField()
    # RocketMQ's orderMessageEnable: routes carry the topic's ORDER_TOPIC_CONFIG KV value as
    # orderTopicConf.
    order_message_enable: bool = False
    # RocketMQ's enableAllTopicList: GET_ALL_TOPIC_LIST_FROM_NAMESERVER is refused when off.
    enable_all_topic_list: bool = True

    def validate(self) -> NamesrvConfig:
        # The etcd endpoints only mean something to a controller: without one they were
        # ignored, and an operator who forgot --enable-controller ran no controller at all.
        if self.controller_etcd and not self.enable_controller:
            raise NamesrvConfigError("--controller-etcd", "needs --enable-controller (the etcd endpoints are "
                                     "where this name server's controller agrees with the others')")
        if self.controller_etcd_lease_s is not None and not self.controller_etcd:
            raise NamesrvConfigError("--controller-etcd-lease-s", "is the etcd lease of quorum mode: it needs "
                                     "--controller-etcd (and --enable-controller)")
        if self.controller_etcd:
            try:
                parse_endpoints(self.controller_etcd)
            except ValueError as exc:
                raise NamesrvConfigError("--controller-etcd", str(exc)) from None
        return self


# GET_NAMESRV_CONFIG's keys (RocketMQ's NamesrvConfig names) -> the field; UPDATE_NAMESRV_CONFIG
# changes only RUNTIME_KEYS: the others are read once at start (ports, paths, controller mode).
CONFIG_KEYS = {
    "bindAddress": "host",
    "listenPort": "port",
    "scanNotActiveBrokerInterval": "scan_interval_ms",
    "brokerChannelExpiredTime": "broker_expire_ms",
    "enableControllerInNamesrv": "enable_controller",
    "kvConfigPath": "kv_config_path",
    "orderMessageEnable": "order_message_enable",
    "enableAllTopicList": "enable_all_topic_list",
}
RUNTIME_KEYS = ("scanNotActiveBrokerInterval", "brokerChannelExpiredTime", "orderMessageEnable",
                "enableAllTopicList")


def config_properties(cfg: NamesrvConfig) -> dict[str, str]:
    out: dict[str, str] = {}
    for key, name in CONFIG_KEYS.items():
        value = getattr(cfg, name)
        out[key] = ("true" if value else "false") if isinstance(value, bool) else ("" if value is None else str(value))
    return out


def apply_runtime_update(cfg: NamesrvConfig, values: dict[str, str]) -> NamesrvConfig:
    """`cfg` with `values` applied, all or nothing; ValueError names the first key refused."""
    changes: dict[str, Any] = {}
    for key, text in values.items():
        if key not in RUNTIME_KEYS:
            why = "unknown key" if key not in CONFIG_KEYS else "cannot change while the name server runs"
            raise ValueError(f"{key}: {why}; keys that can: {', '.join(RUNTIME_KEYS)}")
        name = CONFIG_KEYS[key]
        if isinstance(getattr(cfg, name), bool):
            if text.strip().lower() not in ("true", "false"):
                raise ValueError(f"{key}: {text!r} is not true or false")
            changes[name] = text.strip().lower() == "true"
        else:
            try:
                number = int(text.strip())
            except ValueError:
                raise ValueError(f"{key}: {text!r} is not an integer") from None
            if number <= 0:
                raise ValueError(f"{key}: must be positive, not {number}")
            changes[name] = number
    return dataclasses.replace(cfg, **changes)


class NameServer:
    def __init__(
        self,
        config: NamesrvConfig = NamesrvConfig(),
        registry: RouteRegistry | None = None,
        controller: ReplicaController | None = None,
    ):
        """`controller` (tests inject one with their clock) is created from the config at start
        when the config enables controller mode."""
        self.config = config.validate()
        self.registry = registry or RouteRegistry(broker_expire_ms=config.broker_expire_ms)
        self.server = RemotingServer(ServerConfig(host=config.host, port=config.port, tls=config.tls))
        self._scan_task: asyncio.Task[None] | None = None
        self._controller_task: asyncio.Task[None] | None = None
        self._quorum_task: asyncio.Task[None] | None = None
        self.quorum: EtcdQuorum | None = None
        self._injected_controller = controller
        self.controller: ControllerApi | None = None
        self.address = ""
        self._dir_lock: DirectoryLock | None = None
        self.acl: AclFile | None = None
        self._acl_task: asyncio.Task[None] | None = None
        if config.acl_file is not None:
            self.acl = AclFile(config.acl_file, poll_interval=config.acl_reload_interval_ms / 1000)
            self.server.set_request_hook(AclGuard(self.acl, GuardScope.NAMESRV))
        s = self.server
        s.register(RequestCode.REGISTER_BROKER, self._register_broker)
        s.register(RequestCode.UNREGISTER_BROKER, self._unregister_broker)
        s.register(RequestCode.QUERY_DATA_VERSION, self._query_data_version)
        s.register(RequestCode.GET_ROUTEINFO_BY_TOPIC, self._route)
        s.register(RequestCode.GET_BROKER_CLUSTER_INFO, self._cluster_info)
        s.register(RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER, self._topic_list)
        s.register(RequestCode.DELETE_TOPIC_IN_NAMESRV, self._delete_topic)
        s.register(RequestCode.GET_NAMESRV_CONFIG, self._get_config)
        s.register(RequestCode.UPDATE_NAMESRV_CONFIG, self._update_config)
        self.kv = KvConfig(config.kv_config_path)
        OperatorRequests(self.registry, self.kv).install(s)

    async def start(self) -> str:
        controller = self._injected_controller
        if controller is None and self.config.enable_controller and self.config.controller_etcd:
            self.quorum = EtcdQuorum(QuorumConfig(
                tuple(parse_endpoints(self.config.controller_etcd)), self.config.controller_etcd_prefix,
                self.config.controller_etcd_lease_s or DEFAULT_LEASE_TTL_S))
            controller = ReplicaController(self.config.controller_dir, lease_ms=self.config.controller_lease_ms,
                                           backend=self.quorum)
            self.quorum.controller = controller
            await self._reach_etcd(self.quorum)
        elif controller is None and self.config.enable_controller:
            # Loaded before the port opens: a state file that cannot be read, or that another
            # name server holds, stops the start.
            self._dir_lock = DirectoryLock(self.config.controller_dir, "controller")
            self._dir_lock.acquire()
            try:
                controller = ReplicaController(self.config.controller_dir,
                                               lease_ms=self.config.controller_lease_ms)
            except BaseException:
                self._dir_lock.release()
                raise
        if controller is not None:
            self.controller = ControllerApi(controller, self.registry, self.quorum)
            self.controller.install(self.server)
        host, port = await self.server.start()
        self.address = f"{host}:{port}"
        if self.quorum is not None and self.controller is not None:
            self.quorum.my_addr = self.address
            self.quorum.on_changes = self.controller.apply
            self._quorum_task = asyncio.create_task(self.quorum.run(), name="ferrymq-controller-quorum")
        self._scan_task = asyncio.create_task(self._scan_loop())
        if self.acl is not None:
            self._acl_task = asyncio.create_task(self.acl.run(), name="ferrymq-namesrv-acl-reload")
        if self.controller is not None:
            self._controller_task = asyncio.create_task(self._controller_loop(self.controller))
        log.info("name server listening on %s", self.address)
        return self.address

    async def _reach_etcd(self, quorum: EtcdQuorum) -> None:
        """At start, one request to etcd: a wrong or dead endpoint list stops the start with
        what to check, rather than a controller that never leads and says so nowhere."""
        try:
            await asyncio.to_thread(quorum.etcd.get, quorum.leader_key)
        except EtcdUnavailableError as exc:
            raise NamesrvConfigError("--controller-etcd", (
                f"{exc}; check that etcd runs and that the list names its client URLs "
                "(etcd's --advertise-client-urls, e.g. http://127.0.0.1:2379)")) from None

    async def stop(self) -> None:
        for task in (self._scan_task, self._controller_task, self._acl_task, self._quorum_task):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        if self.quorum is not None:
            await self.quorum.close()
        await self.server.stop()
        if self._dir_lock is not None:
            self._dir_lock.release()

    async def _controller_loop(self, api: ControllerApi) -> None:
        while True:
            await asyncio.sleep(self.config.controller_scan_interval_ms / 1000)
            try:
                await api.tick()
            except Exception:
                # E.g. the state could not be written: nothing changed, the next scan retries.
                log.exception("controller scan failed")

    async def _scan_loop(self) -> None:
        while True:
            await asyncio.sleep(self.config.scan_interval_ms / 1000)
            for addr in self.registry.scan_not_active():
                log.warning("broker %s silent for over %d ms; dropped", addr, self.config.broker_expire_ms)

    def _on_close(self, conn: Connection) -> None:
        for addr in self.registry.on_channel_closed(conn):
            log.info("broker %s disconnected; its routes are removed", addr)

    async def _register_broker(self, conn: Connection, req: RemotingCommand) -> RemotingCommand:
        ext = req.ext_fields
        body = jsonx.loads(req.body) if req.body else {}
        wrapper = body.get("topicConfigSerializeWrapper") or {}
        broker_id = req_int(ext, "brokerId")
        if broker_id == 0 and self.controller is not None:
            refusal = await self.controller.check_master_registration(
                req_str(ext, "brokerName"), req_str(ext, "brokerAddr"))
            if refusal is not None:
                # A returning old master must not take the route back from the elected one.
                return RemotingCommand.make_response_to(
                    req, ResponseCode.CONTROLLER_FENCED_MASTER_EPOCH, remark=refusal
                )
        if conn.remote_addr and not getattr(conn, "_ferrymq_watch", False):
            conn.on_close(self._on_close)
            conn._ferrymq_watch = True  # type: ignore[attr-defined]
        increment = body.get(INCREMENT_FIELD)
        if isinstance(increment, dict):
            applied = self.registry.register_increment(
                broker_addr=req_str(ext, "brokerAddr"),
                broker_name=req_str(ext, "brokerName"),
                broker_id=broker_id,
                ha_server_addr=opt_str(ext, "haServerAddr", "") or "",
                base_version=increment.get("baseDataVersion") or {},
                topic_config=wrapper,
                deleted=[str(t) for t in increment.get("deletedTopics") or []],
                channel=conn,
            )
            if applied is None:
                return RemotingCommand.make_response_to(
                    req, ResponseCode.SUCCESS, ext_fields={FULL_REQUIRED_FIELD: "true"})
            return RemotingCommand.make_response_to(
                req, ResponseCode.SUCCESS,
                ext_fields=fields(masterAddr=applied.master_addr, haServerAddr=applied.ha_server_addr))
        result = self.registry.register_broker(
            cluster=req_str(ext, "clusterName"),
            broker_addr=req_str(ext, "brokerAddr"),
            broker_name=req_str(ext, "brokerName"),
            broker_id=broker_id,
            ha_server_addr=opt_str(ext, "haServerAddr", "") or "",
            topic_config=wrapper,
            channel=conn,
        )
        return RemotingCommand.make_response_to(
            req,
            ResponseCode.SUCCESS,
            ext_fields=fields(masterAddr=result.master_addr, haServerAddr=result.ha_server_addr),
        )

    async def _query_data_version(self, conn: Connection, req: RemotingCommand) -> RemotingCommand:
        version = jsonx.loads(req.body) if req.body else {}
        changed, held = self.registry.query_data_version(
            req_str(req.ext_fields, "brokerAddr"), version if isinstance(version, dict) else {})
        return RemotingCommand.make_response_to(
            req, ResponseCode.SUCCESS, ext_fields=fields(changed=changed),
            body=jsonx.dumps_bytes(held) if held is not None else None)

    async def _unregister_broker(self, conn: Connection, req: RemotingCommand) -> RemotingCommand:
        ext = req.ext_fields
        self.registry.unregister_broker(
            cluster=req_str(ext, "clusterName"),
            broker_addr=req_str(ext, "brokerAddr"),
            broker_name=req_str(ext, "brokerName"),
            broker_id=opt_int(ext, "brokerId", 0),
        )
        return RemotingCommand.make_response_to(req, ResponseCode.SUCCESS)

    async def _route(self, conn: Connection, req: RemotingCommand) -> RemotingCommand:
        topic = req_str(req.ext_fields, "topic")
        route = self.registry.route(topic)
        if route is None:
            return RemotingCommand.make_response_to(
                req,
                ResponseCode.TOPIC_NOT_EXIST,
                remark=f"No topic route info in name server for the topic: {topic}",
            )
        if self.config.order_message_enable:
            conf = self.kv.get(ORDER_TOPIC_CONFIG, topic)
            if conf is not None:
                route["orderTopicConf"] = conf
        return RemotingCommand.make_response_to(req, ResponseCode.SUCCESS, body=jsonx.dumps_bytes(route))

    async def _cluster_info(self, conn: Connection, req: RemotingCommand) -> RemotingCommand:
        body = jsonx.dumps_bytes(self.registry.cluster_info())
        return RemotingCommand.make_response_to(req, ResponseCode.SUCCESS, body=body)

    async def _topic_list(self, conn: Connection, req: RemotingCommand) -> RemotingCommand:
        if not self.config.enable_all_topic_list:
            return RemotingCommand.make_response_to(req, ResponseCode.SYSTEM_ERROR, remark="disable")
        body = jsonx.dumps_bytes({"topicList": self.registry.topic_list()})
        return RemotingCommand.make_response_to(req, ResponseCode.SUCCESS, body=body)

    async def _get_config(self, conn: Connection, req: RemotingCommand) -> RemotingCommand:
        props = config_properties(self.config)
        if self.address:  # the port bound, when 0 asked the OS for one
            props["listenPort"] = self.address.rsplit(":", 1)[1]
        body = format_properties(props).encode("utf-8")
        return RemotingCommand.make_response_to(req, ResponseCode.SUCCESS, body=body)

    async def _update_config(self, conn: Connection, req: RemotingCommand) -> RemotingCommand:
        values = parse_properties((req.body or b"").decode("utf-8"))
        try:
            self.config = apply_runtime_update(self.config, values)
        except ValueError as exc:
            return RemotingCommand.make_response_to(req, ResponseCode.INVALID_PARAMETER, remark=str(exc))
        # The registry keeps its own copy of the expiry; the scan loop reads the config anew.
        self.registry.broker_expire_ms = self.config.broker_expire_ms
        log.info("name server config updated: %s", values)
        return RemotingCommand.make_response_to(req, ResponseCode.SUCCESS)

    async def _delete_topic(self, conn: Connection, req: RemotingCommand) -> RemotingCommand:
        topic = req_str(req.ext_fields, "topic")
        self.registry.delete_topic(topic)
        return RemotingCommand.make_response_to(req, ResponseCode.SUCCESS)
