"""The blocking clients are generated from their async cores: starting and stopping a core on
a shared blocking client instance, and `blocking` / `on_loop`, which turn a core's method into
the blocking method of the same name, signature and docstring."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Coroutine
from typing import Any, Concatenate, Generic, ParamSpec, Protocol, TypeVar, overload

from .instance import ClientInstance, InstanceConfig, abandon, acquire_blocking
from .lifecycle import State
from .loop import LoopThread

T = TypeVar("T")
P = ParamSpec("P")
Impl = TypeVar("Impl")
Impl_co = TypeVar("Impl_co", covariant=True)

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
    if thread is None or thread.closed:
        # Not started, or shut down: the client says which, not the loop it ran on.
        coro.close()
        not_started()
        raise AssertionError("not_started must raise")
    return thread.run(coro, timeout)


class Facade(Generic[Impl_co]):
    """Base of a blocking client: `_impl` is its async core; `_run_blocking` runs one of the
    core's coroutines to completion on the core's event-loop thread (each facade sets the
    timeout and what "not started" means); `_run_on_loop` runs a plain method there."""

    _impl: Impl_co
    _loop: LoopThread | None

    def _run_blocking(self, coro: Coroutine[Any, Any, T], action: str) -> T:
        raise NotImplementedError

    def _run_on_loop(self, fn: Callable[[], T]) -> T:
        return run_sync(self._loop, fn)


class _Generated(Generic[Impl, P, T]):
    """A method of a blocking facade made from the core's method `method`. Bound once per
    facade instance (cached in the instance's dict), so a call costs one closure call."""

    def __init__(self, method: Callable[Concatenate[Impl, P], Any], action: str | None) -> None:
        self.method = method
        self.action = action
        self.name = method.__name__
        self.__doc__ = method.__doc__

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name
        if self.action is None:
            self.action = name.replace("_", " ")

    def _make(self, host: Facade[Impl]) -> Callable[P, T]:
        raise NotImplementedError

    @overload
    def __get__(self, obj: None, owner: type) -> _Generated[Impl, P, T]: ...

    @overload
    def __get__(self, obj: Facade[Impl], owner: type) -> Callable[P, T]: ...

    def __get__(
        self, obj: Facade[Impl] | None, owner: type
    ) -> _Generated[Impl, P, T] | Callable[P, T]:
        if obj is None:
            return self
        bound = self._make(obj)
        functools.update_wrapper(bound, self.method, updated=())
        del bound.__wrapped__  # type: ignore[attr-defined]
        bound.__name__ = self.name
        bound.__qualname__ = f"{type(obj).__qualname__}.{self.name}"
        bound.__signature__ = self.signature  # type: ignore[attr-defined]
        obj.__dict__[self.name] = bound
        return bound

    @functools.cached_property
    def signature(self) -> inspect.Signature:
        # The core's parameters without self. An async def's return annotation already names
        # the awaited type, which is what the blocking method returns.
        sig = inspect.signature(self.method)
        return sig.replace(parameters=list(sig.parameters.values())[1:])


class _BlockingMethod(_Generated[Impl, P, T]):
    def _make(self, host: Facade[Impl]) -> Callable[P, T]:
        method, impl, action = self.method, host._impl, self.action or self.name

        def call(*args: P.args, **kwargs: P.kwargs) -> T:
            coro: Coroutine[Any, Any, T] = method(impl, *args, **kwargs)
            return host._run_blocking(coro, action)

        return call


class _LoopMethod(_Generated[Impl, P, T]):
    def _make(self, host: Facade[Impl]) -> Callable[P, T]:
        method, impl = self.method, host._impl

        def call(*args: P.args, **kwargs: P.kwargs) -> T:
            def run() -> T:
                result: T = method(impl, *args, **kwargs)
                return result

            return host._run_on_loop(run)

        return call


def blocking(
    method: Callable[Concatenate[Impl, P], Coroutine[Any, Any, T]], *, action: str | None = None
) -> _Generated[Impl, P, T]:
    """The blocking form of the core's coroutine method `method`: same parameters, returns
    what the coroutine returns. `action` names it in "not started" errors (default: its
    name)."""
    return _BlockingMethod(method, action)


def on_loop(method: Callable[Concatenate[Impl, P], T]) -> _Generated[Impl, P, T]:
    """The core's plain method `method`, run on the core's loop thread once it is started
    (the state it touches belongs to the loop), directly before."""
    return _LoopMethod(method, None)
