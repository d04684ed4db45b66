"""Asyncio remoting server: accepts connections and routes requests to handlers by code.

The server accepts on its own listening socket rather than through loop.create_server: when
the process runs out of file descriptors, accept() fails, and that must be said (rate-limited)
and retried while the connections already open go on being served. Under uvloop the built-in
acceptor closes the listening socket on that error without a word."""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from .codec import DEFAULT_MAX_FRAME_SIZE
from .command import RemotingCommand
from .connection import Connection, Handler
from .limits import (
    DEFAULT_MAX_INFLIGHT,
    DEFAULT_WRITE_BUFFER_HIGH,
    DEFAULT_WRITE_BUFFER_LOW,
    ConnectionLimits,
    PartialFrameBudget,
)
from .tls import TlsServerSettings
from .tls_accept import TlsAcceptor

log = logging.getLogger("ferrymq.remoting")

# Called before a request is dispatched (the ACL hook); a command returned is the answer and the
# handler does not run.
RequestHook = Callable[[Connection, RemotingCommand], "RemotingCommand | None"]

# accept() errors that mean "no resources now", not "this listener is broken".
_RESOURCE_ERRNOS = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM})


@dataclass(frozen=True, slots=True)
class ServerConfig:
    host: str = "127.0.0.1"
    port: int = 0  # 0 picks a free port; start() returns the one bound
    max_frame_size: int = DEFAULT_MAX_FRAME_SIZE
    backlog: int = 1024
    shutdown_grace: float = 3.0  # how long stop() lets requests being handled finish
    # A connection with nothing read or written for this long is closed (RocketMQ's
    # serverChannelMaxIdleTimeSeconds); clients heartbeat every 30 s. 0 keeps idle connections.
    idle_timeout: float = 120.0
    idle_check_interval: float = 10.0
    # Sum of bytes held in not-yet-complete frames over all connections (see PartialFrameBudget).
    partial_frame_budget: int = 128 << 20
    write_buffer_high: int = DEFAULT_WRITE_BUFFER_HIGH
    write_buffer_low: int = DEFAULT_WRITE_BUFFER_LOW
    max_inflight_per_connection: int = DEFAULT_MAX_INFLIGHT
    accept_retry_delay: float = 1.0  # after accept() ran out of file descriptors or memory
    tls: TlsServerSettings = field(default_factory=TlsServerSettings)  # docs/security.md


@dataclass(frozen=True, slots=True)
class ServerStats:
    connections: int
    partial_frame_bytes: int
    write_buffer_bytes: int
    closed_idle: int
    closed_over_partial_budget: int
    accept_failures: int


