"""A `concurrent.futures.Future` that costs a third of the standard one per send.

The blocking producer gives every `send_async` its own future. The standard one builds a
`threading.Condition` in its constructor (a Python object holding an RLock and its bound
methods) and takes that condition for every call, even when nobody ever blocks on it: with
512 sends in flight that was a quarter of the client's CPU per message. `LightFuture` holds one
plain lock and builds the condition, over that same lock, only when a thread has to wait
(`result()` or `exception()` before the end, `concurrent.futures.wait`, `as_completed`).

It is a real subclass with the standard's state and fields, so whatever takes a
`concurrent.futures.Future` takes it: `wait`, `as_completed` (they reach into `_condition`,
`_state` and `_waiters`), `asyncio.wrap_future`, callbacks, cancellation before it runs."""

from __future__ import annotations

import _thread
import concurrent.futures
import threading
from collections.abc import Callable
from concurrent.futures._base import (
    CANCELLED,
    CANCELLED_AND_NOTIFIED,
    FINISHED,
    LOGGER,
    PENDING,
    RUNNING,
)
from typing import Any, TypeVar

T = TypeVar("T")

_CANCELLED_STATES = (CANCELLED, CANCELLED_AND_NOTIFIED)
_DONE_STATES = (CANCELLED, CANCELLED_AND_NOTIFIED, FINISHED)
# Taken only to build a future's condition, so two threads asking at once get the same one
# (a waiter on one and a notify on the other would never meet).
_BUILDING = _thread.allocate_lock()


class LightFuture(concurrent.futures.Future[T]):
    # The standard constructor is not called: it would build the condition this class defers.
    def __init__(self) -> None:
        self._lock = _thread.allocate_lock()
        self._cond: threading.Condition | None = None
        self._state = PENDING
        self._result: Any = None
        self._exception: BaseException | None = None
        # Both made when first needed: most futures are waited on with result() and have
        # neither a waiter of `wait`/`as_completed` nor a callback, and two empty lists a
        # message were two more objects for the cyclic collector to visit while in flight.
        self._waiter_list: list[Any] | None = None
        self._done_callbacks: list[Callable[[concurrent.futures.Future[T]], object]] | None = None

    @property  # type: ignore[override]
    def _condition(self) -> threading.Condition:
        cond = self._cond
        if cond is None:
            with _BUILDING:
                cond = self._cond
                if cond is None:
                    cond = self._cond = threading.Condition(self._lock)
        return cond

    @_condition.setter
    def _condition(self, value: threading.Condition) -> None:
        raise AttributeError("a LightFuture's condition is built over its own lock")

    @property
    def _waiters(self) -> list[Any]:  # type: ignore[override]
        # For concurrent.futures.wait and as_completed, which append and remove theirs
        # holding the condition.
        waiters = self._waiter_list
        if waiters is None:
            waiters = self._waiter_list = []
        return waiters

    # --- asked by the caller -----------------------------------------------------------------
    def cancel(self) -> bool:
        with self._lock:
            state = self._state
            if state in (RUNNING, FINISHED):
                return False
            if state in _CANCELLED_STATES:
                return True
            self._state = CANCELLED
            if self._cond is not None:
                self._cond.notify_all()
        self._invoke_callbacks()
        return True

    # A state is one attribute read: no lock needed to look at it.
    def cancelled(self) -> bool:
        return self._state in _CANCELLED_STATES

    def running(self) -> bool:
        return self._state == RUNNING

    def done(self) -> bool:
        return self._state in _DONE_STATES

    def add_done_callback(self, fn: Callable[[concurrent.futures.Future[T]], object]) -> None:
        with self._lock:
            if self._state not in _DONE_STATES:
                callbacks = self._done_callbacks
                if callbacks is None:
                    self._done_callbacks = [fn]
                else:
                    callbacks.append(fn)
                return
        try:
            fn(self)
        except Exception:
            LOGGER.exception("exception calling callback for %r", self)

    def result(self, timeout: float | None = None) -> T:
        if self._state != FINISHED:
            self._wait(timeout)
        exc = self._exception
        if exc is not None:
            try:
                raise exc
            finally:
                del exc  # no cycle through the traceback's frame
        result: T = self._result
        return result

    def exception(self, timeout: float | None = None) -> BaseException | None:
        if self._state != FINISHED:
            self._wait(timeout)
        return self._exception

    def _wait(self, timeout: float | None) -> None:
        """Returns once FINISHED; raises CancelledError or TimeoutError otherwise."""
        cond = self._condition
        with cond:
            if self._state in _CANCELLED_STATES:
                raise concurrent.futures.CancelledError()
            if self._state == FINISHED:
                return
            cond.wait(timeout)
            if self._state in _CANCELLED_STATES:
                raise concurrent.futures.CancelledError()
            if self._state != FINISHED:
                raise TimeoutError()

    # --- the side that does the work -----------------------------------------------------------
    def set_running_or_notify_cancel(self) -> bool:
        with self._lock:
            state = self._state
            if state == PENDING:
                self._state = RUNNING
                return True
            if state == CANCELLED:
                self._state = CANCELLED_AND_NOTIFIED
                for waiter in self._waiter_list or ():
                    waiter.add_cancelled(self)
                return False
        LOGGER.critical("Future %s in unexpected state: %s", id(self), state)
        raise RuntimeError("Future in unexpected state")

    def set_result(self, result: T) -> None:
        self._finish(result, None, failed=False)

    def set_exception(self, exception: BaseException | None) -> None:
        self._finish(None, exception, failed=True)

    def _finish(self, result: Any, exception: BaseException | None, *, failed: bool) -> None:
        with self._lock:
            if self._state in _DONE_STATES:
                raise concurrent.futures.InvalidStateError(f"{self._state}: {self!r}")
            self._result = result
            self._exception = exception
            self._state = FINISHED
            for waiter in self._waiter_list or ():
                if failed:
                    waiter.add_exception(self)
                else:
                    waiter.add_result(self)
            if self._cond is not None:
                self._cond.notify_all()
        if self._done_callbacks:
            self._invoke_callbacks()

    def _invoke_callbacks(self) -> None:
        for callback in self._done_callbacks or ():
            try:
                callback(self)
            except Exception:
                LOGGER.exception("exception calling callback for %r", self)

    def __repr__(self) -> str:
        state = self._state
        name = type(self).__name__
        if state == FINISHED:
            if self._exception is not None:
                return f"<{name} at {id(self):#x} state=finished raised {type(self._exception).__name__}>"
            return f"<{name} at {id(self):#x} state=finished returned {type(self._result).__name__}>"
        shown = {PENDING: "pending", RUNNING: "running"}.get(state, "cancelled")
        return f"<{name} at {id(self):#x} state={shown}>"


class SendFuture(LightFuture[T]):
    """A send's future, running from the start: the message is encoded into its batch as it
    is handed over, and a message in a batch cannot be taken out again, so `cancel()` is
    False (as a Kafka producer's send future). Its waiters and callbacks work as any
    future's."""

    def __init__(self) -> None:
        super().__init__()
        self._state = RUNNING
