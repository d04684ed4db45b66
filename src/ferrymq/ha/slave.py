"""The slave's end of replication: connect to the master's HA port, say where this log ends
and which epochs wrote it, cut what the master says it never had, then write what it ships
and report after every write."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from ..remoting.tls import TlsClientSettings, client_context, describe_client_tls_error
from ..store import MessageStore
from ..store.replica import ReplicaError, Span
from .protocol import (
    Beat,
    Data,
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
        self._writer: asyncio.StreamWriter | None = None
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
        if self._writer is not None:
            self._writer.close()
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self.connected = False

    def drop_connection(self) -> None:
        """Close the current link (it reconnects): used when the master changes."""
        if self._writer is not None:
            self._writer.close()

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
                    self._writer = None
            await asyncio.sleep(retry)

    async def _session(self, addr: str) -> None:
        host, _, port = addr.rpartition(":")
        cfg = self.config
        tls = self._ssl is not None
        try:
            reader, writer = await asyncio.wait_for(asyncio.open_connection(
                host, int(port), ssl=self._ssl, server_hostname=host if tls else None,
                ssl_handshake_timeout=cfg.connect_timeout_s if tls else None), cfg.connect_timeout_s)
        except (ssl.SSLError, ConnectionResetError) as exc:
            if not tls:
                raise
            raise ConnectionError(describe_client_tls_error(exc)) from None
        if self._stopped:
            writer.close()
            raise ConnectionError("replication stopped")
        self._writer = writer
        store = self.store
        try:
            writer.write(encode_hello(Hello(cfg.broker_name, cfg.broker_id, cfg.addr,
                                            store.max_phy_offset, store.replica.epochs.entries())))
            frames = FrameReader()
            welcomed = False
            reported = -1

            def report(end: int) -> None:
                nonlocal reported
                writer.write(encode_report(end))
                reported = end

            while True:
                data = await asyncio.wait_for(reader.read(1 << 20), cfg.read_timeout_s)
                if not data:
                    raise ConnectionError("the master closed the connection")
                got = frames.feed(data)
                last_data = max((i for i, f in enumerate(got) if isinstance(f, Data)), default=-1)
                for i, frame in enumerate(got):
                    if isinstance(frame, Welcome):
                        if welcomed:
                            raise HaProtocolError("a second WELCOME")
                        await self._welcome(frame, addr)
                        welcomed = True
                    elif not welcomed:
                        raise HaProtocolError("the first frame must be WELCOME")
                    elif isinstance(frame, Data):
                        if self._stopped:
                            raise ConnectionError("replication stopped")
                        # The last span of a read is reported as soon as it is in the log,
                        # before its records are dispatched: a SYNC_MASTER's sends wait on it.
                        store.replica.append_replicated(Span(frame.pos, frame.records, frame.next_pos),
                                                        report if i == last_data else None)
                    elif isinstance(frame, Meta):
                        if self._on_metadata is not None:
                            self._on_metadata()
                    elif isinstance(frame, Beat):
                        self.master_end = frame.master_end
                        self.lag_ms = frame.lag_ms
                        self.last_beat_ms = int(time.time() * 1000)
                    else:
                        raise HaProtocolError(f"a master sent {type(frame).__name__}")
                if welcomed:
                    if reported != store.max_phy_offset or last_data < 0:
                        # A beat or a meta frame is answered too: the master counts a slave
                        # that keeps reporting as alive.
                        report(store.max_phy_offset)
                    await writer.drain()
        finally:
            writer.close()

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
