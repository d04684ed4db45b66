"""The one way tests wait for something: poll until a condition holds or a deadline passes.

Importable from every test directory as `waits` (tests/ is on sys.path through the root
conftest). The deadline bounds how long a failing test hangs; it never decides a pass."""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

T = TypeVar("T")

DEFAULT_TIMEOUT = 30.0
# Short enough that a wait ends soon after its condition holds, long enough that a poller
# does not take a core from the servers it is waiting on.
DEFAULT_INTERVAL = 0.01


class WaitTimedOut(AssertionError):
    """The condition never held within `timeout` seconds; `last` is what the probe said last."""

    def __init__(self, what: str, timeout: float, last: object) -> None:
        super().__init__(f"timed out after {timeout}s waiting for {what}; last seen: {last!r}")
        self.what = what
        self.timeout = timeout
        self.last = last


def wait_until(predicate: Callable[[], T], timeout: float = DEFAULT_TIMEOUT, what: str = "condition", *,
               interval: float = DEFAULT_INTERVAL, message: str | None = None) -> T:
    """Call `predicate` until it returns something truthy, and return that.

    `message` is another spelling of `what`, kept for the callers that name it so."""
    what = message if message is not None else what
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise WaitTimedOut(what, timeout, value)
        time.sleep(interval)


async def eventually(probe: Callable[[], T | Awaitable[T]], timeout: float = DEFAULT_TIMEOUT,
                     what: str = "condition", *, interval: float = DEFAULT_INTERVAL) -> T:
    """The event-loop form of `wait_until`: `probe` may be plain or async; between calls the
    loop runs other tasks."""
    deadline = time.monotonic() + timeout
    while True:
        answer = probe()
        value: T = await answer if inspect.isawaitable(answer) else answer  # type: ignore[assignment]
        if value:
            return value
        if time.monotonic() >= deadline:
            raise WaitTimedOut(what, timeout, value)
        await asyncio.sleep(interval)
