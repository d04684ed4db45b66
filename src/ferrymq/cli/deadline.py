"""A command's --timeout bounds the whole command: starting its client (name-server lookups,
heartbeats), its requests with their retries, and stopping the client again. The client's
own timeouts bound single requests; the deadline bounds their sum."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

from .failures import CommandFailed

T = TypeVar("T")

log = logging.getLogger("ferrymq.cli")

# The clients' own bound of one request (their default request timeout).
REQUEST_TIMEOUT = 3.0
# How long past the deadline a stage may run before it is abandoned: the client's own error
# (which names the request that went unanswered) ends a stage bounded by the same deadline,
# and is reported rather than this module's.
GRACE = 0.5


class Deadline:
    def __init__(self, operation: str, seconds: float | None) -> None:
        self.operation = operation
        self.seconds = seconds
        self.end = None if seconds is None else time.monotonic() + seconds

    def left(self) -> float | None:
        """Seconds until the deadline (0 once past); None without one."""
        return None if self.end is None else max(0.0, self.end - time.monotonic())

    def passed(self) -> bool:
        return self.end is not None and time.monotonic() >= self.end

    def request_timeout(self) -> float:
        """A single request may take the whole command's time, never more."""
        return REQUEST_TIMEOUT if self.seconds is None else min(REQUEST_TIMEOUT, self.seconds)

    async def run(self, coro: Coroutine[Any, Any, T], doing: str,
                  cause: Callable[[], object] | None = None) -> T:
        """Await `coro` until the deadline (plus GRACE); past it, CommandFailed saying what
        was under way (`doing`) and, when `cause` returns one, the failure behind it."""
        left = self.left()
        if left is None:
            return await coro
        scope = asyncio.timeout(left + GRACE)
        try:
            async with scope:
                return await coro
        except TimeoutError:
            if not scope.expired():
                raise  # the client's own timeout: its error says more
            why: object = None
            if cause is not None:
                with contextlib.suppress(Exception):  # the deadline is the news; a cause helps
                    why = cause()
            raise CommandFailed(
                f"{self.operation} did not finish within {self.seconds:g}s: still {doing}"
                + (f" ({why})" if why else ""),
                kind="TimeoutError",
            ) from None

    async def close(self, coro: Coroutine[Any, Any, object], what: str) -> None:
        """Stop a client within the time left: what it could not tell the brokers by the
        deadline (unregistering, persisting offsets) is left undone, as after a crash; the
        command's outcome is known by then and is what it reports."""
        left = self.left()
        try:
            if left is None:
                await coro
                return
            async with asyncio.timeout(left):
                await coro
        except TimeoutError:
            log.debug("%s: stopping the %s was cut short by the deadline", self.operation, what)
        except Exception as exc:
            log.debug("%s: stopping the %s failed: %s", self.operation, what, exc)
