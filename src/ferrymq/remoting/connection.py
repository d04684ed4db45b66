"""One TCP connection speaking remoting, in either direction.

Both ends can send requests: the broker asks clients (NOTIFY_CONSUMER_IDS_CHANGED,
GET_CONSUMER_RUNNING_INFO) over the connection the client opened. Responses are matched to
requests by opaque; every incoming request runs as its own task, so a held long poll never
blocks the requests behind it.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable, Iterator
from typing import cast

from ..common.codes import ResponseCode
from ..common.waits import expire
from .codec import FrameSplitter, decode_frame, encode_frame_parts
from .command import RemotingCommand
from .errors import FrameError, RemotingClosedError, RemotingError, RemotingTimeoutError
from .limits import DEFAULT_MAX_INFLIGHT, ConnectionLimits, PartialFrameBudget

Handler = Callable[["Connection", RemotingCommand], Awaitable["RemotingCommand | None"]]

log = logging.getLogger("ferrymq.remoting")

MAX_INFLIGHT_PER_CONNECTION = DEFAULT_MAX_INFLIGHT


class Connection(asyncio.Protocol):
    """`limits` is given for connections a server accepted: they stop reading while their
    replies are not being read. A client's connections must keep reading whatever their own
    write buffer holds (both ends waiting on each other would deadlock), so they pass none."""

    def __init__(
        self,
        handlers: dict[int, Handler],
        max_frame_size: int,
        *,
        on_lost: Callable[[Connection], None] | None = None,
        limits: ConnectionLimits | None = None,
        budget: PartialFrameBudget | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._handlers = handlers
        self._splitter = FrameSplitter(max_frame_size)
        self._transport: asyncio.Transport | None = None
        self._pending: dict[int, asyncio.Future[RemotingCommand]] = {}
        self._inflight: set[asyncio.Task[None]] = set()
        self._close_callbacks: list[Callable[[Connection], None]] = []
        self._on_lost = on_lost
        self._limits = limits
        self._max_inflight = limits.max_inflight if limits is not None else MAX_INFLIGHT_PER_CONNECTION
        self._budget = budget
        self._clock = clock
        self._write_ready: asyncio.Event | None = None
        self._write_blocked = False  # only set when `limits` is given
        self._backlog: deque[memoryview] = deque()  # frames read but held back while blocked
        self._reading_paused = False
        self._warned = False
        self._tls = False
        self.closed = False
        self.closed_event = asyncio.Event()
        self.remote_addr = "?"
        self.local_addr = "?"
        self.last_active = clock()
        self.bytes_received = 0

    # --- asyncio.Protocol ----------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports implement asyncio.Transport without subclassing it.
        self._transport = cast(asyncio.Transport, transport)
        self._tls = transport.get_extra_info("ssl_object") is not None
        self.remote_addr = _addr(transport.get_extra_info("peername"))
        self.local_addr = _addr(transport.get_extra_info("sockname"))
        if self._limits is not None:
            self._transport.set_write_buffer_limits(high=self._limits.write_buffer_high,
                                                    low=self._limits.write_buffer_low)

    def data_received(self, data: bytes) -> None:
        self.last_active = self._clock()
        self.bytes_received += len(data)
        try:
            frames = self._splitter.feed(data)
        except FrameError as exc:
            self._complain(exc)
            self.close()
            return
        if self._budget is not None:
            self._budget.update(self, self._splitter.buffered)
        if self._backlog:
            self._backlog.extend(frames)
        else:
            self._process(iter(frames))
        self._update_reading()

    def _process(self, frames: Iterator[memoryview]) -> None:
        for frame in frames:
            self._frame(frame)
            if self._blocked():
                # What this read brought is kept (it is in memory already) but not acted on
                # until the peer reads its replies or requests finish.
                self._backlog.extend(frames)
                return

    def _frame(self, frame: memoryview) -> None:
        try:
            cmd = decode_frame(frame)
        except FrameError as exc:
            self._complain(exc)
            # The frame's bounds were sound, so the stream goes on; the peer learns why.
            self._send_nowait(RemotingCommand(
                code=ResponseCode.SYSTEM_ERROR, flag=1, remark=f"malformed frame: {exc}"))
            return
        if cmd.is_response:
            fut = self._pending.pop(cmd.opaque, None)
            if fut is not None and not fut.done():
                fut.set_result(cmd)
        else:
            self._dispatch(cmd)

    def _blocked(self) -> bool:
        return self.closed or self._write_blocked or len(self._inflight) >= self._max_inflight

    def _unblocked(self) -> None:
        while self._backlog and not self._blocked():
            self._frame(self._backlog.popleft())
        self._update_reading()

    def _update_reading(self) -> None:
        transport = self._transport
        if transport is None or self.closed or transport.is_closing():
            return
        # Hysteresis on the in-flight count: resume only once half of the cap has drained.
        inflight_cap = self._max_inflight // 2 if self._reading_paused else self._max_inflight
        stop = bool(self._backlog) or self._write_blocked or len(self._inflight) >= inflight_cap
        if stop and not self._reading_paused:
            transport.pause_reading()
            self._reading_paused = True
        elif not stop and self._reading_paused:
            transport.resume_reading()
            self._reading_paused = False

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self._backlog.clear()
        if self._budget is not None:
            self._budget.release(self)
        for opaque, fut in list(self._pending.items()):
            if not fut.done():
                fut.set_exception(RemotingClosedError(self.remote_addr))
            self._pending.pop(opaque, None)
        if self._write_ready is not None:
            self._write_ready.set()
        self.closed_event.set()
        for cb in self._close_callbacks:
            try:
                cb(self)
            except Exception:
                log.exception("close callback failed for %s", self.remote_addr)
        if self._on_lost is not None:
            self._on_lost(self)

    def pause_writing(self) -> None:
        if self._write_ready is None:
            self._write_ready = asyncio.Event()
        self._write_ready.clear()
        if self._limits is not None:
            self._write_blocked = True
            self._update_reading()

    def resume_writing(self) -> None:
        if self._write_ready is not None:
            self._write_ready.set()
        if self._write_blocked:
            self._write_blocked = False
            self._unblocked()

    # --- requests from the peer ----------------------------------------------------------------
    def _dispatch(self, req: RemotingCommand) -> None:
        handler = self._handlers.get(req.code)
        if handler is None:
            if not req.is_oneway:
                self._send_nowait(RemotingCommand.make_response_to(
                    req, ResponseCode.REQUEST_CODE_NOT_SUPPORTED,
                    remark=f" request type {req.code} not supported"))
            return
        task = asyncio.get_running_loop().create_task(self._handle(handler, req))
        self._inflight.add(task)
        task.add_done_callback(self._handled)

    def _handled(self, task: asyncio.Task[None]) -> None:
        self._inflight.discard(task)
        if self._backlog or self._reading_paused:
            self._unblocked()

    async def _handle(self, handler: Handler, req: RemotingCommand) -> None:
        try:
            resp = await handler(self, req)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.exception("handler for code %d failed", req.code)
            resp = RemotingCommand.make_response_to(
                req, ResponseCode.SYSTEM_ERROR, remark=f"{type(exc).__name__}: {exc}")
        if resp is None or req.is_oneway or self.closed:
            return
        resp.opaque = req.opaque
        resp.flag |= 1
        await self.send(resp)

    # --- sending -------------------------------------------------------------------------------
    def _send_nowait(self, cmd: RemotingCommand) -> None:
        if self.closed or self._transport is None:
            raise RemotingClosedError(self.remote_addr, cmd.code)
        head, body = encode_frame_parts(cmd)
        self.last_active = self._clock()
        if body and self._tls:
            # Over TLS each write becomes a record of its own, encrypted and framed apart: one
            # record per frame costs a copy of the body and saves a record per message.
            self._transport.write(head + body)
        elif body:
            self._transport.writelines((head, body))
        else:
            self._transport.write(head)

    async def send(self, cmd: RemotingCommand) -> None:
        """Write `cmd`, waiting while the peer is not reading (transport buffer full)."""
        if self._write_ready is not None and not self._write_ready.is_set():
            await self._write_ready.wait()
        self._send_nowait(cmd)

    async def invoke(self, req: RemotingCommand, timeout: float) -> RemotingCommand:
        if self.closed:
            raise RemotingClosedError(self.remote_addr, req.code)
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[RemotingCommand] = loop.create_future()
        self._pending[req.opaque] = fut
        # expire_after's timer, without its context manager: this is every request's path.
        timer = loop.call_later(timeout, expire, fut)
        try:
            await self.send(req)
            return await fut
        except TimeoutError:
            raise RemotingTimeoutError(self.remote_addr, req.code, timeout) from None
        except RemotingClosedError:
            raise RemotingClosedError(self.remote_addr, req.code) from None
        finally:
            timer.cancel()
            self._pending.pop(req.opaque, None)

    async def invoke_oneway(self, req: RemotingCommand) -> None:
        req.mark_oneway()
        await self.send(req)

    # --- lifecycle -----------------------------------------------------------------------------
    def on_close(self, callback: Callable[[Connection], None]) -> None:
        if self.closed:
            callback(self)
        elif callback not in self._close_callbacks:
            self._close_callbacks.append(callback)

    @property
    def inflight(self) -> int:
        return len(self._inflight)

    @property
    def reading_paused(self) -> bool:
        return self._reading_paused

    @property
    def partial_frame_bytes(self) -> int:
        return self._splitter.buffered

    @property
    def write_buffer_size(self) -> int:
        transport = self._transport
        return transport.get_write_buffer_size() if transport is not None and not self.closed else 0

    def idle_for(self, now: float) -> float:
        """Seconds since anything was read or written; 0 while a request is being handled or
        an answer is awaited (a held long poll is not idleness)."""
        if self._inflight or self._pending or self._backlog:
            return 0.0
        return max(0.0, now - self.last_active)

    async def drain_inflight(self, timeout: float) -> None:
        """Wait for requests being handled to finish; cancel what is left after `timeout`."""
        tasks = set(self._inflight)
        if not tasks:
            return
        _, late = await asyncio.wait(tasks, timeout=timeout)
        for task in late:
            task.cancel()
        if late:
            await asyncio.wait(late, timeout=1.0)

    def close(self) -> None:
        if self._transport is not None and not self._transport.is_closing():
            self._transport.close()

    async def aclose(self, flush_timeout: float | None = None) -> None:
        """Close after unsent bytes are flushed; a peer that does not read them within
        `flush_timeout` has its connection aborted (the bytes are dropped)."""
        self.close()
        if self._transport is None:
            return
        try:
            async with asyncio.timeout(flush_timeout):
                await self.closed_event.wait()
        except TimeoutError:
            self._transport.abort()
            await self.closed_event.wait()

    def _complain(self, exc: RemotingError) -> None:
        # Log once per connection: a peer sending garbage must not flood the log.
        if not self._warned:
            self._warned = True
            log.warning("bad input from %s: %s", self.remote_addr, exc)


def _addr(info: object) -> str:
    if isinstance(info, tuple) and len(info) >= 2:
        return f"{info[0]}:{info[1]}"
    return "?"
