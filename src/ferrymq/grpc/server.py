"""The gRPC endpoint: a grpc.aio server serving apache.rocketmq.v2's MessagingService on a
backend. Inside the broker process (broker_grpc_server) it serves the broker's store, on the
broker's loop next to the remoting port; `ferrymq proxy` serves every broker group with it."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from dataclasses import dataclass

import grpc

from ..broker.context import BrokerContext
from ..common.delay import parse_delay_levels
from ..remoting.tls import ClientAuth, TlsServerSettings
from .backend import Backend
from .consume import Consumer
from .local import LocalBackend
from .pb import definition_pb2 as pb
from .pb import service_pb2_grpc as sgrpc
from .route import endpoints
from .send import Sender
from .service import MessagingService
from .sessions import Sessions
from .settings import ServerSettings

log = logging.getLogger("ferrymq.grpc")

# Bodies up to the broker's maximum message size, plus room for the request's other fields.
_MESSAGE_OVERHEAD = 1 << 20


@dataclass(frozen=True, slots=True)
class FrontConfig:
    """What the endpoint itself needs, whichever backend serves it."""

    host: str
    tls: TlsServerSettings
    max_message_size: int
    # A client silent this long (no request, no heartbeat) leaves its groups.
    channel_expired_timeout_ms: int = 120_000


class GrpcServer:
    def __init__(self, backend: Backend, config: FrontConfig, settings: Callable[[], ServerSettings], *,
                 acl: object | None = None, expire_interval_s: float = 10.0) -> None:
        self._backend = backend
        self._config = config
        self._acl = acl
        self.settings = settings
        self.sessions = Sessions(backend.registry, backend.now_ms, translate=backend.translate)
        self.sender = Sender(backend)
        self.consumer = Consumer(backend)
        self._server: grpc.aio.Server | None = None
        self._host = config.host
        self._port = 0
        self._expire_interval_s = expire_interval_s
        self._expirer: asyncio.Task[None] | None = None
        self.service = MessagingService(backend, self.sessions, self.sender, self.consumer, self.settings,
                                        self.endpoints)

    @property
    def addr(self) -> str:
        return f"{self._host}:{self._port}" if self._port else ""

    def endpoints(self) -> pb.Endpoints:
        return endpoints(self._host, self._port)

    async def start(self, port: int) -> str:
        limit = self._config.max_message_size + _MESSAGE_OVERHEAD
        # The interceptor is imported only with ACL on: it needs PyYAML's rules module.
        interceptors = [_acl_interceptor(self._acl)] if self._acl is not None else []
        server = grpc.aio.server(interceptors=interceptors, options=[
            ("grpc.max_receive_message_length", limit),
            ("grpc.max_send_message_length", limit),
            ("grpc.so_reuseport", 0),
        ])
        sgrpc.add_MessagingServiceServicer_to_server(self.service, server)  # type: ignore[no-untyped-call]
        tls = self._config.tls
        try:
            if tls.enabled:
                bound = server.add_secure_port(f"{self._host}:{port}", server_credentials(tls))
            else:
                bound = server.add_insecure_port(f"{self._host}:{port}")
        except RuntimeError:
            bound = 0
        if bound == 0:
            raise OSError(f"gRPC port {self._host}:{port} (--grpc-port) cannot be bound (in use?)")
        await server.start()
        self._server = server
        self._port = bound
        self._expirer = asyncio.create_task(self._expire_loop(), name="ferrymq-grpc-expire")
        log.info("gRPC endpoint (apache.rocketmq.v2) listening on %s%s", self.addr, " (TLS)" if tls.enabled else "")
        return self.addr

    async def _expire_loop(self) -> None:
        while True:
            await asyncio.sleep(self._expire_interval_s)
            self.sessions.expire(self._config.channel_expired_timeout_ms)

    async def stop(self, grace: float = 1.0) -> None:
        if self._expirer is not None:
            self._expirer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._expirer
        if self._server is not None:
            await self._server.stop(grace)
            self._server = None


def broker_grpc_server(broker: BrokerContext) -> GrpcServer:
    """The endpoint of a broker's own --grpc-port (RocketMQ's local mode)."""
    cfg = broker.config

    def settings() -> ServerSettings:
        levels = list(parse_delay_levels(broker.config.message_delay_level))
        return ServerSettings(
            max_body_size=broker.config.max_message_size,
            max_reconsume_times=broker.config.max_reconsume_times,
            # A 4.x consumer's first retry is delay level 3, each further one the next level.
            retry_delays_ms=levels[2:] or levels,
            validate_message_type=broker.config.enable_topic_message_type_check,
        )

    front = FrontConfig(host=cfg.host, tls=cfg.tls_server(), max_message_size=cfg.max_message_size,
                        channel_expired_timeout_ms=cfg.channel_expired_timeout_ms)
    return GrpcServer(LocalBackend(broker), front, settings, acl=getattr(broker, "acl", None))


def _acl_interceptor(acl: object) -> grpc.aio.ServerInterceptor:
    from ..acl import AclFile
    from .acl_guard import GrpcAclInterceptor

    assert isinstance(acl, AclFile)
    return GrpcAclInterceptor(acl)


def server_credentials(tls: TlsServerSettings) -> grpc.ServerCredentials:
    """The gRPC port follows the remoting ports' TLS settings, except that it cannot tell TLS
    from plain on one port: permissive serves TLS only there (docs/security.md)."""
    if tls.key_password:
        raise OSError("the gRPC endpoint cannot use a password-protected TLS key (tls_server_key_password); "
                      "give an unencrypted key or turn the endpoint off (grpc_listen_port = -1)")
    chain = _read(tls.cert_path, "tls_server_cert_path")
    key = _read(tls.key_path, "tls_server_key_path")
    roots = None
    if tls.need_client_auth is not ClientAuth.NONE and tls.trust_cert_path:
        roots = _read(tls.trust_cert_path, "tls_server_trust_cert_path")
    return grpc.ssl_server_credentials([(key, chain)], root_certificates=roots,
                                       require_client_auth=tls.need_client_auth is ClientAuth.REQUIRE)


def _read(path: str, key: str) -> bytes:
    try:
        with open(path, "rb") as fh:
            return fh.read()
    except OSError as exc:
        raise OSError(exc.errno, f"TLS file for the gRPC endpoint ({key}): {exc.strerror}", path) from None
