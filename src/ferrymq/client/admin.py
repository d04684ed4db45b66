"""The blocking administration client: AsyncAdminClient run on a private event-loop thread."""

from __future__ import annotations

from collections.abc import Coroutine
from typing import Any, TypeVar

from ..common.headers import PERM_READ, PERM_WRITE
from ..common.message import MessageExt, MessageQueue
from ..common.names import TOOLS_CONSUMER_GROUP
from .admin_async import AsyncAdminClient
from .loop import LoopThread
from .results import ConsumerConnections, PullResult, QueueProgress, QueueStatus, RawPullResult
from .route import TopicRoute

T = TypeVar("T")


class AdminClient:
    """Blocking admin client. Thread-safe: calls from several threads share one connection per
    broker. Use as a context manager or call close()."""

    def __init__(
        self, namesrv: str = "127.0.0.1:9876", *, timeout: float = 3.0, route_ttl: float = 5.0
    ) -> None:
        self._impl = AsyncAdminClient(namesrv, timeout=timeout, route_ttl=route_ttl)
        self._loop = LoopThread("ferrymq-admin")
        # A call waits for its requests plus scheduling slack; a hung broker cannot hang us.
        self._call_timeout = timeout * 4 + 5

    @property
    def namesrv(self) -> str:
        return self._impl.namesrv

    def _run(self, coro: Coroutine[Any, Any, T]) -> T:
        return self._loop.run(coro, self._call_timeout)

    def close(self) -> None:
        try:
            self._loop.run(self._impl.close(), self._call_timeout)
        finally:
            self._loop.stop()

    def __enter__(self) -> AdminClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def topic_route(self, topic: str, *, refresh: bool = False) -> TopicRoute:
        return self._run(self._impl.topic_route(topic, refresh=refresh))

    def message_queues(self, topic: str) -> list[MessageQueue]:
        return self._run(self._impl.message_queues(topic))

    def brokers(self) -> dict[str, str]:
        return self._run(self._impl.brokers())

    def max_offset(self, mq: MessageQueue) -> int:
        return self._run(self._impl.max_offset(mq))

    def min_offset(self, mq: MessageQueue) -> int:
        return self._run(self._impl.min_offset(mq))

    def search_offset(self, mq: MessageQueue, timestamp_ms: int) -> int:
        return self._run(self._impl.search_offset(mq, timestamp_ms))

    def pull(
        self,
        mq: MessageQueue,
        offset: int,
        max_nums: int = 32,
        *,
        expression: str = "*",
        group: str = TOOLS_CONSUMER_GROUP,
    ) -> PullResult:
        return self._run(self._impl.pull(mq, offset, max_nums, expression=expression, group=group))

    def pull_raw(
        self,
        mq: MessageQueue,
        offset: int,
        max_nums: int = 32,
        *,
        expression: str = "*",
        group: str = TOOLS_CONSUMER_GROUP,
    ) -> RawPullResult:
        return self._run(
            self._impl.pull_raw(mq, offset, max_nums, expression=expression, group=group)
        )

    def query_consumer_offset(self, group: str, mq: MessageQueue) -> int:
        return self._run(self._impl.query_consumer_offset(group, mq))

    def update_consumer_offset(self, group: str, mq: MessageQueue, offset: int) -> None:
        self._run(self._impl.update_consumer_offset(group, mq, offset))

    def create_topic(
        self,
        topic: str,
        queue_nums: int = 4,
        *,
        read_queue_nums: int | None = None,
        perm: int = PERM_READ | PERM_WRITE,
        order: bool = False,
        cluster: str | None = None,
    ) -> list[str]:
        return self._run(
            self._impl.create_topic(
                topic,
                queue_nums,
                read_queue_nums=read_queue_nums,
                perm=perm,
                order=order,
                cluster=cluster,
            )
        )

    def topic_list(self) -> list[str]:
        return self._run(self._impl.topic_list())

    def topic_status(self, topic: str) -> list[QueueStatus]:
        return self._run(self._impl.topic_status(topic))

    def consume_stats(self, group: str, topic: str | None = None) -> list[QueueProgress]:
        return self._run(self._impl.consume_stats(group, topic))

    def group_progress(self, group: str) -> list[QueueProgress]:
        return self._run(self._impl.group_progress(group))

    def reset_offset_by_time(
        self, group: str, topic: str, timestamp_ms: int, *, force: bool = True
    ) -> dict[MessageQueue, int]:
        return self._run(self._impl.reset_offset_by_time(group, topic, timestamp_ms, force=force))

    def consumer_connections(self, group: str) -> ConsumerConnections:
        return self._run(self._impl.consumer_connections(group))

    def consumer_ids(self, group: str) -> list[str]:
        return self._run(self._impl.consumer_ids(group))

    def view_message(self, offset_msg_id: str) -> MessageExt:
        return self._run(self._impl.view_message(offset_msg_id))

    def query_message(self, topic: str, key: str, *, max_num: int = 32) -> list[MessageExt]:
        return self._run(self._impl.query_message(topic, key, max_num=max_num))

    def query_by_uniq_key(self, topic: str, uniq: str) -> MessageExt:
        return self._run(self._impl.query_by_uniq_key(topic, uniq))
