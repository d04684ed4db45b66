"""A small HTTP/1.1 server on the asyncio loop: enough for one page and its JSON calls.

Requests are read whole (headers, then a Content-Length body; no chunked uploads), handed
to one handler coroutine, and answered with a Content-Length response. Connections are kept
alive between requests, so a browser's burst of fetches does not open a socket per call."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

from ..common import jsonx
from ..common.errors import FerryMQError

log = logging.getLogger(__name__)

MAX_HEADER_BYTES = 32 * 1024
MAX_BODY_BYTES = 1024 * 1024
# A connection silent this long is closed: an idle keep-alive, or a client stalling inside a
# request (a head or body never finished).
IDLE_TIMEOUT = 30.0

REASONS = {
    200: "OK", 201: "Created", 204: "No Content", 303: "See Other", 400: "Bad Request",
    401: "Unauthorized", 403: "Forbidden", 404: "Not Found", 405: "Method Not Allowed",
    413: "Payload Too Large", 415: "Unsupported Media Type", 429: "Too Many Requests",
    500: "Internal Server Error", 502: "Bad Gateway",
}


class HttpError(FerryMQError):
    """A request the server refuses; the status, kind and message go back to the client as
    JSON (`{"error": {"type": kind, "message"}}`), with `headers` added to the answer."""

    def __init__(self, status: int, message: str, kind: str = "HttpError",
                 headers: Mapping[str, str] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.kind = kind
        self.headers = dict(headers or {})

    def response(self) -> Response:
        return Response.error(self.status, self.message, self.kind, self.headers)


@dataclass(frozen=True, slots=True)
class Request:
    method: str
    path: str
    query: dict[str, str]
    headers: dict[str, str]
    body: bytes = b""
    # The client's address as the socket sees it (a reverse proxy's, behind one).
    peer: str = ""

    def arg(self, name: str, default: str | None = None) -> str:
        value = self.query.get(name, default)
        if value is None:
            raise HttpError(400, f"missing query parameter {name!r}")
        return value

    def int_arg(self, name: str, default: int) -> int:
        text = self.query.get(name)
        if text is None or text == "":
            return default
        try:
            return int(text)
        except ValueError:
            raise HttpError(400, f"query parameter {name!r} is not an integer: {text!r}") from None

    def json(self) -> dict[str, Any]:
        """The body as a JSON object. Only `application/json` is accepted: a cross-site form
        cannot send that type without a preflight this server never approves."""
        ctype = self.headers.get("content-type", "").split(";")[0].strip().lower()
        if ctype != "application/json":
            raise HttpError(415, "send the request body as application/json")
        try:
            value = jsonx.loads(self.body or b"{}")
        except ValueError as exc:
            raise HttpError(400, f"body is not JSON: {exc}") from None
        if not isinstance(value, dict):
            raise HttpError(400, "body must be a JSON object")
        return value


@dataclass(frozen=True, slots=True)
class Response:
    status: int
    body: bytes
    content_type: str = "application/json"
    headers: dict[str, str] = field(default_factory=dict)

    @classmethod
    def json(cls, value: Any, status: int = 200) -> Response:
        return cls(status, jsonx.dumps_bytes(value), "application/json; charset=utf-8")

    @classmethod
    def error(cls, status: int, message: str, kind: str = "HttpError",
              headers: Mapping[str, str] | None = None) -> Response:
        body = jsonx.dumps_bytes({"error": {"type": kind, "message": message}})
        return cls(status, body, "application/json; charset=utf-8", dict(headers or {}))


Handler = Callable[[Request], Awaitable[Response]]


def parse_head(head: bytes) -> tuple[str, str, dict[str, str], dict[str, str]]:
    """Method, path, query (last value wins) and lower-cased headers of a request head."""
    try:
        text = head.decode("latin-1")
    except UnicodeDecodeError:  # latin-1 decodes every byte; kept for the type checker's sake
        raise HttpError(400, "undecodable request") from None
    lines = text.split("\r\n")
    parts = lines[0].split(" ")
    if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
        raise HttpError(400, f"bad request line {lines[0][:80]!r}")
    method, target, _ = parts
    headers: dict[str, str] = {}
    for line in lines[1:]:
        if not line:
            continue
        name, sep, value = line.partition(":")
        if not sep:
            raise HttpError(400, f"bad header line {line[:80]!r}")
        headers[name.strip().lower()] = value.strip()
    url = urlsplit(target)
    query = {k: v[-1] for k, v in parse_qs(url.query, keep_blank_values=True).items()}
    return method.upper(), unquote(url.path), query, headers


def encode_response(resp: Response, *, keep_alive: bool, head_only: bool = False,
                    extra: Mapping[str, str] | None = None) -> bytes:
    lines = [
        f"HTTP/1.1 {resp.status} {REASONS.get(resp.status, 'Status')}",
        f"Content-Type: {resp.content_type}",
        f"Content-Length: {len(resp.body)}",
        "Cache-Control: no-store",
        "X-Content-Type-Options: nosniff",
        f"Connection: {'keep-alive' if keep_alive else 'close'}",
    ]
    lines += [f"{k}: {v}" for k, v in (extra or {}).items() if k not in resp.headers]
    lines += [f"{k}: {v}" for k, v in resp.headers.items()]
    head = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
    return head if head_only else head + resp.body


class HttpServer:
    """Serves `handler` on host:port (0: a free port, see `address` once started)."""

    def __init__(self, handler: Handler, host: str = "127.0.0.1", port: int = 0,
                 tls: ssl.SSLContext | None = None, idle_timeout: float = IDLE_TIMEOUT,
                 headers: Mapping[str, str] | None = None) -> None:
        """With `tls`, HTTPS only. `headers` go on every answer, refusals included (a
        response's own headers of the same name win)."""
        self.handler = handler
        self.headers = dict(headers or {})
        self.tls = tls
        self.idle_timeout = idle_timeout
        self.host = host
        self.port = port
        self._server: asyncio.Server | None = None
        self._conns: set[asyncio.Task[None]] = set()

    @property
    def address(self) -> str:
        if self._server is None or not self._server.sockets:
            raise RuntimeError("the HTTP server is not listening")
        host, port = self._server.sockets[0].getsockname()[:2]
        return f"{host}:{port}"

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._serve, self.host, self.port, limit=MAX_HEADER_BYTES,
                                                  ssl=self.tls, ssl_handshake_timeout=10.0 if self.tls else None)

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            for task in list(self._conns):
                task.cancel()
            await asyncio.gather(*self._conns, return_exceptions=True)
            await self._server.wait_closed()
            self._server = None

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._conns.add(task)
        try:
            while await self._one(reader, writer):
                pass
        except (ConnectionError, asyncio.IncompleteReadError, TimeoutError):
            pass
        finally:
            self._conns.discard(task)
            writer.close()
            with contextlib.suppress(ConnectionError, OSError):
                await writer.wait_closed()

    async def _one(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
        """Answer one request; False when the connection is to be closed."""
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), self.idle_timeout)
        except asyncio.IncompleteReadError as exc:
            if exc.partial:
                raise
            return False  # the client closed between requests
        except asyncio.LimitOverrunError:
            writer.write(encode_response(Response.error(413, "request head too large"), keep_alive=False,
                                         extra=self.headers))
            await writer.drain()
            return False
        try:
            method, path, query, headers = parse_head(head[:-4])
            length = int(headers.get("content-length", "0") or "0")
            if length < 0 or length > MAX_BODY_BYTES:
                raise HttpError(413, f"body of {length} bytes (at most {MAX_BODY_BYTES})")
            if "chunked" in headers.get("transfer-encoding", "").lower():
                raise HttpError(400, "chunked request bodies are not accepted")
        except HttpError as exc:
            writer.write(encode_response(exc.response(), keep_alive=False, extra=self.headers))
            await writer.drain()
            return False
        body = await asyncio.wait_for(reader.readexactly(length), self.idle_timeout) if length else b""
        peer = writer.get_extra_info("peername")
        request = Request(method, path, query, headers, body, peer[0] if isinstance(peer, tuple) else "")
        try:
            response = await self.handler(request)
        except HttpError as exc:
            response = exc.response()
        except Exception:
            log.exception("%s %s failed", method, path)
            response = Response.error(500, "internal error (see the dashboard's log)", "InternalError")
        keep_alive = headers.get("connection", "").lower() != "close"
        writer.write(encode_response(response, keep_alive=keep_alive, head_only=method == "HEAD",
                                     extra=self.headers))
        await writer.drain()
        return keep_alive
