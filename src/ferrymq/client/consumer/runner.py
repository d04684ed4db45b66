"""Calling the user's listener: plain functions on a thread pool (consume_threads of them),
coroutine functions on the event loop with at most consume_threads in flight. An exception
is logged and becomes "no result", which the services treat as a failure."""

from __future__ import annotations

import asyncio
import inspect
import logging
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from ...common import props as P
from ...common.message import MessageExt

log = logging.getLogger("ferrymq.client.listener")


def is_async_callable(fn: Callable[..., Any]) -> bool:
    # Callable objects count too when their class's __call__ is a coroutine function.
    return inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(
        vars(type(fn)).get("__call__")
    )


def _mark_started(msgs: list[MessageExt]) -> None:
    now = str(int(time.time() * 1000))
    for m in msgs:
        m.properties[P.PROPERTY_CONSUME_START_TIMESTAMP] = now


def _listener_failed(exc: Exception, msgs: list[MessageExt], ctx: Any) -> None:
    """One line per failure: a listener that fails on every message of a backlog would
    otherwise print a traceback per message. The traceback is there at debug level."""
    log.warning(
        "listener raised %s on %d message(s) of %s (first %s): %s",
        type(exc).__name__,
        len(msgs),
        ctx.message_queue,
        msgs[0].msg_id if msgs else "-",
        exc,
    )
    log.debug("listener traceback", exc_info=exc)


class ListenerRunner:
    def __init__(self, fn: Callable[..., Any], threads: int, name: str) -> None:
        self.fn = fn
        self.threads = threads
        self.is_async = is_async_callable(fn)
        self._executor: ThreadPoolExecutor | None = None
        self._semaphore: asyncio.Semaphore | None = None
        self._name = name

    async def call(self, msgs: list[MessageExt], ctx: Any) -> Any:
        """The listener's return value, or None when it raised."""
        if self.is_async:
            if self._semaphore is None:
                self._semaphore = asyncio.Semaphore(self.threads)
            async with self._semaphore:
                _mark_started(msgs)
                try:
                    return await self.fn(list(msgs), ctx)
                except Exception as exc:
                    _listener_failed(exc, msgs, ctx)
                    return None
        if self._executor is None:
            self._executor = ThreadPoolExecutor(self.threads, thread_name_prefix=self._name)
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor, self._call_sync, msgs, ctx)

    def _call_sync(self, msgs: list[MessageExt], ctx: Any) -> Any:
        _mark_started(msgs)
        try:
            return self.fn(list(msgs), ctx)
        except Exception as exc:
            _listener_failed(exc, msgs, ctx)
            return None

    def shutdown(self) -> None:
        if self._executor is not None:
            self._executor.shutdown(wait=False, cancel_futures=True)
            self._executor = None
