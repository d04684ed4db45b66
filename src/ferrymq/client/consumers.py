"""The blocking push and lite pull consumers: their async cores on the client instance's
event-loop thread. Listeners of a blocking PushConsumer run on its consume thread pool."""

from __future__ import annotations

from collections.abc import Callable, Coroutine, Iterable
from typing import Any, TypeVar

from ..common.message import MessageExt, MessageQueue
from .blocking import run_coro, run_sync, shutdown_blocking, start_blocking
from .consumer.lite import AsyncLitePullConsumer
from .consumer.push import AsyncPushConsumer
from .loop import LoopThread

T = TypeVar("T")

# Slack over the consumer's own shutdown_timeout for persisting offsets and unregistering.
SHUTDOWN_MARGIN = 30.0


class PushConsumer:
    def __init__(self, group: str, namesrv: str = "127.0.0.1:9876", **options: Any) -> None:
        self._impl = AsyncPushConsumer(group, namesrv, **options)
        self._loop: LoopThread | None = None

    @property
    def group(self) -> str:
        return self._impl.group

    @property
    def client_id(self) -> str:
        return self._impl.client_id

    def subscribe(self, topic: str, expression: str = "*") -> None:
        run_sync(self._loop, lambda: self._impl.subscribe(topic, expression))

    def unsubscribe(self, topic: str) -> None:
        run_sync(self._loop, lambda: self._impl.unsubscribe(topic))

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
        run_coro(
            self._loop,
            self._impl.rebalancer.rebalance(),
            60,
            lambda: self._impl.require_running("rebalance"),
        )

    def persist_offsets(self) -> None:
        run_coro(
            self._loop,
            self._impl.persist_all(),
            60,
            lambda: self._impl.require_running("persist offsets"),
        )


class LitePullConsumer:
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

    def subscribe(self, topic: str, expression: str = "*") -> None:
        run_sync(self._loop, lambda: self._impl.subscribe(topic, expression))

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

    def commit(self) -> None:
        self._run(self._impl.commit())

    def committed(self, mq: MessageQueue) -> int:
        return self._run(self._impl.committed(mq))

    def seek(self, mq: MessageQueue, offset: int) -> None:
        self._run(self._impl.seek(mq, offset))

    def pause(self, queues: Iterable[MessageQueue]) -> None:
        qs = list(queues)
        run_sync(self._loop, lambda: self._impl.pause(qs))

    def resume(self, queues: Iterable[MessageQueue]) -> None:
        qs = list(queues)
        run_sync(self._loop, lambda: self._impl.resume(qs))

    def assignment(self) -> set[MessageQueue]:
        return run_sync(self._loop, self._impl.assignment)
