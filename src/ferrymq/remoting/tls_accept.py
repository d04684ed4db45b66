"""Setting up an accepted connection on a port with TLS turned on (RocketMQ's handshake
handler): the first byte the client sends says whether it opens a TLS handshake; it is peeked
at (MSG_PEEK leaves it in the socket), so either the TLS layer or the plain protocol reads
the stream from its start."""

from __future__ import annotations

import asyncio
import logging
import socket
import ssl
import time
from collections.abc import Callable

from ..common.codes import ResponseCode
from .codec import FrameSplitter, decode_frame, encode_frame
from .command import RemotingCommand
from .errors import RemotingError
from .tls import TLS_HANDSHAKE_BYTE, TlsMode, TlsServerSettings, server_context

log = logging.getLogger("ferrymq.remoting")

# How the refusal's remark starts: clients recognise a TLS-only server by it (client/errors.py).
TLS_REQUIRED_PREFIX = "TLS required:"
PLAIN_REFUSED_REMARK = (f"{TLS_REQUIRED_PREFIX} this port only accepts TLS connections (tls_server_mode=enforcing); "
                        "connect with TLS (ferrymq clients: tls=True, CLI: --tls)")
# A refused plain client's first request is read to answer it by its opaque; a bigger one is
# not waited for.
_REFUSAL_FRAME_LIMIT = 64 * 1024


class TlsAcceptor:
    """Made in a running loop (the server's start)."""

    def __init__(self, settings: TlsServerSettings) -> None:
        self.settings = settings.validate()
        self.mode = settings.mode
        self.context = server_context(settings)
        self._closing: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.handshake_failures = 0
        self.plain_refused = 0
        self._last_log = float("-inf")

    async def adopt(self, loop: asyncio.AbstractEventLoop, client: socket.socket,
                    factory: Callable[[], asyncio.Protocol]) -> None:
        """Serve `client` with a protocol from `factory`, over TLS or not; close it when it is
        refused or fails its handshake. Never raises for what a client does."""
        first = await self._first_byte(loop, client)
        if first is None:
            client.close()
            return
        peer = _peer(client)  # asked now: a peer that gives up has no name afterwards
        if first == TLS_HANDSHAKE_BYTE:
            try:
                await loop.connect_accepted_socket(factory, client, ssl=self.context,
                                                   ssl_handshake_timeout=self.settings.handshake_timeout)
            except (OSError, TimeoutError) as exc:
                client.close()
                self.handshake_failures += 1
                self._say(logging.WARNING, "TLS handshake with %s failed: %s", peer, _reason(exc))
            return
        if self.mode is TlsMode.ENFORCING:
            self.plain_refused += 1
            self._say(logging.WARNING, "refused a plain connection from %s: this server runs in TLS "
                      "enforcing mode", peer)
            await loop.connect_accepted_socket(lambda: _PlainRefusal(self.settings.handshake_timeout), client)
            return
        await loop.connect_accepted_socket(factory, client)

    async def _first_byte(self, loop: asyncio.AbstractEventLoop, client: socket.socket) -> int | None:
        """The first byte the client sent, None if it closed or said nothing in time."""
        deadline = loop.time() + self.settings.handshake_timeout
        fd = client.fileno()
        while not self._closing.done():
            ready: asyncio.Future[None] = loop.create_future()
            loop.add_reader(fd, _set_once, ready)
            try:
                await asyncio.wait((ready, self._closing), timeout=max(0.0, deadline - loop.time()),
                                   return_when=asyncio.FIRST_COMPLETED)
            finally:
                loop.remove_reader(fd)
            if not ready.done():
                return None  # timed out, or the server is stopping
            try:
                data = client.recv(1, socket.MSG_PEEK)
            except (BlockingIOError, InterruptedError):
                continue
            except OSError:
                return None
            return data[0] if data else None
        return None

    def close(self) -> None:
        """Stop waiting for first bytes: those connections are closed."""
        if not self._closing.done():
            self._closing.set_result(None)

    def _say(self, level: int, fmt: str, *args: object) -> None:
        # A scanner or a misconfigured fleet must not flood the log: one line per 10 s.
        now = time.monotonic()
        if now - self._last_log >= 10.0:
            self._last_log = now
            log.log(level, fmt, *args)


def _set_once(fut: asyncio.Future[None]) -> None:
    if not fut.done():
        fut.set_result(None)


def _peer(client: socket.socket) -> str:
    try:
        host, port = client.getpeername()[:2]
    except OSError:
        return "?"
    return f"{host}:{port}"


def _reason(exc: BaseException) -> str:
    if isinstance(exc, ssl.SSLError):
        return str(exc.reason or exc)
    return str(exc) or type(exc).__name__


class _PlainRefusal(asyncio.Protocol):
    """Answers a plain client's first request with why it is refused, then closes: the client
    reports that rather than a connection closed for no reason it can see."""

    def __init__(self, timeout: float) -> None:
        self._splitter = FrameSplitter(_REFUSAL_FRAME_LIMIT)
        self._timeout = timeout
        self._transport: asyncio.Transport | None = None
        self._timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport  # type: ignore[assignment]
        self._timer = asyncio.get_running_loop().call_later(self._timeout, transport.close)

    def data_received(self, data: bytes) -> None:
        transport = self._transport
        if transport is None or transport.is_closing():
            return
        try:
            frames = self._splitter.feed(data)
            if not frames:
                return
            req = decode_frame(frames[0])
        except RemotingError:
            transport.close()
            return
        if not req.is_oneway and not req.is_response:
            resp = RemotingCommand.make_response_to(req, ResponseCode.SYSTEM_ERROR, remark=PLAIN_REFUSED_REMARK)
            resp.flag |= 1
            transport.write(encode_frame(resp))
        transport.close()

    def connection_lost(self, exc: Exception | None) -> None:
        if self._timer is not None:
            self._timer.cancel()