class RemotingServer:
    def __init__(self, config: ServerConfig, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.config = config
        self._clock = clock
        self._handlers: dict[int, Handler] = {}  # what connections dispatch to (hooked)
        self._plain: dict[int, Handler] = {}
        self._hook: RequestHook | None = None
        self._limits = ConnectionLimits(write_buffer_high=config.write_buffer_high,
                                        write_buffer_low=config.write_buffer_low,
                                        max_inflight=config.max_inflight_per_connection)
        self._budget = PartialFrameBudget(config.partial_frame_budget, clock=clock)
        self._sock: socket.socket | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._retry: asyncio.TimerHandle | None = None
        self._accepting: set[asyncio.Task[None]] = set()
        self._idle_task: asyncio.Task[None] | None = None
        self._closed_idle = 0
        self._accept_failures = 0
        self._last_accept_log = float("-inf")
        self.tls: TlsAcceptor | None = None
        self.connections: set[Connection] = set()
        self.address: tuple[str, int] | None = None

    def register(self, code: int, handler: Handler) -> None:
        self._plain[int(code)] = handler
        self._handlers[int(code)] = self._hooked(handler)

    def set_request_hook(self, hook: RequestHook | None) -> None:
        """Run `hook` before every registered handler, on connections open and to come."""
        self._hook = hook
        for code, handler in self._plain.items():
            self._handlers[code] = self._hooked(handler)

    def _hooked(self, handler: Handler) -> Handler:
        hook = self._hook
        if hook is None:
            return handler

        async def hooked(conn: Connection, req: RemotingCommand) -> RemotingCommand | None:
            refusal = hook(conn, req)
            if refusal is not None:
                return refusal
            return await handler(conn, req)

        return hooked

    def _new_connection(self) -> Connection:
        conn = Connection(self._handlers, self.config.max_frame_size, on_lost=self._lost,
                          limits=self._limits, budget=self._budget, clock=self._clock)
        self.connections.add(conn)
        return conn

    def _lost(self, conn: Connection) -> None:
        self.connections.discard(conn)

    async def start(self) -> tuple[str, int]:
        loop = asyncio.get_running_loop()
        cfg = self.config
        # Certificates are loaded before the port opens: a bad file stops the start.
        self.tls = TlsAcceptor(cfg.tls) if cfg.tls.enabled else None
        infos = await loop.getaddrinfo(cfg.host, cfg.port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
        # One listening socket; an IPv4 address first, as the addresses brokers register are.
        infos.sort(key=lambda info: info[0] != socket.AF_INET)
        family, type_, proto, _, addr = infos[0]
        sock = socket.socket(family, type_, proto)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind(addr)
            sock.listen(cfg.backlog)
            sock.setblocking(False)
        except OSError:
            sock.close()
            raise
        self._sock, self._loop = sock, loop
        loop.add_reader(sock.fileno(), self._accept_ready)
        name = sock.getsockname()
        self.address = (str(name[0]), int(name[1]))
        if cfg.idle_timeout > 0:
            self._idle_task = loop.create_task(self._idle_loop(), name="ferrymq-idle-connections")
        return self.address

    # --- accepting -----------------------------------------------------------------------------
    def _accept_ready(self) -> None:
        sock, loop = self._sock, self._loop
        assert sock is not None and loop is not None
        for _ in range(64):  # a bounded batch, so a connect storm cannot starve the loop
            try:
                client, _ = sock.accept()
            except (BlockingIOError, InterruptedError):
                return
            except ConnectionAbortedError:
                continue
            except OSError as exc:
                self._accept_failed(exc)
                return
            client.setblocking(False)
            with contextlib.suppress(OSError):
                client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            task = loop.create_task(self._adopt(loop, client))
            self._accepting.add(task)
            task.add_done_callback(self._accepting.discard)

    async def _adopt(self, loop: asyncio.AbstractEventLoop, client: socket.socket) -> None:
        try:
            if self.tls is None:
                await loop.connect_accepted_socket(self._new_connection, client)
            else:
                await self.tls.adopt(loop, client, self._new_connection)
        except OSError as exc:
            client.close()
            log.warning("could not set up an accepted connection: %s", exc)

    def _accept_failed(self, exc: OSError) -> None:
        """Stop accepting for a moment; the connections already open are served meanwhile, and
        the peers waiting in the backlog are accepted once descriptors are free again."""
        self._accept_failures += 1
        sock, loop = self._sock, self._loop
        assert sock is not None and loop is not None
        now = self._clock()
        if now - self._last_accept_log >= 10.0:
            self._last_accept_log = now
            if exc.errno in _RESOURCE_ERRNOS:
                log.error("cannot accept connections: %s (%d connections open; %d accept failures "
                          "so far); retrying every %.1fs. Raise the open-files limit (ulimit -n) or "
                          "reduce the number of clients", exc.strerror or exc, len(self.connections),
                          self._accept_failures, self.config.accept_retry_delay)
            else:
                log.error("accept() failed: %s; retrying in %.1fs", exc, self.config.accept_retry_delay)
        loop.remove_reader(sock.fileno())
        self._retry = loop.call_later(self.config.accept_retry_delay, self._resume_accepting)

    def _resume_accepting(self) -> None:
        self._retry = None
        if self._sock is not None and self._loop is not None:
            self._loop.add_reader(self._sock.fileno(), self._accept_ready)

    # --- idle connections ----------------------------------------------------------------------
    def close_idle(self, now: float) -> int:
        """Close connections idle for longer than the idle timeout; returns how many."""
        timeout = self.config.idle_timeout
        idle = [c for c in self.connections if c.idle_for(now) > timeout]
        for conn in idle:
            log.info("closing %s: idle for %.0fs", conn.remote_addr, conn.idle_for(now))
            conn.close()
        self._closed_idle += len(idle)
        return len(idle)

    async def _idle_loop(self) -> None:
        interval = min(self.config.idle_check_interval, self.config.idle_timeout / 2)
        while True:
            await asyncio.sleep(interval)
            self.close_idle(self._clock())

    def stats(self) -> ServerStats:
        return ServerStats(
            connections=len(self.connections),
            partial_frame_bytes=self._budget.used,
            write_buffer_bytes=sum(c.write_buffer_size for c in self.connections),
            closed_idle=self._closed_idle,
            closed_over_partial_budget=self._budget.evicted,
            accept_failures=self._accept_failures,
        )

    async def stop(self) -> None:
        """Stop accepting, let requests in progress finish (up to the grace), then close."""
        self._stop_accepting()
        if self._idle_task is not None:
            self._idle_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._idle_task
            self._idle_task = None
        if self._accepting:
            await asyncio.gather(*self._accepting, return_exceptions=True)
        conns = list(self.connections)
        await asyncio.gather(*(c.drain_inflight(self.config.shutdown_grace) for c in conns))
        for conn in conns:
            conn.close()
        await asyncio.gather(*(c.aclose(self.config.shutdown_grace) for c in conns), return_exceptions=True)

    def _stop_accepting(self) -> None:
        if self._retry is not None:
            self._retry.cancel()
            self._retry = None
        sock, loop = self._sock, self._loop
        if sock is not None and loop is not None:
            loop.remove_reader(sock.fileno())
            sock.close()
        self._sock = None
        if self.tls is not None:
            self.tls.close()
