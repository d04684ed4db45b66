"""The master's end of replication: one link per connected slave, shipping the commit log
from where the slave's log agrees with this one, reading its reports, and keeping the set of
slaves a SYNC_MASTER waits for (docs/replication.md, "Acknowledgements")."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import threading
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any, Protocol

from ..remoting.tls import TlsServerSettings
from ..remoting.tls_streams import TlsStreamServer, start_protocol_server
from ..store import MessageStore
from ..store.epochs import agreed_end
from ..store.replica import ReplicaError
from .connection import SlaveConnection
from .protocol import (
    Beat,
    Data,
    HaProtocolError,
    Hello,
    Welcome,
    encode_beat,
    encode_data_head,
    encode_meta,
    encode_welcome,
)
from .waiters import ReplicaAck, ReplicationWaiters

log = logging.getLogger("ferrymq.ha")

SPAN_BYTES = 256 << 10


@dataclass(frozen=True, slots=True)
class HaMasterConfig:
    host: str = "127.0.0.1"
    port: int = 10912
    heartbeat_interval_ms: int = 1000
    max_time_slave_not_catchup_ms: int = 15_000
    max_gap_not_in_sync: int = 256 << 20
    hello_timeout_s: float = 10.0
    tls: TlsServerSettings = field(default_factory=TlsServerSettings)  # the remoting ports' (docs/security.md)


class SyncSetPolicy(Protocol):
    """How the in-sync set changes: at once (static roles) or through the controller."""

    def join(self, slave_id: int) -> None: ...

    def leave(self, slave_id: int) -> None: ...


@dataclass
class SlaveLink:
    slave_id: int
    addr: str
    peer: str
    ack: int
    grew: asyncio.Event = field(default_factory=asyncio.Event)
    # The master's end when the slave was last checked; reaching it counts as keeping up.
    target: int = 0
    caught_up_ms: int = 0
    join_end: int = -1  # waited for since this end; in sync once acked past it
    in_sync: bool = False
    writer: SlaveConnection | None = None
    shipped: int = 0  # where the next span starts
    # The shipper waits for the socket to drain: appends leave the next span to it, so what
    # waits in the transport stays bounded.
    draining: bool = False


class HaMaster:
    def __init__(self, store: MessageStore, config: HaMasterConfig, master_addr: Callable[[], str],
                 clock: Callable[[], int] | None = None) -> None:
        self.store = store
        self.config = config
        self._master_addr = master_addr
        self._clock = clock or (lambda: int(time.time() * 1000))
        self.links: dict[int, SlaveLink] = {}
        self.wait_set: set[int] = set()
        self.in_sync: set[int] = set()
        self.policy: SyncSetPolicy = StaticPolicy(self)
        # Slaves that must be waited for before a send is answered: 1 with static roles
        # (RocketMQ 4's SYNC_MASTER); in controller mode min_in_sync_replicas - 1, since the
        # in-sync set alone decides who may be elected.
        self.min_slaves = 1
        # Readers see only what every slave waited for has (store/visibility.py): set in
        # controller mode, where a replica may be elected in this one's place.
        self.gate_reads = False
        self._server: asyncio.base_events.Server | TlsStreamServer | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread = 0
        self._tasks: set[asyncio.Task[None]] = set()
        self.waiters: ReplicationWaiters | None = None
        self.address = ""
        self.rejected = 0  # connections closed for bad input

    # --- lifecycle -------------------------------------------------------------------------
    async def start(self) -> str:
        loop = asyncio.get_running_loop()
        self._loop = loop
        self._thread = threading.get_ident()
        self.waiters = ReplicationWaiters(loop, self._acked)
        self.store.add_append_listener(self._on_append)
        self._server = await start_protocol_server(
            lambda: SlaveConnection(self._admit, self._ended, self.config.hello_timeout_s),
            self.config.host, self.config.port, self.config.tls)
        host, port = self._server.sockets[0].getsockname()[:2]
        self.address = f"{host}:{port}"
        self._spawn(self._housekeep())
        log.info("replication port listening on %s", self.address)
        return self.address

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
        for link in list(self.links.values()):
            if link.writer is not None:
                link.writer.close()
        for task in list(self._tasks):
            task.cancel()
        for task in list(self._tasks):
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        if self._server is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), 1.0)
        if self.waiters is not None:
            self.waiters.fail_all(ReplicaAck.NO_SLAVE)

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # --- sends waiting for slaves ----------------------------------------------------------
    def _acked(self) -> int | None:
        if len(self.wait_set) < self.min_slaves:
            return None
        if not self.wait_set:
            return 1 << 62  # the set is this master alone, and that is allowed
        return min((self.links[i].ack if i in self.links else -1) for i in self.wait_set)

    async def wait_replicated(self, end: int, timeout: float) -> ReplicaAck:
        assert self.waiters is not None
        return await self.waiters.wait(end, timeout)

    def update_confirmed(self) -> None:
        """Tell the store how far readers may see: up to what every slave waited for has, or
        everything when none is waited for (only this broker can then be elected)."""
        if not self.gate_reads:
            return
        wait_set, links = self.wait_set, self.links
        if not wait_set:
            self.store.set_confirmed(None)
        else:
            self.store.set_confirmed(min((links[i].ack if i in links else -1) for i in wait_set))

    def demote(self) -> None:
        """This broker stops being the master: sends still waiting for slaves are answered
        FLUSH_SLAVE_TIMEOUT (stored here, never confirmed), before the sets are cleared, so an
        empty set cannot read as "this master alone" and acknowledge them."""
        if self.waiters is not None:
            self.waiters.fail_all(ReplicaAck.DEMOTED)
        for link in list(self.links.values()):
            if link.writer is not None:
                link.writer.close()
        self.wait_set.clear()  # readers stay held back: this log may yet be cut
        self.in_sync.clear()

    def set_changed(self) -> None:
        self.update_confirmed()
        if self.waiters is not None:
            self.waiters.release()

    # --- links -----------------------------------------------------------------------------
    def _on_append(self) -> None:
        if threading.get_ident() != self._thread:
            if self._loop is not None and not self._loop.is_closed():
                self._loop.call_soon_threadsafe(self._wake_all)
            return
        self._wake_all()

    def _wake_all(self) -> None:
        # The new records leave from here, in the append's own loop turn: handing them to
        # each link's shipper cost a wake-up of its task on the way of every SYNC_MASTER send.
        # The shipper is woken only for what this does not finish (a span cut by its size
        # limit, bytes the socket did not take).
        for link in list(self.links.values()):
            writer = link.writer
            if link.draining or writer is None or writer.is_closing():
                link.grew.set()
                continue
            try:
                self._push(link, writer)
            except ReplicaError as exc:
                log.error("cannot ship the log to slave %d: %s", link.slave_id, exc)
                writer.close()
                link.grew.set()
                continue
            if link.shipped < self.store.max_phy_offset or writer.buffered():
                link.grew.set()

    def _push(self, link: SlaveLink, writer: SlaveConnection) -> bool:
        """Write the next span the slave lacks, if any; True when one was written."""
        span = self.store.replica.read_span(link.shipped, SPAN_BYTES)
        if span is None:
            return False
        # One writev: two writes were two sends, and the slave woke for the head alone.
        writer.writelines((encode_data_head(span.pos, span.next_pos, len(span.data)), span.data))
        link.shipped = span.next_pos
        return True

    def _ended(self, conn: SlaveConnection, why: BaseException | None) -> None:
        if isinstance(why, (HaProtocolError, TimeoutError)):
            self.rejected += 1
            log.warning("replication connection from %s closed: %s", conn.peer, why)
        elif why is not None:
            log.info("replication connection from %s ended: %s", conn.peer, why)
        link = next((lk for lk in self.links.values() if lk.writer is conn), None)
        if link is not None:
            del self.links[link.slave_id]
            link.grew.set()
            self._lost(link)

    def _admit(self, hello: Hello, writer: SlaveConnection) -> Callable[[int], None]:
        """A slave said HELLO: its link, the WELCOME, its shipper; what takes its reports."""
        store = self.store
        mine, my_end = store.replica.epochs.entries(), store.max_phy_offset
        if hello.epochs and mine:
            cut = agreed_end(mine, my_end, hello.epochs, hello.max_offset)
        else:  # a slave that never heard of an epoch has only ever copied from us
            cut = min(hello.max_offset, my_end)
        start = cut
        if start < store.min_phy_offset:
            cut, start = 0, store.min_phy_offset
        old = self.links.pop(hello.broker_id, None)
        if old is not None and old.writer is not None:
            old.writer.close()  # a reconnect replaces the stale link
        link = SlaveLink(hello.broker_id, hello.addr, writer.peer, ack=start, writer=writer,
                         target=my_end, caught_up_ms=self._clock(), shipped=start)
        self.links[hello.broker_id] = link
        writer.write(encode_welcome(Welcome(cut, mine, self._master_addr(), start)))
        log.info("slave %d (%s) connected from %s at %d (its end %d)", hello.broker_id, hello.addr,
                 writer.peer, start, hello.max_offset)
        self._spawn(self._ship(link, writer))
        return functools.partial(self._report, link)

    async def _ship(self, link: SlaveLink, writer: SlaveConnection) -> None:
        """Catches a slave up, drains the socket, beats; appends ship on their own while the
        socket keeps up (_wake_all)."""
        interval = self.config.heartbeat_interval_ms / 1000
        loop = asyncio.get_running_loop()
        next_beat = loop.time() + interval
        try:
            while self.links.get(link.slave_id) is link:
                link.grew.clear()
                pushed = self._push(link, writer)
                link.draining = True
                try:
                    await writer.drain()
                    if loop.time() >= next_beat:
                        writer.write(encode_beat(Beat(self.store.max_phy_offset, self.lag_ms(link))))
                        await writer.drain()
                        next_beat = loop.time() + interval
                finally:
                    link.draining = False
                if not pushed:
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(link.grew.wait(), max(0.0, next_beat - loop.time()))
        except (ConnectionError, OSError):
            pass
        except ReplicaError as exc:
            log.error("cannot ship the log to slave %d: %s", link.slave_id, exc)
        finally:
            writer.close()

    def _report(self, link: SlaveLink, offset: int) -> None:
        if offset < link.ack:
            raise HaProtocolError(f"report {offset} goes back from {link.ack}")
        link.ack = offset
        self._check(link)
        if link.slave_id in self.wait_set:
            self.update_confirmed()
            if self.waiters is not None:
                self.waiters.release()

    def _check(self, link: SlaveLink) -> None:
        end = self.store.max_phy_offset
        now = self._clock()
        kept_up = link.ack >= link.target
        if kept_up:
            link.caught_up_ms = now
            link.target = end
            if link.slave_id not in self.wait_set:
                # Waited for from now on, so everything acknowledged later is on it; in sync
                # once it also has everything acknowledged before (join_end).
                self.wait_set.add(link.slave_id)
                link.join_end = end
                self.update_confirmed()
        if not link.in_sync and link.slave_id in self.wait_set and 0 <= link.join_end <= link.ack:
            link.in_sync = True
            self.policy.join(link.slave_id)
        elif link.slave_id in self.wait_set and (
                now - link.caught_up_ms > self.config.max_time_slave_not_catchup_ms
                or end - link.ack > self.config.max_gap_not_in_sync):
            link.in_sync = False
            link.join_end = -1
            log.warning("slave %d is %d bytes behind and has not caught up for %d ms: out of sync",
                        link.slave_id, end - link.ack, now - link.caught_up_ms)
            self.policy.leave(link.slave_id)

    def _lost(self, link: SlaveLink) -> None:
        log.warning("slave %d (%s) disconnected", link.slave_id, link.addr)
        link.in_sync = False
        if link.slave_id in self.wait_set or link.slave_id in self.in_sync:
            self.policy.leave(link.slave_id)

    async def _housekeep(self) -> None:
        interval = self.config.heartbeat_interval_ms / 1000
        absent: dict[int, int] = {}
        while True:
            await asyncio.sleep(interval)
            for link in list(self.links.values()):
                self._check(link)
            # Waited for but not connected (in the controller's set from before): given up on
            # after the catch-up time, as a slave that stopped reporting would be.
            now = self._clock()
            for sid in list(absent):
                if sid in self.links or sid not in self.wait_set:
                    del absent[sid]
            for sid in self.wait_set - set(self.links):
                since = absent.setdefault(sid, now)
                if now - since > self.config.max_time_slave_not_catchup_ms:
                    self.policy.leave(sid)

    def notify_metadata(self) -> None:
        """Tell every slave to copy the metadata now (a topic was created or changed)."""
        frame = encode_meta()
        for link in self.links.values():
            if link.writer is not None and not link.writer.is_closing():
                link.writer.write(frame)

    # --- figures ---------------------------------------------------------------------------
    def lag_ms(self, link: SlaveLink) -> int:
        if link.ack >= self.store.max_phy_offset:
            return 0
        ts = self.store.replica.record_store_time(link.ack)
        return max(0, self._clock() - ts) if ts > 0 else 0

    def slaves_table(self) -> list[dict[str, object]]:
        end = self.store.max_phy_offset
        return [
            {"brokerId": link.slave_id, "addr": link.addr, "ackOffset": link.ack,
             "lagBytes": max(0, end - link.ack), "lagMs": self.lag_ms(link),
             "inSync": link.in_sync}
            for link in sorted(self.links.values(), key=lambda lk: lk.slave_id)
        ]


class StaticPolicy:
    """Static roles: the set changes at once."""

    def __init__(self, master: HaMaster) -> None:
        self.master = master

    def join(self, slave_id: int) -> None:
        self.master.in_sync.add(slave_id)
        log.info("slave %d is in sync", slave_id)

    def leave(self, slave_id: int) -> None:
        self.master.in_sync.discard(slave_id)
        self.master.wait_set.discard(slave_id)
        self.master.set_changed()


__all__ = ["Data", "HaMaster", "HaMasterConfig", "SlaveLink", "SyncSetPolicy"]
