"""`ferrymq dashboard`: the page, its assets (shipped in the package) and the JSON endpoints
on one HTTP port, with the lag sampler running beside them on the same event loop."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import sys
from collections.abc import Callable
from dataclasses import dataclass
from importlib import resources

from ..client.admin_async import AsyncAdminClient
from ..remoting.tls import TlsMode, TlsServerSettings, server_context
from .api import DashboardApi
from .httpd import HttpError, HttpServer, Request, Response
from .lag import LagSampler, SamplerConfig

log = logging.getLogger(__name__)

CONTENT_TYPES = {
    ".html": "text/html; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".svg": "image/svg+xml",
    ".ico": "image/x-icon",
}


@dataclass(frozen=True, slots=True)
class DashboardConfig:
    namesrv: str
    host: str = "127.0.0.1"
    port: int = 8080
    lag_interval: float = 10.0
    lag_history: int = 360
    timeout: float = 5.0
    # ACL account the dashboard signs its requests with (an admin one, for its write actions).
    access_key: str | None = None
    secret_key: str | None = None
    # HTTPS (docs/security.md): the page is served with this certificate and key when given.
    https_cert: str = ""
    https_key: str = ""


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
    return out


class Dashboard:
    def __init__(self, config: DashboardConfig) -> None:
        self.config = config
        self.admin = AsyncAdminClient(config.namesrv, timeout=config.timeout,
                                      access_key=config.access_key, secret_key=config.secret_key)
        self.sampler = LagSampler(self.admin, SamplerConfig(config.lag_interval, config.lag_history))
        self.api = DashboardApi(self.admin, self.sampler, config.namesrv,
                                credentials=(config.access_key, config.secret_key))
        self.assets = load_assets()
        tls = None
        if config.https_cert:
            tls = server_context(TlsServerSettings(mode=TlsMode.ENFORCING, cert_path=config.https_cert,
                                                   key_path=config.https_key))
        self.http = HttpServer(self.handle, config.host, config.port, tls=tls)

    @property
    def address(self) -> str:
        return self.http.address

    async def start(self) -> None:
        await self.http.start()
        self.sampler.start()

    async def close(self) -> None:
        await self.sampler.stop()
        await self.http.close()
        await self.api.close()
        await self.admin.close()

    async def handle(self, request: Request) -> Response:
        if request.path.startswith("/api/"):
            return await self.api.handle(request)
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
