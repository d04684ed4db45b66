"""The blocking push, lite pull and simple consumers: their async cores on the client instance's
event-loop thread, with methods generated from the cores' (see blocking.py). Listeners of a
blocking PushConsumer run on its consume thread pool."""

from __future__ import annotations

from collections.abc import Callable, Coroutine, Iterable
from typing import Any, TypeVar

from ..common.message import MessageExt, MessageQueue
from .blocking import Facade, blocking, on_loop, run_coro, run_sync, shutdown_blocking, start_blocking
from .consumer.lite import AsyncLitePullConsumer
from .consumer.push import AsyncPushConsumer
from .consumer.simple import AsyncSimpleConsumer, MessageView
from .loop import LoopThread

T = TypeVar("T")

# Slack over the consumer's own shutdown_timeout for persisting offsets and unregistering.
SHUTDOWN_MARGIN = 30.0


class PushConsumer(Facade[AsyncPushConsumer]):
    def __init__(self, group: str, namesrv: str = "127.0.0.1:9876", **options: Any) -> None:
        self._impl = AsyncPushConsumer(group, namesrv, **options)
        self._loop: LoopThread | None = None

    @property
    def group(self) -> str:
        return self._impl.group

    @property
    def client_id(self) -> str:
        return self._impl.client_id

    def _run_blocking(self, coro: Coroutine[Any, Any, T], action: str) -> T:
        return run_coro(self._loop, coro, 60, lambda: self._impl.require_running(action))

    subscribe = on_loop(AsyncPushConsumer.subscribe)
    unsubscribe = on_loop(AsyncPushConsumer.unsubscribe)

    def register_listener(self, fn: Callable[..., Any], *, orderly: bool = False) -> None:
        self._impl.register_listener(fn, orderly=orderly)

    def start(self) -> PushConsumer:
        self._loop = start_blocking(self._impl, "C")
        return self

    def shutdown(self) -> None:
        shutdown_blocking(
            self._impl, self._loop, self._impl.options.shutdown_timeout + SHUTDOWN_MARGIN
        )

    def __enter__(self) -> PushConsumer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.shutdown()

    def assignment(self) -> set[MessageQueue]:
        return run_sync(self._loop, lambda: set(self._impl.table))

    def rebalance_now(self) -> None:
        """Rebalance at once instead of waiting for the next interval (tests, operations)."""
        self._run_blocking(self._impl.rebalancer.rebalance(), "rebalance")

    persist_offsets = blocking(AsyncPushConsumer.persist_all, action="persist offsets")


class LitePullConsumer(Facade[AsyncLitePullConsumer]):
    def __init__(
        self,
        group: str,
        namesrv: str = "127.0.0.1:9876",
        *,
        auto_commit: bool = True,
        **options: Any,
    ) -> None:
        self._impl = AsyncLitePullConsumer(group, namesrv, auto_commit=auto_commit, **options)
        self._loop: LoopThread | None = None

    @property
    def group(self) -> str:
        return self._impl.group

    def _run(self, coro: Coroutine[Any, Any, T], timeout: float = 60.0) -> T:
        return run_coro(self._loop, coro, timeout, lambda: self._impl.require_running("do that"))

    def _run_blocking(self, coro: Coroutine[Any, Any, T], action: str) -> T:
        return self._run(coro)

    subscribe = on_loop(AsyncLitePullConsumer.subscribe)

    def assign(self, queues: Iterable[MessageQueue]) -> None:
        qs = list(queues)
        if self._loop is None:
            self._impl.record_assignment(qs)  # taken at start()
            return
        self._run(self._impl.assign(qs))

    def start(self) -> LitePullConsumer:
        self._loop = start_blocking(self._impl, "C")
        return self

    def shutdown(self) -> None:
        shutdown_blocking(
            self._impl, self._loop, self._impl.options.shutdown_timeout + SHUTDOWN_MARGIN
        )

    def __enter__(self) -> LitePullConsumer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.shutdown()

    def poll(self, timeout: float = 1.0, max_messages: int | None = None) -> list[MessageExt]:
        return self._run(self._impl.poll(timeout, max_messages), timeout + 30)

    commit = blocking(AsyncLitePullConsumer.commit)
    committed = blocking(AsyncLitePullConsumer.committed)
    seek = blocking(AsyncLitePullConsumer.seek)
    pause = on_loop(AsyncLitePullConsumer.pause)
    resume = on_loop(AsyncLitePullConsumer.resume)
    assignment = on_loop(AsyncLitePullConsumer.assignment)


class SimpleConsumer(Facade[AsyncSimpleConsumer]):
    """Pop consumption with per-message acknowledgement (see AsyncSimpleConsumer)."""

    def __init__(self, group: str, namesrv: str = "127.0.0.1:9876", **options: Any) -> None:
        self._impl = AsyncSimpleConsumer(group, namesrv, **options)
        self._loop: LoopThread | None = None

    @property
    def group(self) -> str:
        return self._impl.group

    def _run_blocking(self, coro: Coroutine[Any, Any, T], action: str) -> T:
        return run_coro(self._loop, coro, 60, lambda: self._impl.require_running(action))

    subscribe = on_loop(AsyncSimpleConsumer.subscribe)
    unsubscribe = on_loop(AsyncSimpleConsumer.unsubscribe)

    def start(self) -> SimpleConsumer:
        self._loop = start_blocking(self._impl, "C")
        return self

    def shutdown(self) -> None:
        shutdown_blocking(self._impl, self._loop, SHUTDOWN_MARGIN)

    def __enter__(self) -> SimpleConsumer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.shutdown()

    def receive(self, max_messages: int = 16, invisible_duration: float = 30.0, *,
                await_duration: float | None = None) -> list[MessageView]:
        wait = self._impl.await_duration if await_duration is None else await_duration
        return run_coro(self._loop,
                        self._impl.receive(max_messages, invisible_duration,
                                           await_duration=await_duration),
                        wait + 60, lambda: self._impl.require_running("receive"))

    ack = blocking(AsyncSimpleConsumer.ack)
    change_invisible_duration = blocking(AsyncSimpleConsumer.change_invisible_duration)
