"""Remoting client: one shared connection per address, opened on first use."""

from __future__ import annotations

import asyncio
import contextlib
import errno
import ssl
from collections.abc import Callable
from dataclasses import dataclass, field

from .codec import DEFAULT_MAX_FRAME_SIZE
from .command import RemotingCommand
from .connection import Connection, Handler
from .errors import RemotingClosedError, RemotingConnectError
from .tls import TlsClientSettings, client_context, describe_client_tls_error

# What a failed TLS handshake raises: a plain server closes on the ClientHello it cannot parse.
_TLS_FAILURES = (ssl.SSLError, ConnectionResetError, ConnectionAbortedError, EOFError)


@dataclass(frozen=True, slots=True)
class ClientConfig:
    connect_timeout: float = 3.0
    request_timeout: float = 3.0
    max_frame_size: int = DEFAULT_MAX_FRAME_SIZE
    tls: TlsClientSettings = field(default_factory=TlsClientSettings)  # docs/security.md


# Called on every request before it is sent (RocketMQ's RPCHook doBeforeRequest): ACL signing.
RequestSigner = Callable[[RemotingCommand], object]


def split_addr(addr: str) -> tuple[str, int]:
    host, sep, port = addr.rpartition(":")
    if not sep or not port.isdigit():
        raise RemotingConnectError(addr, "address is not host:port")
    return host.strip("[]"), int(port)


class RemotingClient:
    """Bound to the event loop that first uses it."""

    def __init__(self, config: ClientConfig | None = None, *, signer: RequestSigner | None = None) -> None:
        self.config = config or ClientConfig()
        self.signer = signer
        self._handlers: dict[int, Handler] = {}
        self._conns: dict[str, Connection] = {}
        self._connecting: dict[str, asyncio.Future[Connection]] = {}
        self.closed = False
        # Built once: loading the CA file per connection would cost a file read each time.
        self._ssl: ssl.SSLContext | None = client_context(self.config.tls) if self.config.tls.enabled else None

    def register(self, code: int, handler: Handler) -> None:
        """Handle requests the server sends over connections this client opened."""
        self._handlers[int(code)] = handler

    async def connection(self, addr: str) -> Connection:
        conn = self._conns.get(addr)
        if conn is not None and not conn.closed:
            return conn
        if self.closed:
            raise RemotingClosedError(addr)
        pending = self._connecting.get(addr)
        if pending is not None:
            return await asyncio.shield(pending)
        fut: asyncio.Future[Connection] = asyncio.get_running_loop().create_future()
        self._connecting[addr] = fut
        try:
            conn = await self._open(addr)
        except BaseException as exc:
            fut.set_exception(exc if isinstance(exc, Exception) else RemotingClosedError(addr))
            fut.exception()  # retrieved here so a lone opener does not leave it unobserved
            raise
        else:
            fut.set_result(conn)
            self._conns[addr] = conn
            return conn
        finally:
            self._connecting.pop(addr, None)

    async def _open(self, addr: str) -> Connection:
        host, port = split_addr(addr)
        loop = asyncio.get_running_loop()
        tls = self._ssl is not None
        tls_failures: tuple[type[Exception], ...] = _TLS_FAILURES if tls else ()
        try:
            async with asyncio.timeout(self.config.connect_timeout):
                _, conn = await loop.create_connection(
                    lambda: Connection(self._handlers, self.config.max_frame_size,
                                       on_lost=lambda c: self._forget(addr, c)),
                    host, port, ssl=self._ssl, server_hostname=host if tls else None,
                    ssl_handshake_timeout=self.config.connect_timeout if tls else None,
                )
        except TimeoutError:
            raise RemotingConnectError(addr, f"no answer in {self.config.connect_timeout}s") from None
        except tls_failures as exc:
            raise RemotingConnectError(addr, describe_client_tls_error(exc)) from None
        except OSError as exc:
            reason = exc.strerror or str(exc)
            if exc.errno in (errno.EMFILE, errno.ENFILE):
                reason += " (this process is out of file descriptors: raise `ulimit -n` or close clients)"
            raise RemotingConnectError(addr, reason) from None
        return conn

    def _forget(self, addr: str, conn: Connection) -> None:
        if self._conns.get(addr) is conn:
            del self._conns[addr]

    async def invoke(self, addr: str, req: RemotingCommand, timeout: float | None = None) -> RemotingCommand:
        conn = await self.connection(addr)
        if self.signer is not None:
            self.signer(req)
        return await conn.invoke(req, timeout if timeout is not None else self.config.request_timeout)

    async def invoke_oneway(self, addr: str, req: RemotingCommand) -> None:
        conn = await self.connection(addr)
        if self.signer is not None:
            self.signer(req)
        await conn.invoke_oneway(req)

    def close_connection(self, addr: str) -> None:
        conn = self._conns.pop(addr, None)
        if conn is not None:
            conn.close()

    async def close(self) -> None:
        self.closed = True
        conns = list(self._conns.values())
        self._conns.clear()
        for conn in conns:
            with contextlib.suppress(Exception):
                await conn.aclose()
