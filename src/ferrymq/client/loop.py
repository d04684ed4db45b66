"""A private asyncio event loop on a daemon thread: the blocking clients run their async core
there, so a plain threaded program gets long polling, heartbeats and timers without owning
an event loop itself."""

from __future__ import annotations

import asyncio
import concurrent.futures
import itertools
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

from .errors import ClientStateError

T = TypeVar("T")

_names = itertools.count(1)


def new_event_loop() -> asyncio.AbstractEventLoop:
    """uvloop when it is installed (it roughly halves per-request overhead), asyncio otherwise.
    The global event-loop policy is left alone: a library must not change its host's loop."""
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop is a dependency on every platform we test
        return asyncio.new_event_loop()
    loop: asyncio.AbstractEventLoop = uvloop.new_event_loop()
    return loop


class LoopThread:
    def __init__(self, name: str | None = None) -> None:
        self.loop = new_event_loop()
        self._thread = threading.Thread(
            target=self._run, name=name or f"ferrymq-loop-{next(_names)}", daemon=True
        )
        self._started = threading.Event()
        self._closed = False
        self._thread.start()
        self._started.wait()

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.call_soon(self._started.set)
        self.loop.run_forever()
        # Let cancelled tasks unwind before the loop is closed.
        pending = [t for t in asyncio.all_tasks(self.loop) if not t.done()]
        for task in pending:
            task.cancel()
        if pending:
            self.loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
        self.loop.run_until_complete(self.loop.shutdown_asyncgens())
        self.loop.close()

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def in_loop_thread(self) -> bool:
        return threading.current_thread() is self._thread

    def submit(self, coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        if self._closed:
            coro.close()
            raise ClientStateError("client event loop", "closed", "run a request")
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    def run(self, coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        """Run `coro` on the loop and wait for it. Calling this from the loop's own thread
        (e.g. a blocking call inside an async listener) would deadlock, so it is refused."""
        if self.in_loop_thread:
            coro.close()
            raise ClientStateError(
                "client event loop",
                "busy in this thread",
                "block on itself; use the ferrymq.aio API from async code, and register a "
                "listener that makes blocking calls without blocking=False",
            )
        future = self.submit(coro)
        try:
            return future.result(timeout)
        except concurrent.futures.TimeoutError:
            future.cancel()
            raise TimeoutError(f"operation did not finish within {timeout}s") from None

    def stop(self, timeout: float = 10.0) -> None:
        if self._closed:
            return
        self._closed = True
        self.loop.call_soon_threadsafe(self.loop.stop)
        if not self.in_loop_thread:
            self._thread.join(timeout)


async def wait_event(event: asyncio.Event, timeout: float) -> bool:
    """Wait for `event` at most `timeout` seconds; True when it is set.

    asyncio.timeout rather than asyncio.wait_for: on Python 3.11, wait_for swallows a
    cancellation that arrives just as the awaited event fires, and a loop built on it then
    never stops."""
    if event.is_set():
        return True
    try:
        async with asyncio.timeout(timeout):
            await event.wait()
    except TimeoutError:
        return event.is_set()
    return True
