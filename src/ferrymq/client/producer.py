"""The blocking producer: AsyncProducer on its client instance's event-loop thread."""

from __future__ import annotations

import concurrent.futures
from collections.abc import Coroutine, Sequence
from typing import Any, TypeVar

from ..common.message import Message, MessageQueue
from .blocking import run_coro, shutdown_blocking, start_blocking
from .loop import LoopThread
from .producer_async import AsyncProducer, QueueSelector
from .results import SendResult

T = TypeVar("T")


class Producer:
    """Thread-safe: any number of threads may send through one started producer."""

    def __init__(self, group: str, namesrv: str = "127.0.0.1:9876", **options: Any) -> None:
        self._impl = AsyncProducer(group, namesrv, **options)
        self._loop: LoopThread | None = None

    @property
    def group(self) -> str:
        return self._impl.group

    def _run(self, coro: Coroutine[Any, Any, T]) -> T:
        # The async core enforces send_timeout; the margin only guards against a wedged loop.
        return run_coro(
            self._loop,
            coro,
            self._impl.send_timeout * 3 + 10,
            lambda: self._impl.require_running("send"),
        )

    def start(self) -> Producer:
        self._loop = start_blocking(self._impl, "P")
        return self

    def shutdown(self) -> None:
        shutdown_blocking(self._impl, self._loop, 30.0)

    def __enter__(self) -> Producer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.shutdown()

    def send(self, msg: Message) -> SendResult:
        return self._run(self._impl.send(msg))

    def send_to_queue(self, msg: Message, mq: MessageQueue) -> SendResult:
        return self._run(self._impl.send_to_queue(msg, mq))

    def send_batch(self, msgs: Sequence[Message]) -> SendResult:
        return self._run(self._impl.send_batch(msgs))

    def send_orderly(
        self, msg: Message, sharding_key: object, *, selector: QueueSelector | None = None
    ) -> SendResult:
        return self._run(self._impl.send_orderly(msg, sharding_key, selector=selector))

    def send_oneway(self, msg: Message) -> None:
        self._run(self._impl.send_oneway(msg))

    def send_async(self, msg: Message) -> concurrent.futures.Future[SendResult]:
        """Validation errors raise here; send errors arrive through the future."""
        self._impl.require_running("send")
        assert self._loop is not None
        out = self._impl._prepare(msg)
        return self._loop.submit(self._impl._send_async(out))

    def message_queues(self, topic: str) -> list[MessageQueue]:
        return self._run(self._impl.message_queues(topic))
