"""A server of protocols (asyncio's create_server interface) whose port follows the TLS
settings of the remoting ports, permissive mode included: used by the replication port."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from collections.abc import Callable

from .tls import TlsServerSettings
from .tls_accept import TlsAcceptor

log = logging.getLogger("ferrymq.remoting")

ProtocolFactory = Callable[[], asyncio.Protocol]


class TlsStreamServer:
    """What callers use of asyncio.Server: `sockets`, `close()`, `wait_closed()`."""

    def __init__(self, sock: socket.socket, acceptor: TlsAcceptor, factory: ProtocolFactory) -> None:
        self.sockets = [sock]
        self._sock = sock
        self._acceptor = acceptor
        self._factory = factory
        self._adopting: set[asyncio.Task[None]] = set()
        self._task = asyncio.get_running_loop().create_task(self._accept_loop(), name="ferrymq-tls-accept")

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
            await self._acceptor.adopt(loop, client, self._factory)
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


async def start_protocol_server(factory: ProtocolFactory, host: str, port: int,
                                tls: TlsServerSettings) -> asyncio.Server | TlsStreamServer:
    if not tls.enabled:
        return await asyncio.get_running_loop().create_server(factory, host, port)
    acceptor = TlsAcceptor(tls)  # certificates loaded before the port opens
    sock = socket.create_server((host, port), reuse_port=False, backlog=128)
    sock.setblocking(False)
    return TlsStreamServer(sock, acceptor, factory)
