"""One TCP connection speaking remoting, in either direction.

Both ends can send requests: the broker asks clients (NOTIFY_CONSUMER_IDS_CHANGED,
GET_CONSUMER_RUNNING_INFO) over the connection the client opened. Responses are matched to
requests by opaque; every incoming request runs as its own task, so a held long poll never
blocks the requests behind it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import cast

from ..common.codes import ResponseCode
from ..common.waits import expire_after
from .codec import FrameSplitter, decode_frame, encode_frame_parts
from .command import RemotingCommand
from .errors import FrameError, RemotingClosedError, RemotingError, RemotingTimeoutError

Handler = Callable[["Connection", RemotingCommand], Awaitable["RemotingCommand | None"]]

log = logging.getLogger("ferrymq.remoting")

# Reading pauses while this many requests from one peer are still being handled, so a client
# that floods cannot make the server queue unbounded work.
MAX_INFLIGHT_PER_CONNECTION = 4096


class Connection(asyncio.Protocol):
    def __init__(
        self,
        handlers: dict[int, Handler],
        max_frame_size: int,
        *,
        on_lost: Callable[[Connection], None] | None = None,
    ) -> None:
        self._handlers = handlers
        self._splitter = FrameSplitter(max_frame_size)
        self._transport: asyncio.Transport | None = None
        self._pending: dict[int, asyncio.Future[RemotingCommand]] = {}
        self._inflight: set[asyncio.Task[None]] = set()
        self._close_callbacks: list[Callable[[Connection], None]] = []
        self._on_lost = on_lost
        self._write_ready: asyncio.Event | None = None
        self._reading_paused = False
        self._warned = False
        self.closed = False
        self.closed_event = asyncio.Event()
        self.remote_addr = "?"
        self.local_addr = "?"

    # --- asyncio.Protocol ----------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports implement asyncio.Transport without subclassing it.
        self._transport = cast(asyncio.Transport, transport)
        self.remote_addr = _addr(transport.get_extra_info("peername"))
        self.local_addr = _addr(transport.get_extra_info("sockname"))

    def data_received(self, data: bytes) -> None:
        try:
            frames = self._splitter.feed(data)
        except FrameError as exc:
            self._complain(exc)
            self.close()
            return
        for frame in frames:
            try:
                cmd = decode_frame(frame)
            except FrameError as exc:
                self._complain(exc)
                # The frame's bounds were sound, so the stream goes on; the peer learns why.
                self._send_nowait(RemotingCommand(
                    code=ResponseCode.SYSTEM_ERROR, flag=1, remark=f"malformed frame: {exc}"))
                continue
            if cmd.is_response:
                fut = self._pending.pop(cmd.opaque, None)
                if fut is not None and not fut.done():
                    fut.set_result(cmd)
            else:
                self._dispatch(cmd)

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
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

    def resume_writing(self) -> None:
        if self._write_ready is not None:
            self._write_ready.set()

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
        if len(self._inflight) >= MAX_INFLIGHT_PER_CONNECTION and not self._reading_paused:
            assert self._transport is not None
            self._transport.pause_reading()
            self._reading_paused = True

    def _handled(self, task: asyncio.Task[None]) -> None:
        self._inflight.discard(task)
        if self._reading_paused and len(self._inflight) < MAX_INFLIGHT_PER_CONNECTION // 2:
            self._reading_paused = False
            if self._transport is not None and not self.closed:
                self._transport.resume_reading()

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
        if body:
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
        fut: asyncio.Future[RemotingCommand] = asyncio.get_running_loop().create_future()
        self._pending[req.opaque] = fut
        try:
            with expire_after(fut, timeout):
                await self.send(req)
                return await fut
        except TimeoutError:
            raise RemotingTimeoutError(self.remote_addr, req.code, timeout) from None
        except RemotingClosedError:
            raise RemotingClosedError(self.remote_addr, req.code) from None
        finally:
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

    async def aclose(self) -> None:
        self.close()
        if self._transport is not None:
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
