"""The `/metrics` HTTP endpoint, served from the server's own asyncio loop.

The loop, not prometheus-client's HTTP thread: collectors read broker state that only the loop
changes (dicts a thread could see mid-resize), so the state is read there, in one pass, and only
the text formatting runs in a worker thread. A scrape is one short request: the answer closes
the connection, and a client that sends nothing within the read timeout is dropped."""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import ssl
from collections.abc import Awaitable, Callable, Iterable

from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4, generate_latest
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

from ..common.errors import FerryMQError

log = logging.getLogger("ferrymq.metrics")

METRICS_PATH = "/metrics"
_MAX_HEAD = 16 * 1024


class _Frozen(Collector):
    """Families collected on the loop, handed to the formatter thread."""

    def __init__(self, families: list[Metric]) -> None:
        self._families = families

    def collect(self) -> Iterable[Metric]:
        return self._families


class MetricsPortError(FerryMQError, OSError):
    """The endpoint's port cannot be bound. Worded as the gRPC port's failure is (the port, its
    flag, "in use?") rather than as the loop's `[Errno 98] error while attempting to bind`; an
    OSError still, as bind failures were, for the callers that catch those."""

    def __init__(self, host: str, port: int, cause: OSError) -> None:
        why = " (in use?)" if cause.errno == errno.EADDRINUSE else f": {cause.strerror or cause}"
        super().__init__(f"metrics port {host}:{port} (--metrics-port) cannot be bound{why}")
        self.errno = cause.errno
        self.host = host
        self.port = port


class MetricsServer:
    def __init__(self, collect: Callable[[], Awaitable[list[Metric]]], *, host: str = "127.0.0.1", port: int = 0,
                 read_timeout_s: float = 10.0, tls: ssl.SSLContext | None = None) -> None:
        """`collect` runs on the loop at each scrape and returns every metric family (a large
        broker's is read in slices, the loop serving requests between them); with `tls` the
        endpoint is HTTPS only."""
        self._collect = collect
        self._tls = tls
        self._host = host
        self._port = port
        self._read_timeout_s = read_timeout_s
        self._server: asyncio.Server | None = None
        self._conns: set[asyncio.Task[None]] = set()
        self.addr = ""
        self.scrapes = 0

    async def start(self) -> str:
        try:
            self._server = await asyncio.start_server(
                self._serve, self._host, self._port, ssl=self._tls,
                ssl_handshake_timeout=self._read_timeout_s if self._tls else None)
        except OSError as exc:
            raise MetricsPortError(self._host, self._port, exc) from exc
        host, port = self._server.sockets[0].getsockname()[:2]
        self.addr = f"{host}:{port}"
        log.info("metrics on %s://%s%s", "https" if self._tls else "http", self.addr, METRICS_PATH)
        return self.addr

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            for task in list(self._conns):
                task.cancel()
            with contextlib.suppress(Exception):
                await self._server.wait_closed()
            self._server = None

    async def render(self) -> bytes:
        """The exposition text of one scrape."""
        families = await self._collect()
        return await asyncio.to_thread(generate_latest, _Frozen(families))

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        if task is not None:
            self._conns.add(task)
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), self._read_timeout_s)
            status, ctype, body = await self._answer(head)
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, TimeoutError, ConnectionError, ssl.SSLError):
            writer.close()
            return
        finally:
            if task is not None:
                self._conns.discard(task)
        try:
            writer.write(
                f"HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\nContent-Length: {len(body)}\r\n"
                "Connection: close\r\n\r\n".encode("ascii") + body)
            await writer.drain()
        except ConnectionError:
            pass
        finally:
            writer.close()

    async def _answer(self, head: bytes) -> tuple[str, str, bytes]:
        request_line = head.split(b"\r\n", 1)[0].decode("latin-1")
        parts = request_line.split()
        if len(parts) != 3 or len(head) > _MAX_HEAD:
            return "400 Bad Request", "text/plain", b"bad request\n"
        method, target, _ = parts
        path = target.split("?", 1)[0]
        if path not in (METRICS_PATH, METRICS_PATH + "/", "/"):
            return "404 Not Found", "text/plain", f"no {path} here; metrics are at {METRICS_PATH}\n".encode()
        if method not in ("GET", "HEAD"):
            return "405 Method Not Allowed", "text/plain", b"GET only\n"
        try:
            body = await self.render()
        except Exception:
            # A collector bug must show as a failed scrape, not take the server down.
            log.exception("metrics collection failed")
            return "500 Internal Server Error", "text/plain", b"metrics collection failed; see the server log\n"
        self.scrapes += 1
        return "200 OK", CONTENT_TYPE_PLAIN_0_0_4, b"" if method == "HEAD" else body
