"""LightFuture behaves as the standard concurrent.futures.Future for everything a caller or
the standard library does with one, including blocking waits from other threads."""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ferrymq.client.futures import LightFuture

OPS = ("cancel", "cancelled", "running", "done", "start", "set_result", "set_exception",
       "result", "exception", "callback", "repr_state")


def apply(fut: concurrent.futures.Future[Any], op: str, seen: list[str]) -> object:
    """The observable outcome of one operation: its value, or the exception's type."""
    try:
        if op == "cancel":
            return fut.cancel()
        if op == "cancelled":
            return fut.cancelled()
        if op == "running":
            return fut.running()
        if op == "done":
            return fut.done()
        if op == "start":
            return fut.set_running_or_notify_cancel()
        if op == "set_result":
            fut.set_result(7)
            return None
        if op == "set_exception":
            fut.set_exception(ValueError("boom"))
            return None
        if op == "result":
            return fut.result(timeout=0)
        if op == "exception":
            exc = fut.exception(timeout=0)
            return type(exc).__name__ if exc is not None else None
        if op == "callback":
            fut.add_done_callback(lambda f: seen.append(f"cb{len(seen)}:{f.done()}"))
            return None
        if op == "repr_state":
            return repr(fut).split("state=")[1].split(" ")[0]
        raise AssertionError(op)
    except BaseException as exc:  # the exception's type is the outcome
        return type(exc).__name__


@settings(max_examples=400, deadline=None)
@given(st.lists(st.sampled_from(OPS), max_size=12))
def test_every_sequence_of_operations_matches_the_standard_future(ops: list[str]) -> None:
    logging.getLogger("concurrent.futures").disabled = True  # "unexpected state" is expected
    try:
        std: concurrent.futures.Future[Any] = concurrent.futures.Future()
        light: LightFuture[Any] = LightFuture()
        std_seen: list[str] = []
        light_seen: list[str] = []
        for op in ops:
            assert apply(light, op, light_seen) == apply(std, op, std_seen), (op, ops)
            assert light_seen == std_seen, (op, ops)
    finally:
        logging.getLogger("concurrent.futures").disabled = False


def settle_later(fut: LightFuture[int], how: Callable[[LightFuture[int]], None],
                 after: threading.Event) -> threading.Thread:
    def run() -> None:
        assert after.wait(10)
        how(fut)

    t = threading.Thread(target=run)
    t.start()
    return t


def test_result_blocks_until_another_thread_settles_it() -> None:
    fut: LightFuture[int] = LightFuture()
    assert fut.set_running_or_notify_cancel()
    go = threading.Event()
    t = settle_later(fut, lambda f: f.set_result(42), go)
    with pytest.raises(TimeoutError):
        fut.result(timeout=0.01)
    go.set()
    assert fut.result(timeout=10) == 42
    t.join()


def test_exception_and_result_wait_for_a_failure_from_another_thread() -> None:
    fut: LightFuture[int] = LightFuture()
    fut.set_running_or_notify_cancel()
    go = threading.Event()
    t = settle_later(fut, lambda f: f.set_exception(KeyError("k")), go)
    go.set()
    assert isinstance(fut.exception(timeout=10), KeyError)
    with pytest.raises(KeyError):
        fut.result()
    t.join()


def test_a_waiter_sees_a_cancel_from_another_thread() -> None:
    fut: LightFuture[int] = LightFuture()
    go = threading.Event()
    t = settle_later(fut, lambda f: f.cancel(), go)
    go.set()
    with pytest.raises(concurrent.futures.CancelledError):
        fut.result(timeout=10)
    t.join()


def test_wait_and_as_completed_work_with_light_futures() -> None:
    futs: list[LightFuture[int]] = [LightFuture() for _ in range(20)]
    for f in futs:
        f.set_running_or_notify_cancel()
    go = threading.Event()

    def settle_all() -> None:
        assert go.wait(10)
        for i, f in enumerate(futs):
            if i % 5 == 4:
                f.set_exception(RuntimeError(str(i)))
            else:
                f.set_result(i)

    t = threading.Thread(target=settle_all)
    t.start()
    done, pending = concurrent.futures.wait(futs, timeout=0.01)
    assert not done and len(pending) == 20
    go.set()
    first = concurrent.futures.wait(futs, timeout=10, return_when=concurrent.futures.FIRST_COMPLETED)
    assert first.done
    exc_first = concurrent.futures.wait(futs, timeout=10, return_when=concurrent.futures.FIRST_EXCEPTION)
    assert any(f.exception() is not None for f in exc_first.done)
    seen = {f.result() for f in concurrent.futures.as_completed(futs, timeout=10) if f.exception() is None}
    assert seen == {i for i in range(20) if i % 5 != 4}
    t.join()


