"""Running the servers: `ferrymq standalone`, `ferrymq namesrv`, `ferrymq broker`, `ferrymq proxy`.

Each runs one asyncio loop until SIGINT/SIGTERM, then stops cleanly: held pulls answered,
offsets persisted, the store flushed and its abort file removed."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING

from .acl import AclConfigError, load_rules
from .broker.config import BrokerConfig
from .broker.controller import Broker
from .common.dirlock import DirectoryLockedError
from .common.heap import freeze_startup_heap, use_server_thresholds
from .metrics import MetricsServer, metrics_server
from .namesrv import NameServer, NamesrvConfig, NamesrvConfigError
from .namesrv.controller import ControllerStateError
from .remoting.loop import install_uvloop
from .remoting.tls import TlsMode, TlsServerSettings, server_context
from .store import StoreError

if TYPE_CHECKING:
    from .grpc.server import GrpcServer
    from .proxy.server import ProxyConfig

log = logging.getLogger("ferrymq")


async def _serve_until_signal(start: Callable[[], Awaitable[str]], stop: Callable[[], Awaitable[None]]) -> None:
    loop = asyncio.get_running_loop()
    stopped = asyncio.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError):
            loop.add_signal_handler(sig, stopped.set)
    try:
        line = await start()
        # What starting built lives as long as the server: full collections skip it.
        freeze_startup_heap()
        use_server_thresholds()
        print(line, flush=True)
        await stopped.wait()
    finally:
        await stop()


class _GrpcFront:
    """The gRPC endpoint (apache.rocketmq.v2) over a started broker, on its grpc_port (-1: off).
    The server builds it, not the broker: the broker is the RocketMQ core the front serves."""

    def __init__(self) -> None:
        self.server: GrpcServer | None = None

    async def start(self, broker: Broker) -> str:
        """Start it; returns the ready line's field ("" when it is off)."""
        port = broker.config.grpc_port
        if port < 0:
            return ""
        try:
            from .grpc.server import broker_grpc_server
        except ImportError as exc:
            # An install without grpcio or without the generated protocol modules (they are
            # built by the install from proto/) still serves the 4.x protocol; the ready line
            # then has no grpc= field.
            log.error("gRPC endpoint off: %s (reinstall the package to generate it)", exc)
            return ""
        self.server = broker_grpc_server(broker)
        return f" grpc={await self.server.start(port)}"

    async def stop(self) -> None:
        if self.server is not None:
            await self.server.stop()


class _Metrics:
    """The optional `/metrics` endpoint (--metrics-port; None: off). HTTPS with the server's
    certificate when its TLS mode is enforcing; permissive ports accept plain clients, so the
    endpoint stays plain HTTP there."""

    def __init__(self, port: int | None, host: str, tls: TlsServerSettings) -> None:
        self.port, self.host, self.tls = port, host, tls
        self.server: MetricsServer | None = None

    async def start(self, broker: Broker | None, namesrv: NameServer | None) -> str:
        """Start it for the servers given; returns the ready line's field."""
        if self.port is None:
            return ""
        from .metrics.broker import BrokerCollector
        from .metrics.namesrv import NamesrvCollector

        sources = [BrokerCollector(broker).collect] if broker is not None else []
        if namesrv is not None:
            sources.append(NamesrvCollector(namesrv).collect)
        context = server_context(self.tls) if self.tls.mode is TlsMode.ENFORCING else None
        self.server = metrics_server(sources, host=self.host, port=self.port, tls=context)
        return f" metrics={await self.server.start()}"

    async def stop(self) -> None:
        if self.server is not None:
            await self.server.stop()


def _standalone_credentials(config: BrokerConfig) -> BrokerConfig:
    """With an ACL file and no credentials of its own, the broker signs its registration with
    the file's first admin account: its name server checks the same file."""
    if not config.acl_file or config.access_key:
        return config
    admin = load_rules(Path(config.acl_file)).first_admin()
    if admin is None:
        log.warning("ACL file %s has no admin account: the broker cannot register with the name "
                    "server (set access_key/secret_key or add an account with admin: true)", config.acl_file)
        return config
    return config.replace(access_key=admin.access_key, secret_key=admin.secret_key)


