"""Asyncio remoting server: accepts connections and routes requests to handlers by code."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass

from .codec import DEFAULT_MAX_FRAME_SIZE
from .connection import Connection, Handler

log = logging.getLogger("ferrymq.remoting")


@dataclass(frozen=True, slots=True)
class ServerConfig:
    host: str = "127.0.0.1"
    port: int = 0  # 0 picks a free port; start() returns the one bound
    max_frame_size: int = DEFAULT_MAX_FRAME_SIZE
    backlog: int = 1024
    shutdown_grace: float = 3.0  # how long stop() lets requests being handled finish


class RemotingServer:
    def __init__(self, config: ServerConfig) -> None:
        self.config = config
        self._handlers: dict[int, Handler] = {}
        self._server: asyncio.Server | None = None
        self.connections: set[Connection] = set()
        self.address: tuple[str, int] | None = None

    def register(self, code: int, handler: Handler) -> None:
        self._handlers[int(code)] = handler

    def _new_connection(self) -> Connection:
        conn = Connection(self._handlers, self.config.max_frame_size, on_lost=self._lost)
        self.connections.add(conn)
        return conn

    def _lost(self, conn: Connection) -> None:
        self.connections.discard(conn)

    async def start(self) -> tuple[str, int]:
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(
            self._new_connection, self.config.host, self.config.port,
            backlog=self.config.backlog, reuse_address=True,
        )
        sock = self._server.sockets[0].getsockname()
        self.address = (str(sock[0]), int(sock[1]))
        return self.address

    async def stop(self) -> None:
        """Stop accepting, let requests in progress finish (up to the grace), then close."""
        if self._server is not None:
            self._server.close()
        conns = list(self.connections)
        await asyncio.gather(*(c.drain_inflight(self.config.shutdown_grace) for c in conns))
        for conn in conns:
            conn.close()
        await asyncio.gather(*(c.aclose() for c in conns), return_exceptions=True)
        if self._server is not None:
            await self._server.wait_closed()
            self._server = None
