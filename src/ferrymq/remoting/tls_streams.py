"""A stream server (asyncio.start_server's callback interface) whose port follows the TLS
settings of the remoting ports, permissive mode included: used by the replication port."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from collections.abc import Awaitable, Callable

from .tls import TlsServerSettings
from .tls_accept import TlsAcceptor

log = logging.getLogger("ferrymq.remoting")

StreamCallback = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


class TlsStreamServer:
    """What callers use of asyncio.Server: `sockets`, `close()`, `wait_closed()`."""

    def __init__(self, sock: socket.socket, acceptor: TlsAcceptor, callback: StreamCallback) -> None:
        self.sockets = [sock]
        self._sock = sock
        self._acceptor = acceptor
        self._callback = callback
        self._adopting: set[asyncio.Task[None]] = set()
        self._task = asyncio.get_running_loop().create_task(self._accept_loop(), name="ferrymq-tls-accept")

    def _protocol(self) -> asyncio.Protocol:
        loop = asyncio.get_running_loop()
        return asyncio.StreamReaderProtocol(asyncio.StreamReader(loop=loop), self._callback, loop=loop)

    async def _accept_loop(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            try:
                client, _ = await loop.sock_accept(self._sock)
            except OSError as exc:
                log.error("accept() on %s failed: %s", self._sock.getsockname(), exc)
                await asyncio.sleep(1.0)
                continue
            client.setblocking(False)
            with contextlib.suppress(OSError):
                client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            task = loop.create_task(self._adopt(loop, client))
            self._adopting.add(task)
            task.add_done_callback(self._adopting.discard)

    async def _adopt(self, loop: asyncio.AbstractEventLoop, client: socket.socket) -> None:
        try:
            await self._acceptor.adopt(loop, client, self._protocol)
        except OSError as exc:
            client.close()
            log.warning("could not set up an accepted connection: %s", exc)

    def close(self) -> None:
        self._task.cancel()
        self._acceptor.close()
        self._sock.close()

    async def wait_closed(self) -> None:
        with contextlib.suppress(asyncio.CancelledError):
            await self._task
        if self._adopting:
            await asyncio.gather(*self._adopting, return_exceptions=True)


async def start_stream_server(callback: StreamCallback, host: str, port: int,
                              tls: TlsServerSettings) -> asyncio.Server | TlsStreamServer:
    if not tls.enabled:
        return await asyncio.start_server(callback, host, port)
    acceptor = TlsAcceptor(tls)  # certificates loaded before the port opens
    sock = socket.create_server((host, port), reuse_port=False, backlog=128)
    sock.setblocking(False)
    return TlsStreamServer(sock, acceptor, callback)