def run_standalone(broker_config: BrokerConfig, namesrv_port: int, metrics_port: int | None = None) -> int:
    install_uvloop()
    try:
        broker_config = _standalone_credentials(broker_config)
        namesrv = NameServer(NamesrvConfig(
            host=broker_config.host, port=namesrv_port,
            acl_file=Path(broker_config.acl_file) if broker_config.acl_file else None,
            acl_reload_interval_ms=broker_config.acl_reload_interval_ms,
            tls=broker_config.tls_server()))
    except AclConfigError as exc:
        print(f"ferrymq: cannot start: {exc}", file=sys.stderr)
        return 1
    holder: dict[str, Broker] = {}
    grpc = _GrpcFront()
    metrics = _Metrics(metrics_port, broker_config.host, broker_config.tls_server())

    async def start() -> str:
        ns_addr = await namesrv.start()
        broker = Broker(broker_config.replace(namesrv_addr=ns_addr))
        holder["broker"] = broker
        broker_addr = await broker.start()
        grpc_field = await grpc.start(broker)
        # Ready means routable: the first registration has reached the name server.
        await broker.register_once()
        return (f"namesrv={ns_addr} broker={broker_addr} ha={broker.replication.ha_addr}" + grpc_field
                + await metrics.start(broker, namesrv))

    async def stop() -> None:
        await metrics.stop()
        await grpc.stop()
        if "broker" in holder:
            await holder["broker"].stop()
        await namesrv.stop()

    return _run(start, stop)


def run_namesrv(config: NamesrvConfig, metrics_port: int | None = None) -> int:
    install_uvloop()
    try:
        namesrv = NameServer(config)
    except (AclConfigError, NamesrvConfigError) as exc:
        print(f"ferrymq: cannot start: {exc}", file=sys.stderr)
        return 1
    metrics = _Metrics(metrics_port, config.host, config.tls)

    async def start() -> str:
        return f"namesrv={await namesrv.start()}" + await metrics.start(None, namesrv)

    async def stop() -> None:
        await metrics.stop()
        await namesrv.stop()

    return _run(start, stop)


def run_broker(config: BrokerConfig, metrics_port: int | None = None) -> int:
    install_uvloop()
    try:
        broker = Broker(config)
    except AclConfigError as exc:
        print(f"ferrymq: cannot start: {exc}", file=sys.stderr)
        return 1
    grpc = _GrpcFront()
    metrics = _Metrics(metrics_port, config.host, config.tls_server())

    async def start() -> str:
        addr = await broker.start()
        grpc_field = await grpc.start(broker)
        await broker.register_once()
        line = f"broker={addr} ha={broker.replication.ha_addr}" + grpc_field
        return line + await metrics.start(broker, None)

    async def stop() -> None:
        await metrics.stop()
        await grpc.stop()
        await broker.stop()

    return _run(start, stop)


def run_proxy(config: ProxyConfig) -> int:
    """`ferrymq proxy`: the gRPC front of every broker group registered with the name server."""
    from .proxy.server import Proxy

    install_uvloop()
    try:
        proxy = Proxy(config)
    except AclConfigError as exc:
        print(f"ferrymq: cannot start: {exc}", file=sys.stderr)
        return 1
    # FERRYMQ_PROXY_PROFILE=FILE: cProfile over the whole run, its stats written to FILE at a
    # clean stop (SIGTERM); how the proxy's costs per message were found (bench/grpc_bench.py).
    profile_to = os.environ.get("FERRYMQ_PROXY_PROFILE")
    if not profile_to:
        return _run(proxy.start, proxy.stop)
    import cProfile

    profiler = cProfile.Profile()
    profiler.enable()
    try:
        return _run(proxy.start, proxy.stop)
    finally:
        profiler.disable()
        profiler.dump_stats(profile_to)


def _run(start: Callable[[], Awaitable[str]], stop: Callable[[], Awaitable[None]]) -> int:
    try:
        asyncio.run(_serve_until_signal(start, stop))
    except (OSError, StoreError, ControllerStateError, AclConfigError,
            DirectoryLockedError, NamesrvConfigError) as exc:
        # A port in use, a store that recovery refuses (corruption in the middle of the log
        # names its file and offset), a directory another server holds or an unreadable
        # controller state: one clear line, no traceback.
        print(f"ferrymq: cannot start: {exc}", file=sys.stderr)
        return 1
    return 0
