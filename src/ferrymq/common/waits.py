"""Deadlines for futures on the hot paths (requests, synced puts, held pulls)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator
from typing import Any


@contextlib.contextmanager
def expire_after(fut: asyncio.Future[Any], timeout: float) -> Iterator[None]:
    """Fail `fut` with TimeoutError if it is not done `timeout` seconds from now, for as long
    as the block runs. A timer handle rather than asyncio.wait_for or asyncio.timeout: on 3.11
    wait_for wraps the future in a task, and either costs more than the rest of a small
    request. The future is failed on expiry, so it must be the caller's own."""
    timer = asyncio.get_running_loop().call_later(timeout, expire, fut)
    try:
        yield
    finally:
        timer.cancel()


def expire(fut: asyncio.Future[Any]) -> None:
    """A timer's callback: fail `fut` with TimeoutError unless it is done."""
    if not fut.done():
        fut.set_exception(TimeoutError())
