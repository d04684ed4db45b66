"""`ferrymq dashboard`: the page, its assets (shipped in the package) and the JSON endpoints
on one HTTP port, with the lag sampler running beside them on the same event loop."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from importlib import resources

from ..client.admin_async import AsyncAdminClient
from ..remoting.tls import TlsMode, TlsServerSettings, server_context
from .api import DashboardApi
from .clients import AccountClients
from .gate import Actor, Gate, GateConfig, is_loopback
from .httpd import HttpError, HttpServer, Request, Response
from .lag import LagSampler, SamplerConfig
from .sessions import SessionPolicy

log = logging.getLogger(__name__)

CONTENT_TYPES = {
    ".html": "text/html; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".svg": "image/svg+xml",
    ".ico": "image/x-icon",
}
# On every answer: the page runs only its own script and style sheet, is never framed by
# another site, and sends no Referer elsewhere.
SECURITY_HEADERS = {
    "Content-Security-Policy": "default-src 'self'; img-src 'self' data:; object-src 'none'; "
                               "base-uri 'none'; form-action 'self'; frame-ancestors 'none'",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "same-origin",
}


@dataclass(frozen=True, slots=True)
class DashboardConfig:
    namesrv: str
    host: str = "127.0.0.1"
    port: int = 8080
    lag_interval: float = 10.0
    lag_history: int = 360
    timeout: float = 5.0
    # ACL account the dashboard signs its own requests with (the lag sampler's; without a
    # login, every request's).
    access_key: str | None = None
    secret_key: str | None = None
    # HTTPS (docs/security.md): the page is served with this certificate and key when given.
    https_cert: str = ""
    https_key: str = ""
    # The cluster's plain_acl.yml: with it, users log in with one of its accounts.
    acl_file: str = ""
    allow_hosts: tuple[str, ...] = ()
    sessions: SessionPolicy = field(default_factory=SessionPolicy)


def load_assets() -> dict[str, tuple[bytes, str]]:
    """Every file of the static folder by its URL path, with its content type; read once."""
    out: dict[str, tuple[bytes, str]] = {}
    folder = resources.files("ferrymq.dashboard") / "static"
    for entry in folder.iterdir():
        suffix = "." + entry.name.rsplit(".", 1)[-1] if "." in entry.name else ""
        if entry.is_file() and suffix in CONTENT_TYPES:
            out[f"/static/{entry.name}"] = (entry.read_bytes(), CONTENT_TYPES[suffix])
    if "/static/index.html" not in out:
        raise RuntimeError("the dashboard's assets are missing from the installed package")
    out["/"] = out["/static/index.html"]
    out["/login"] = out["/static/login.html"]
    return out


class Dashboard:
    def __init__(self, config: DashboardConfig) -> None:
        self.config = config
        self.admin = AsyncAdminClient(config.namesrv, timeout=config.timeout,
                                      access_key=config.access_key, secret_key=config.secret_key)
        self.sampler = LagSampler(self.admin, SamplerConfig(config.lag_interval, config.lag_history))
        self.clients = AccountClients(config.namesrv, config.timeout, self.admin,
                                      (config.access_key, config.secret_key))
        self.api = DashboardApi(self.clients, self.sampler, config.namesrv)
        self.gate = Gate(GateConfig(listen_host=config.host, https=bool(config.https_cert),
                                    acl_file=config.acl_file, allow_hosts=config.allow_hosts,
                                    sessions=config.sessions), self.cookie_name)
        self._acl_version = 0
        self.assets = load_assets()
        tls = None
        if config.https_cert:
            tls = server_context(TlsServerSettings(mode=TlsMode.ENFORCING, cert_path=config.https_cert,
                                                   key_path=config.https_key))
        self.http = HttpServer(self.handle, config.host, config.port, tls=tls, headers=SECURITY_HEADERS)

    @property
    def address(self) -> str:
        return self.http.address

    def cookie_name(self) -> str:
        # Browsers send a host's cookies to every port of it: the port in the name keeps two
        # dashboards on one host from taking each other's session.
        return f"ferrymq_session_{self.address.rpartition(':')[2]}"

    async def start(self) -> None:
        await self.http.start()
        self.gate.start()
        self.sampler.start()
        self._warn_about_setup()

    def _warn_about_setup(self) -> None:
        acl = self.gate.acl
        if acl is None:
            where = "only this host" if is_loopback(self.config.host) else f"anyone who can reach {self.address}"
            log.warning("the dashboard has no login (no --acl-file): %s can create topics and re-drive "
                        "dead letters through it", where)
            return
        own = acl.rules.accounts.get(self.config.access_key or "")
        if self.config.access_key and (own is None or own.secret_key != self.config.secret_key):
            log.warning("the dashboard's own account %s is not in %s with that secret: is it the "
                        "brokers' ACL file?", self.config.access_key, self.config.acl_file)

    async def close(self) -> None:
        await self.sampler.stop()
        await self.http.close()
        await self.gate.close()
        await self.clients.close()
        await self.admin.close()

    async def handle(self, request: Request) -> Response:
        acl = self.gate.acl
        if acl is not None and acl.version != self._acl_version:
            self._acl_version = acl.version
            await self.clients.retain(acl.rules)
        return await self.gate.handle(request, self.serve)

    async def serve(self, request: Request, actor: Actor | None) -> Response:
        if request.path.startswith("/api/"):
            return await self.api.handle(request, actor)
        if request.method not in ("GET", "HEAD"):
            raise HttpError(405, f"{request.method} is not allowed on {request.path}")
        asset = self.assets.get(request.path)
        if asset is None:
            raise HttpError(404, f"no page {request.path}")
        body, ctype = asset
        return Response(200, body, ctype)


async def serve(config: DashboardConfig, ready: Callable[[str], None]) -> None:
    """Run until SIGTERM or SIGINT; `ready` gets HOST:PORT once the port listens."""
    dashboard = Dashboard(config)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(NotImplementedError):
            loop.add_signal_handler(sig, stop.set)
    await dashboard.start()
    try:
        ready(dashboard.address)
        await stop.wait()
    finally:
        await dashboard.close()


def run_dashboard(config: DashboardConfig) -> int:
    def announce(address: str) -> None:
        print(f"dashboard={address}", flush=True)
        log.info("dashboard for name server %s on %s://%s/", config.namesrv,
                 "https" if config.https_cert else "http", address)

    try:
        asyncio.run(serve(config, announce))
    except OSError as exc:
        print(f"ferrymq: cannot start the dashboard: {exc}", file=sys.stderr)
        return 1
    return 0
