"""The slave's end of replication: connect to the master's HA port, say where this log ends
and which epochs wrote it, cut what the master says it never had, then write what it ships
and report it. The stream is a protocol with no awaits (_Stream), applied in the callback of
the read that brought it; a task only drives the connection, the cut, and the read timeout."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import cast

from ..remoting.tls import TlsClientSettings, client_context, describe_client_tls_error
from ..store import MessageStore
from ..store.replica import ReplicaError, Span
from .protocol import (
    Beat,
    Data,
    Frame,
    FrameReader,
    HaProtocolError,
    Hello,
    Meta,
    Welcome,
    encode_hello,
    encode_report,
)

log = logging.getLogger("ferrymq.ha")


@dataclass(frozen=True, slots=True)
class HaSlaveConfig:
    broker_name: str
    broker_id: int
    addr: str  # this broker's remoting address, for the master's tables
    retry_interval_ms: int = 1000
    connect_timeout_s: float = 3.0
    # No frame for this long (the master beats every second) means the link is dead.
    read_timeout_s: float = 10.0
    tls: TlsClientSettings = field(default_factory=TlsClientSettings)  # the broker's own (tls_enable)


class HaSlave:
    def __init__(self, store: MessageStore, config: HaSlaveConfig,
                 master_ha_addr: Callable[[], str],
                 on_metadata: Callable[[], None] | None = None) -> None:
        self.store = store
        self._on_metadata = on_metadata
        self.config = config
        self._master_ha_addr = master_ha_addr
        self.connected = False
        self.master_addr = ""
        self.master_ha = ""
        self.master_end = 0
        self.lag_ms = 0
        self.last_beat_ms = 0
        self.truncated_bytes = 0
        self.connected_event = asyncio.Event()
        # Set by stop, checked before every connection and every cut: the task's cancellation
        # can be lost (asyncio.wait_for in Python 3.11 swallows a cancel that arrives as the
        # awaited connection ends), and a replication loop left running on a promoted master
        # connected to its old master back up as a slave and cut acknowledged records.
        self._stopped = False
        self._task: asyncio.Task[None] | None = None
        self._transport: asyncio.Transport | None = None
        self._ssl: ssl.SSLContext | None = client_context(config.tls) if config.tls.enabled else None

    @property
    def lag_bytes(self) -> int:
        return max(0, self.master_end - self.store.max_phy_offset) if self.connected else -1

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name="ferrymq-ha-slave")

    async def stop(self) -> None:
        self._stopped = True
        task, self._task = self._task, None
        if self._transport is not None:
            self._transport.close()
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self.connected = False

    def drop_connection(self) -> None:
        """Close the current link (it reconnects): used when the master changes."""
        if self._transport is not None:
            self._transport.close()

    async def _run(self) -> None:
        retry = self.config.retry_interval_ms / 1000
        while not self._stopped:
            addr = self._master_ha_addr()
            if addr:
                try:
                    await self._session(addr)
                except (ConnectionError, OSError, TimeoutError) as exc:
                    log.info("replication from %s: %s", addr, exc or type(exc).__name__)
                except (HaProtocolError, ReplicaError) as exc:
                    log.error("replication from %s stopped: %s", addr, exc)
                finally:
                    self.connected = False
                    self.connected_event.clear()
                    self._transport = None
            await asyncio.sleep(retry)

    async def _session(self, addr: str) -> None:
        host, _, port = addr.rpartition(":")
        cfg = self.config
        tls = self._ssl is not None
        loop = asyncio.get_running_loop()
        stream = _Stream(self, loop)
        try:
            transport = await asyncio.wait_for(_open(loop, stream, host, int(port), self._ssl,
                                                     cfg.connect_timeout_s), cfg.connect_timeout_s)
        except (ssl.SSLError, ConnectionResetError) as exc:
            if not tls:
                raise
            raise ConnectionError(describe_client_tls_error(exc)) from None
        if self._stopped:
            transport.close()
            raise ConnectionError("replication stopped")
        self._transport = transport
        store = self.store
        try:
            if transport.is_closing():
                raise ConnectionError("the connection to the master closed at once")
            transport.write(encode_hello(Hello(cfg.broker_name, cfg.broker_id, cfg.addr,
                                               store.max_phy_offset, store.replica.epochs.entries())))
            welcome = await asyncio.wait_for(asyncio.shield(stream.welcome), cfg.read_timeout_s)
            await self._welcome(welcome, addr)
            stream.streaming()
            # The stream is applied by the protocol as it arrives; this task only watches for
            # its end and for a master gone silent.
            while True:
                silent = loop.time() - stream.last_read
                if silent >= cfg.read_timeout_s:
                    raise TimeoutError(f"nothing from the master for {cfg.read_timeout_s} s")
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(asyncio.shield(stream.ended), cfg.read_timeout_s - silent)
                if stream.ended.done():
                    stream.ended.result()  # its error, if it ended on one
                    raise ConnectionError("the master closed the connection")
        finally:
            transport.close()

    async def _welcome(self, w: Welcome, addr: str) -> None:
        if self._stopped:  # never cut this log for a loop that should have ended
            raise ConnectionError("replication stopped")
        store = self.store
        if w.truncate_to < store.max_phy_offset:
            self.truncated_bytes += await asyncio.to_thread(store.replica.truncate_log, w.truncate_to)
        if store.max_phy_offset < w.start_at:
            if store.max_phy_offset > store.min_phy_offset:
                await asyncio.to_thread(store.replica.truncate_log, store.min_phy_offset)
            store.replica.restart_at(w.start_at)
        if store.max_phy_offset != w.start_at:
            raise HaProtocolError(f"the stream starts at {w.start_at}, this log ends at "
                                  f"{store.max_phy_offset}")
        store.replica.epochs.replace(w.epochs, store.max_phy_offset)
        # This log is now a prefix of the master's. Entries held back while this broker was a
        # master (store/visibility.py) are not cut when the new master already had them, and
        # an idle master sends nothing that would release them.
        store.set_confirmed(None)
        self.master_addr = w.master_addr
        self.master_ha = addr
        self.master_end = max(self.master_end, w.start_at)
        self.connected = True
        self.connected_event.set()
        if self._on_metadata is not None:  # a (re)connected slave copies the metadata at once
            self._on_metadata()
        log.info("replicating from %s (%s) at %d", w.master_addr, addr, w.start_at)


async def _open(loop: asyncio.AbstractEventLoop, stream: _Stream, host: str, port: int,
                context: ssl.SSLContext | None, timeout: float) -> asyncio.Transport:
    transport, _ = await loop.create_connection(
        lambda: stream, host, port, ssl=context, server_hostname=host if context else None,
        ssl_handshake_timeout=timeout if context else None)
    return transport


class _Stream(asyncio.Protocol):
    """One connection to the master, applied as it arrives (no task wakes up per read): the
    WELCOME is handed to the session, which makes this log a prefix of the master's; the
    stream after it is written to the store in the read's own callback, and reported there."""

    # Reports the master does not read pile up in the socket's buffer; past this the link
    # is dropped (a master that ships but never reads is broken).
    MAX_UNSENT = 1 << 20

    def __init__(self, slave: HaSlave, loop: asyncio.AbstractEventLoop) -> None:
        self._slave = slave
        self._frames = FrameReader()
        self._transport: asyncio.Transport | None = None
        self.welcome: asyncio.Future[Welcome] = loop.create_future()
        self.ended: asyncio.Future[None] = loop.create_future()
        self.last_read = loop.time()
        self._loop = loop
        self._held: list[Frame] = []  # what came with the WELCOME, applied after it
        self._streaming = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # A stream transport (uvloop's TLS one is not an asyncio.Transport subclass).
        self._transport = cast(asyncio.Transport, transport)

    def connection_lost(self, exc: Exception | None) -> None:
        error = ConnectionError(f"the connection to the master was lost: {exc}") if exc else None
        self._end(error or ConnectionError("the master closed the connection"))

    def data_received(self, data: bytes) -> None:
        self.last_read = self._loop.time()
        try:
            frames = self._frames.feed(data)
            if not self._streaming:
                self._before_welcome(frames)
            else:
                self._apply(frames)
        except (HaProtocolError, ReplicaError, OSError) as exc:
            self._end(exc)

    def streaming(self) -> None:
        """The session has applied the WELCOME: the stream flows from here."""
        self._streaming = True
        # Reading was paused while the log was cut: the master's silence counts from now.
        self.last_read = self._loop.time()
        held, self._held = self._held, []
        try:
            self._apply(held)
        except (HaProtocolError, ReplicaError, OSError) as exc:
            self._end(exc)
            return
        if not held:  # the WELCOME is answered with where this log now ends
            self._report(self._slave.store.max_phy_offset)
        if self._transport is not None and not self._transport.is_closing():
            self._transport.resume_reading()

    def _before_welcome(self, frames: list[Frame]) -> None:
        if self.welcome.done():
            self._held += frames
            return
        if not frames:
            return
        first = frames[0]
        if not isinstance(first, Welcome):
            raise HaProtocolError("the first frame must be WELCOME")
        self.welcome.set_result(first)
        self._held = frames[1:]
        assert self._transport is not None
        self._transport.pause_reading()  # until the log is cut to where the stream starts

    def _apply(self, frames: list[Frame]) -> None:
        slave, store = self._slave, self._slave.store
        if self.ended.done():
            return  # closed under this read: nothing more is written or reported
        assert self._transport is not None
        if self._transport.get_write_buffer_size() > self.MAX_UNSENT:
            raise ConnectionError("the master does not read this slave's reports")
        for frame in frames:
            if isinstance(frame, Data):
                if slave._stopped:
                    raise ConnectionError("replication stopped")
                # Reported once the whole span is applied, queues included: a report is what
                # a SYNC_MASTER acknowledges sends on, so it never runs ahead of this log's
                # end (a dispatch that fails leaves the end where it was).
                store.replica.append_replicated(Span(frame.pos, frame.records, frame.next_pos))
            elif isinstance(frame, Meta):
                if slave._on_metadata is not None:
                    slave._on_metadata()
            elif isinstance(frame, Beat):
                slave.master_end = frame.master_end
                slave.lag_ms = frame.lag_ms
                slave.last_beat_ms = int(time.time() * 1000)
            elif isinstance(frame, Welcome):
                raise HaProtocolError("a second WELCOME")
            else:
                raise HaProtocolError(f"a master sent {type(frame).__name__}")
        if frames:
            # A beat or a meta frame is answered too: the master counts a slave that keeps
            # reporting as alive.
            self._report(store.max_phy_offset)

    def _report(self, end: int) -> None:
        transport = self._transport
        if transport is None or transport.is_closing():
            return  # uvloop refuses a write to a closed transport; asyncio drops it
        transport.write(encode_report(end))

    def _end(self, error: BaseException) -> None:
        if not self.welcome.done():
            self.welcome.set_exception(error)
            self.welcome.exception()  # retrieved: the session may be gone
        if not self.ended.done():
            self.ended.set_exception(error)
            self.ended.exception()
        if self._transport is not None:
            self._transport.close()