def _cancelled_then_noticed(make: Callable[[], concurrent.futures.Future[int]]) -> list[set[Any]]:
    fut, other = make(), make()
    assert fut.cancel()
    woke: list[set[Any]] = []

    def waits() -> None:
        woke.append(concurrent.futures.wait([fut, other], timeout=10, return_when="FIRST_COMPLETED").done)

    waiting = threading.Thread(target=waits)
    waiting.start()
    assert not fut.set_running_or_notify_cancel()
    waiting.join(15)
    assert woke == [{fut}]
    return woke


def test_wait_sees_a_cancelled_future_once_its_worker_learns_of_it() -> None:
    """As the standard: a cancelled future counts as done for wait() once the worker's
    set_running_or_notify_cancel has seen the cancellation."""
    _cancelled_then_noticed(LightFuture)
    _cancelled_then_noticed(concurrent.futures.Future)


def test_asyncio_wrap_future_copies_the_result_and_the_error() -> None:
    async def main() -> None:
        ok: LightFuture[int] = LightFuture()
        bad: LightFuture[int] = LightFuture()
        for f in (ok, bad):
            f.set_running_or_notify_cancel()
        loop = asyncio.get_running_loop()
        loop.call_later(0.001, lambda: threading.Thread(target=ok.set_result, args=(5,)).start())
        loop.call_later(0.001, lambda: bad.set_exception(OSError("x")))
        assert await asyncio.wrap_future(ok) == 5
        with pytest.raises(OSError):
            await asyncio.wrap_future(bad)

    asyncio.run(main())


def test_a_failing_callback_is_logged_and_the_next_still_runs(caplog: pytest.LogCaptureFixture) -> None:
    fut: LightFuture[int] = LightFuture()
    ran: list[int] = []

    def bad(_: object) -> None:
        raise ValueError("callback bug")

    fut.add_done_callback(bad)
    fut.add_done_callback(lambda f: ran.append(f.result()))
    fut.set_running_or_notify_cancel()
    with caplog.at_level(logging.ERROR, logger="concurrent.futures"):
        fut.set_result(3)
    assert ran == [3]
    assert "exception calling callback" in caplog.text


def _waiters_wake(value: int, blocked_first: bool) -> None:
    fut: LightFuture[int] = LightFuture()
    fut.set_running_or_notify_cancel()
    got: list[int] = []
    lock = threading.Lock()
    start = threading.Barrier(5)

    def waiter() -> None:
        start.wait(10)
        result = fut.result()  # no timeout: a missed notification hangs, and join fails
        with lock:
            got.append(result)

    def waits_through_wait() -> None:
        start.wait(10)
        done, _ = concurrent.futures.wait([fut])
        with lock:
            got.append(next(iter(done)).result())

    threads = [threading.Thread(target=waiter, daemon=True) for _ in range(3)]
    threads.append(threading.Thread(target=waits_through_wait, daemon=True))
    for t in threads:
        t.start()
    start.wait(10)
    if blocked_first:
        deadline = time.monotonic() + 10
        while not (fut._cond is not None and len(fut._cond._waiters) == 3  # type: ignore[attr-defined]
                   and len(fut._waiters) == 1):
            assert time.monotonic() < deadline, "the waiters never blocked"
            time.sleep(0.0005)
    fut.set_result(value)
    for t in threads:
        t.join(10)
        assert not t.is_alive(), f"a waiter missed the result in round {value}"
    assert got == [value] * 4


@pytest.mark.parametrize("blocked_first", [True, False], ids=["waiters-blocked", "racing"])
def test_every_waiter_wakes_when_the_future_is_settled(blocked_first: bool) -> None:
    """Three threads in result() and one in wait(): settled once they are all blocked (the
    notification path), or at the moment they start (the condition is built only when a
    thread has to wait, maybe while the loop's thread is settling): none may miss it."""
    for round_ in range(50 if blocked_first else 300):
        _waiters_wake(round_, blocked_first)
