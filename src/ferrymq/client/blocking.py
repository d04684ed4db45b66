"""Starting and stopping an async client core on a shared blocking client instance."""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import Any, Protocol, TypeVar

from .instance import ClientInstance, InstanceConfig, abandon, acquire_blocking
from .lifecycle import State
from .loop import LoopThread

T = TypeVar("T")

START_TIMEOUT = 60.0


class _Core(Protocol):
    group: str
    instance_config: InstanceConfig
    state: State

    def require_created(self, action: str) -> None: ...

    async def attach(self, inst: ClientInstance) -> None: ...

    async def shutdown(self) -> bool: ...


def start_blocking(core: _Core, kind: str) -> LoopThread:
    core.require_created("start")
    thread, inst = acquire_blocking(core.instance_config, kind, core.group)
    try:
        thread.run(core.attach(inst), START_TIMEOUT)
    except BaseException:
        core.state = State.SHUTDOWN
        if thread.run(abandon(inst, kind, core.group), START_TIMEOUT):
            thread.stop()
        raise
    return thread


def shutdown_blocking(core: _Core, thread: LoopThread | None, timeout: float) -> None:
    if thread is None or core.state is not State.RUNNING:
        core.state = State.SHUTDOWN
        return
    if thread.run(core.shutdown(), timeout):
        thread.stop()


async def call_in_loop(fn: Callable[[], T]) -> T:
    """Run a plain function on the loop thread (state the loop owns is only touched there)."""
    return fn()


def run_sync(thread: LoopThread | None, fn: Callable[[], T], timeout: float = 30.0) -> T:
    if thread is None:
        return fn()  # not started: nothing runs on a loop yet
    return thread.run(call_in_loop(fn), timeout)


def run_coro(
    thread: LoopThread | None,
    coro: Coroutine[Any, Any, T],
    timeout: float,
    not_started: Callable[[], None],
) -> T:
    if thread is None:
        coro.close()
        not_started()
        raise AssertionError("not_started must raise")
    return thread.run(coro, timeout)
