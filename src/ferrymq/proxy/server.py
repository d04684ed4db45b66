"""The proxy process's parts: one client instance towards the name server and brokers, the
ClusterBackend over it, the gRPC endpoint (grpc/'s GrpcServer) and the optional metrics."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field
from pathlib import Path

from prometheus_client.core import CounterMetricFamily
from prometheus_client.metrics_core import Metric

from ..acl import AclFile
from ..acl.signing import Credentials
from ..broker.config import BrokerConfig
from ..client.instance import ClientInstance, InstanceConfig
from ..grpc.server import FrontConfig, GrpcServer
from ..metrics import MetricsServer, metrics_server
from ..remoting.tls import TlsClientSettings, TlsMode, TlsServerSettings, server_context
from .backend import ClusterBackend
from .defaults import ROUTE_REFRESH_S, SEND_ISOLATION_S

log = logging.getLogger("ferrymq.proxy")


@dataclass(frozen=True, slots=True)
class ProxyConfig:
    namesrv: str
    host: str = "127.0.0.1"
    grpc_port: int = 8081
    metrics_port: int | None = None
    # RocketMQ's plain_acl.yml for the SDKs' signed calls; its first admin account also signs
    # the proxy's own requests to the brokers unless access_key is given.
    acl_file: Path | None = None
    access_key: str = ""
    secret_key: str = ""
    tls_server: TlsServerSettings = field(default_factory=TlsServerSettings)
    tls_client: TlsClientSettings = field(default_factory=TlsClientSettings)
    request_timeout_s: float = 3.0
    send_isolation_s: float = SEND_ISOLATION_S
    route_refresh_s: float = ROUTE_REFRESH_S
    channel_expired_timeout_ms: int = 120_000


class Proxy:
    def __init__(self, config: ProxyConfig) -> None:
        self.config = config
        self.acl = AclFile(config.acl_file) if config.acl_file is not None else None
        credentials = None
        if config.access_key:
            credentials = Credentials(config.access_key, config.secret_key)
        elif self.acl is not None:
            admin = self.acl.rules.first_admin()
            if admin is not None:
                credentials = Credentials(admin.access_key, admin.secret_key)
        self._instance_config = InstanceConfig(namesrv=config.namesrv, request_timeout=config.request_timeout_s,
                                               credentials=credentials, tls=config.tls_client)
        self.instance: ClientInstance | None = None
        self.backend: ClusterBackend | None = None
        self.grpc: GrpcServer | None = None
        self.metrics: MetricsServer | None = None
        self._acl_task: asyncio.Task[None] | None = None

    async def start(self) -> str:
        """Start it; returns the ready line."""
        cfg = self.config
        # The remoting client binds to the running loop: built here, not in __init__.
        self.instance = ClientInstance(self._instance_config, 1)
        self.instance.ensure_started()
        backend = self.backend = ClusterBackend(self.instance, channel_expired_ms=cfg.channel_expired_timeout_ms,
                                                send_isolation_s=cfg.send_isolation_s,
                                                route_ttl_s=cfg.route_refresh_s)
        # The brokers' settings before the first client (a broker not up yet: the defaults
        # until a later request learns them).
        try:
            await asyncio.wait_for(backend.brokers.learn(), cfg.request_timeout_s)
        except TimeoutError:
            log.info("the brokers' settings not learned within %ss: the defaults until they are",
                     cfg.request_timeout_s)
        # The gRPC frame limit is fixed at start: a broker allowing larger messages later is
        # still held to what the proxy's start saw, or the default, whichever is larger.
        front = FrontConfig(host=cfg.host, tls=cfg.tls_server,
                            max_message_size=max(backend.limits.max_message_size, BrokerConfig().max_message_size),
                            channel_expired_timeout_ms=cfg.channel_expired_timeout_ms)
        self.grpc = GrpcServer(backend, front, lambda: backend.settings, acl=self.acl)
        if self.acl is not None:
            self._acl_task = asyncio.create_task(self.acl.run(), name="ferrymq-acl-reload")
        line = f"proxy grpc={await self.grpc.start(cfg.grpc_port)}"
        if cfg.metrics_port is not None:
            context = server_context(cfg.tls_server) if cfg.tls_server.mode is TlsMode.ENFORCING else None
            self.metrics = metrics_server([self._collect], host=cfg.host, port=cfg.metrics_port, tls=context)
            line += f" metrics={await self.metrics.start()}"
        return line

    async def _collect(self) -> list[Metric]:
        family = CounterMetricFamily("ferrymq_proxy_messages", "Messages through the proxy, by what happened to them",
                                     labels=["kind"])
        counts = self.backend.counts if self.backend is not None else {}
        for kind, value in sorted(counts.items()):
            family.add_metric([kind], value)
        failures = CounterMetricFamily("ferrymq_proxy_send_failures",
                                       "Sends the proxy could not forward to a broker group (no answer in time, "
                                       "connection lost); each isolates the group for a while", labels=["broker"])
        for broker, value in sorted((self.backend.send_failures if self.backend is not None else {}).items()):
            failures.add_metric([broker], value)
        return [family, failures]

    async def stop(self) -> None:
        if self._acl_task is not None:
            self._acl_task.cancel()
        if self.metrics is not None:
            await self.metrics.stop()
        if self.grpc is not None:
            await self.grpc.stop()
        if self.backend is not None:
            await self.backend.close()
        if self.instance is not None:
            await self.instance.close()
