"""The master's end of one slave's connection, a protocol with no awaits: the HELLO admits the
slave, and each REPORT is handed on in the callback of the read that brought it (a
SYNC_MASTER's sends wait on reports: no task is woken in between). What the master ships
goes out through it with the transport's flow control."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable
from typing import cast

from ..common.errors import FerryMQError
from .protocol import FrameReader, HaProtocolError, Hello

# admit(hello, connection) -> what takes each of the slave's reports from then on
Admit = Callable[[Hello, "SlaveConnection"], Callable[[int], None]]
# ended(connection, why): once, when the connection is gone; `why` is None for a plain close
Ended = Callable[["SlaveConnection", BaseException | None], None]


class SlaveConnection(asyncio.Protocol):
    def __init__(self, admit: Admit, ended: Ended, hello_timeout_s: float) -> None:
        self._admit = admit
        self._ended = ended
        self._hello_timeout_s = hello_timeout_s
        self._frames = FrameReader()
        self._transport: asyncio.Transport | None = None
        self._report: Callable[[int], None] | None = None
        self._hello_timer: asyncio.TimerHandle | None = None
        self._writable = asyncio.Event()
        self._writable.set()
        self._error: BaseException | None = None
        self._lost = False
        self.peer = ""

    # --- asyncio's calls -------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # A stream transport (uvloop's TLS one is not an asyncio.Transport subclass).
        self._transport = cast(asyncio.Transport, transport)
        peer = transport.get_extra_info("peername")
        self.peer = f"{peer[0]}:{peer[1]}" if peer else "?"
        self._hello_timer = asyncio.get_running_loop().call_later(
            self._hello_timeout_s, self._fail, TimeoutError(f"no HELLO within {self._hello_timeout_s} s"))

    def data_received(self, data: bytes) -> None:
        try:
            frames = self._frames.feed(data)
            report = self._report
            if report is None:
                if not frames:
                    return
                if not isinstance(frames[0], Hello) or len(frames) > 1:
                    raise HaProtocolError("the first frame must be HELLO, alone")
                if self._hello_timer is not None:
                    self._hello_timer.cancel()
                self._report = self._admit(frames[0], self)
                return
            for frame in frames:
                if not isinstance(frame, int):
                    raise HaProtocolError(f"a slave sent {type(frame).__name__}")
                report(frame)
        except (FerryMQError, OSError) as exc:
            self._fail(exc)

    def pause_writing(self) -> None:
        self._writable.clear()

    def resume_writing(self) -> None:
        self._writable.set()

    def connection_lost(self, exc: Exception | None) -> None:
        self._lost = True
        self._writable.set()  # a drain waiting ends, and fails
        if self._hello_timer is not None:
            self._hello_timer.cancel()
        self._ended(self, self._error or exc)

    # --- what the master writes through ----------------------------------------------------
    # A write once the connection is closing is dropped, as asyncio's transports drop it
    # (uvloop's raise RuntimeError).
    def write(self, data: bytes) -> None:
        if not self.is_closing():
            assert self._transport is not None
            self._transport.write(data)

    def writelines(self, parts: Iterable[bytes]) -> None:
        if not self.is_closing():
            assert self._transport is not None
            self._transport.writelines(parts)

    def buffered(self) -> int:
        """Bytes written and not yet taken by the socket."""
        return self._transport.get_write_buffer_size() if self._transport is not None else 0

    async def drain(self) -> None:
        """Wait while the socket's buffer is over its high-water mark."""
        if not self._lost:
            await self._writable.wait()
        if self._lost:
            raise ConnectionResetError(f"the connection from {self.peer} is closed")

    def is_closing(self) -> bool:
        return self._lost or self._transport is None or self._transport.is_closing()

    def close(self) -> None:
        if self._transport is not None:
            self._transport.close()

    def _fail(self, error: BaseException) -> None:
        if self._error is None:
            self._error = error
        self.close()
