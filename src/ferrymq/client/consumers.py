"""The blocking push, lite pull and simple consumers: their async cores on the client instance's
event-loop thread, with methods generated from the cores' (see blocking.py). Listeners of a
blocking PushConsumer run on its consume thread pool."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Coroutine, Iterable
from typing import Any, TypeVar

from ..common.message import MessageExt, MessageQueue
from ..common.paths import StrPath
from ..remoting.tls import TlsClientSettings
from .blocking import Facade, blocking, on_loop, run_coro, run_sync, shutdown_blocking, start_blocking
from .consumer.allocate import AllocateStrategy
from .consumer.lite import AsyncLitePullConsumer
from .consumer.options import CONSUMER_DEFAULTS as _D
from .consumer.push import PUSH_PULL_BATCH_SIZE, AsyncPushConsumer
from .consumer.simple import AsyncSimpleConsumer, MessageView
from .consumer.types import ConsumeFromWhere, MessageModel
from .loop import LoopThread

T = TypeVar("T")

# Slack over the consumer's own shutdown_timeout for persisting offsets and unregistering.
SHUTDOWN_MARGIN = 30.0


class PushConsumer(Facade[AsyncPushConsumer]):
    def __init__(
        self,
        group: str,
        namesrv: str = "127.0.0.1:9876",
        *,
        message_model: MessageModel = _D.message_model,
        consume_from_where: ConsumeFromWhere = _D.consume_from_where,
        consume_timestamp: int | dt.datetime | None = _D.consume_timestamp,
        consume_threads: int = _D.consume_threads,
        consume_message_batch_max_size: int = _D.consume_message_batch_max_size,
        pull_batch_size: int = PUSH_PULL_BATCH_SIZE,
        max_reconsume_times: int | None = _D.max_reconsume_times,
        pull_threshold_for_queue: int = _D.pull_threshold_for_queue,
        pull_threshold_size_for_queue: int = _D.pull_threshold_size_for_queue,
        pull_suspend_timeout: float = _D.pull_suspend_timeout,
        pull_interval: float = _D.pull_interval,
        pull_delay_on_error: float = _D.pull_delay_on_error,
        rebalance_interval: float = _D.rebalance_interval,
        persist_interval: float = _D.persist_interval,
        commit_delay: float = _D.commit_delay,
        local_retry_delay: float = _D.local_retry_delay,
        consume_timeout: float = _D.consume_timeout,
        suspend_current_queue_time: float = _D.suspend_current_queue_time,
        lock_interval: float = _D.lock_interval,
        lock_max_live: float = _D.lock_max_live,
        lock_retry_delay: float = _D.lock_retry_delay,
        shutdown_timeout: float = _D.shutdown_timeout,
        release_wait: float = _D.release_wait,
        allocate_strategy: str | AllocateStrategy = _D.allocate_strategy,
        offset_store_dir: StrPath | None = _D.offset_store_dir,
        precise_ack: bool = _D.precise_ack,
        route_refresh_interval: float = _D.route_refresh_interval,
        heartbeat_interval: float = _D.heartbeat_interval,
        request_timeout: float = _D.request_timeout,
        access_key: str | None = _D.access_key,
        secret_key: str | None = _D.secret_key,
        tls: TlsClientSettings | bool | None = _D.tls,
    ) -> None:
        self._impl = AsyncPushConsumer(
            group, namesrv,
            message_model=message_model, consume_from_where=consume_from_where,
            consume_timestamp=consume_timestamp, consume_threads=consume_threads,
            consume_message_batch_max_size=consume_message_batch_max_size,
            pull_batch_size=pull_batch_size, max_reconsume_times=max_reconsume_times,
            pull_threshold_for_queue=pull_threshold_for_queue,
            pull_threshold_size_for_queue=pull_threshold_size_for_queue,
            pull_suspend_timeout=pull_suspend_timeout, pull_interval=pull_interval,
            pull_delay_on_error=pull_delay_on_error, rebalance_interval=rebalance_interval,
            persist_interval=persist_interval, commit_delay=commit_delay,
            local_retry_delay=local_retry_delay, consume_timeout=consume_timeout,
            suspend_current_queue_time=suspend_current_queue_time, lock_interval=lock_interval,
            lock_max_live=lock_max_live, lock_retry_delay=lock_retry_delay,
            shutdown_timeout=shutdown_timeout, release_wait=release_wait,
            allocate_strategy=allocate_strategy, offset_store_dir=offset_store_dir,
            precise_ack=precise_ack, route_refresh_interval=route_refresh_interval,
            heartbeat_interval=heartbeat_interval, request_timeout=request_timeout,
            access_key=access_key, secret_key=secret_key, tls=tls,
        )
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

    def register_listener(self, fn: Callable[..., Any], *, orderly: bool = False,
                          blocking: bool = True) -> None:
        """See AsyncPushConsumer.register_listener; `blocking=False` runs a listener that never
        waits on the client's I/O thread instead of a consume thread."""
        self._impl.register_listener(fn, orderly=orderly, blocking=blocking)

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
        auto_commit_interval: float = 5.0,
        message_model: MessageModel = _D.message_model,
        consume_from_where: ConsumeFromWhere = _D.consume_from_where,
        consume_timestamp: int | dt.datetime | None = _D.consume_timestamp,
        consume_threads: int = _D.consume_threads,
        consume_message_batch_max_size: int = _D.consume_message_batch_max_size,
        pull_batch_size: int = _D.pull_batch_size,
        max_reconsume_times: int | None = _D.max_reconsume_times,
        pull_threshold_for_queue: int = _D.pull_threshold_for_queue,
        pull_threshold_size_for_queue: int = _D.pull_threshold_size_for_queue,
        pull_suspend_timeout: float = _D.pull_suspend_timeout,
        pull_interval: float = _D.pull_interval,
        pull_delay_on_error: float = _D.pull_delay_on_error,
        rebalance_interval: float = _D.rebalance_interval,
        persist_interval: float | None = None,  # None: auto_commit_interval
        commit_delay: float = _D.commit_delay,
        local_retry_delay: float = _D.local_retry_delay,
        consume_timeout: float = _D.consume_timeout,
        suspend_current_queue_time: float = _D.suspend_current_queue_time,
        lock_interval: float = _D.lock_interval,
        lock_max_live: float = _D.lock_max_live,
        lock_retry_delay: float = _D.lock_retry_delay,
        shutdown_timeout: float = _D.shutdown_timeout,
        release_wait: float = _D.release_wait,
        allocate_strategy: str | AllocateStrategy = _D.allocate_strategy,
        offset_store_dir: StrPath | None = _D.offset_store_dir,
        precise_ack: bool = _D.precise_ack,
        route_refresh_interval: float = _D.route_refresh_interval,
        heartbeat_interval: float = _D.heartbeat_interval,
        request_timeout: float = _D.request_timeout,
        access_key: str | None = _D.access_key,
        secret_key: str | None = _D.secret_key,
        tls: TlsClientSettings | bool | None = _D.tls,
    ) -> None:
        self._impl = AsyncLitePullConsumer(
            group, namesrv, auto_commit=auto_commit, auto_commit_interval=auto_commit_interval,
            message_model=message_model, consume_from_where=consume_from_where,
            consume_timestamp=consume_timestamp, consume_threads=consume_threads,
            consume_message_batch_max_size=consume_message_batch_max_size,
            pull_batch_size=pull_batch_size, max_reconsume_times=max_reconsume_times,
            pull_threshold_for_queue=pull_threshold_for_queue,
            pull_threshold_size_for_queue=pull_threshold_size_for_queue,
            pull_suspend_timeout=pull_suspend_timeout, pull_interval=pull_interval,
            pull_delay_on_error=pull_delay_on_error, rebalance_interval=rebalance_interval,
            persist_interval=persist_interval, commit_delay=commit_delay,
            local_retry_delay=local_retry_delay, consume_timeout=consume_timeout,
            suspend_current_queue_time=suspend_current_queue_time, lock_interval=lock_interval,
            lock_max_live=lock_max_live, lock_retry_delay=lock_retry_delay,
            shutdown_timeout=shutdown_timeout, release_wait=release_wait,
            allocate_strategy=allocate_strategy, offset_store_dir=offset_store_dir,
            precise_ack=precise_ack, route_refresh_interval=route_refresh_interval,
            heartbeat_interval=heartbeat_interval, request_timeout=request_timeout,
            access_key=access_key, secret_key=secret_key, tls=tls,
        )
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

    def __init__(
        self,
        group: str,
        namesrv: str = "127.0.0.1:9876",
        *,
        await_duration: float = 20.0,
        orderly: bool = False,
        consume_from_where: ConsumeFromWhere = ConsumeFromWhere.FIRST_OFFSET,
        request_timeout: float = 3.0,
        heartbeat_interval: float = 30.0,
        route_refresh_interval: float = 30.0,
        access_key: str | None = None,
        secret_key: str | None = None,
        tls: TlsClientSettings | bool | None = None,
    ) -> None:
        self._impl = AsyncSimpleConsumer(
            group, namesrv,
            await_duration=await_duration, orderly=orderly,
            consume_from_where=consume_from_where, request_timeout=request_timeout,
            heartbeat_interval=heartbeat_interval,
            route_refresh_interval=route_refresh_interval, access_key=access_key,
            secret_key=secret_key, tls=tls,
        )
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
