"""Memory bounds for connections a server accepts.

A peer can make a server hold memory in three ways: replies it never reads (the transport's
write buffer), a frame it starts and never finishes (the partial-frame buffer), and requests
it floods (handler tasks). Each is bounded here or in Connection; none depends on the peer's
good behaviour."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

log = logging.getLogger("ferrymq.remoting")

DEFAULT_WRITE_BUFFER_HIGH = 1 << 20
DEFAULT_WRITE_BUFFER_LOW = 256 << 10
DEFAULT_MAX_INFLIGHT = 4096


@dataclass(frozen=True, slots=True)
class ConnectionLimits:
    # Above the high-water mark of unsent reply bytes the connection stops reading (and stops
    # handling what it has read) until the buffer is below the low-water mark: a peer that does
    # not read its replies cannot make the server queue more of them.
    write_buffer_high: int = DEFAULT_WRITE_BUFFER_HIGH
    write_buffer_low: int = DEFAULT_WRITE_BUFFER_LOW
    # Reading also pauses while this many requests from one peer are being handled.
    max_inflight: int = DEFAULT_MAX_INFLIGHT


class _Holder(Protocol):
    remote_addr: str

    def close(self) -> None: ...


class PartialFrameBudget:
    """Bytes held in frames not yet complete, summed over a server's connections.

    Each connection's partial frame is already bounded by the maximum frame size; this bounds
    their sum. When the sum would exceed the budget, the connection whose partial frame began
    first is closed: a peer that stalls mid-frame loses its connection, a peer sending a large
    frame at full speed finishes before it becomes the oldest."""

    def __init__(self, limit: int, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.limit = limit
        self.used = 0
        self.evicted = 0
        self._clock = clock
        self._holders: dict[_Holder, tuple[int, float]] = {}  # holder -> (bytes, began at)
        self._last_log = float("-inf")

    def update(self, holder: _Holder, nbytes: int) -> None:
        """Record that `holder` now holds `nbytes` of partial frames; close the oldest holders
        while the total is over the budget."""
        prev_bytes, began = self._holders.pop(holder, (0, self._clock()))
        if nbytes < prev_bytes:  # the old frame completed; what is held now began just now
            began = self._clock()
        self.used += nbytes - prev_bytes
        if nbytes:
            self._holders[holder] = (nbytes, began)
        while self.used > self.limit and self._holders:
            victim = min(self._holders, key=lambda h: self._holders[h][1])
            held, since = self._holders.pop(victim)
            self.used -= held
            self.evicted += 1
            self._warn(victim, held, since)
            victim.close()

    def release(self, holder: _Holder) -> None:
        held, _ = self._holders.pop(holder, (0, 0.0))
        self.used -= held

    def _warn(self, victim: _Holder, held: int, since: float) -> None:
        # At most one line every 10 s: a flood of half-sent frames must not flood the log too.
        now = self._clock()
        if now - self._last_log >= 10.0:
            self._last_log = now
            log.warning("closing %s: partial frames held by all connections exceed %d bytes; its "
                        "frame (%d bytes so far) began %.1fs ago (%d closed for this so far)",
                        victim.remote_addr, self.limit, held, now - since, self.evicted)
