"""The blocking producer: AsyncProducer on its client instance's event-loop thread. Its
methods are generated from the async core's (see blocking.py); only what differs is here."""

from __future__ import annotations

import concurrent.futures
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

from ..common.message import Message
from ..remoting.tls import TlsClientSettings
from .blocking import Facade, blocking, run_coro, shutdown_blocking, start_blocking
from .errors import ClientClosedError
from .intake import Intake
from .loop import LoopThread
from .outgoing import Outgoing
from .producer_async import AsyncProducer, batchable
from .producer_options import PRODUCER_DEFAULTS as _D
from .results import SendResult
from .sendbatch import Lane

T = TypeVar("T")


class Producer(Facade[AsyncProducer]):
    """Thread-safe: any number of threads may send through one started producer."""

    def __init__(
        self,
        group: str,
        namesrv: str = "127.0.0.1:9876",
        *,
        send_timeout: float = _D.send_timeout,
        retry_times_when_send_failed: int = _D.retry_times_when_send_failed,
        retry_times_when_send_async_failed: int = _D.retry_times_when_send_async_failed,
        compress_over: int = _D.compress_over,
        max_message_size: int = _D.max_message_size,
        default_topic_queue_nums: int = _D.default_topic_queue_nums,
        create_topic_key: str = _D.create_topic_key,
        latency_fault_enabled: bool = _D.latency_fault_enabled,
        fault_isolation: float | None = _D.fault_isolation,
        route_refresh_interval: float = _D.route_refresh_interval,
        heartbeat_interval: float = _D.heartbeat_interval,
        delay_levels: int = _D.delay_levels,
        auto_batch: bool = _D.auto_batch,
        batch_max_delay_ms: float = _D.batch_max_delay_ms,
        batch_max_bytes: int = _D.batch_max_bytes,
        total_batch_max_bytes: int = _D.total_batch_max_bytes,
        access_key: str | None = _D.access_key,
        secret_key: str | None = _D.secret_key,
        tls: TlsClientSettings | bool | None = _D.tls,
    ) -> None:
        self._attach(AsyncProducer(
            group, namesrv,
            send_timeout=send_timeout, retry_times_when_send_failed=retry_times_when_send_failed,
            retry_times_when_send_async_failed=retry_times_when_send_async_failed,
            compress_over=compress_over, max_message_size=max_message_size,
            default_topic_queue_nums=default_topic_queue_nums, create_topic_key=create_topic_key,
            latency_fault_enabled=latency_fault_enabled, fault_isolation=fault_isolation,
            route_refresh_interval=route_refresh_interval, heartbeat_interval=heartbeat_interval,
            delay_levels=delay_levels, auto_batch=auto_batch,
            batch_max_delay_ms=batch_max_delay_ms, batch_max_bytes=batch_max_bytes,
            total_batch_max_bytes=total_batch_max_bytes, access_key=access_key,
            secret_key=secret_key, tls=tls,
        ))

    def _attach(self, impl: AsyncProducer) -> None:
        self._impl = impl
        self._loop: LoopThread | None = None
        self._intake: Intake[Outgoing, SendResult] | None = None
        self._lane: Lane | None = None

    @property
    def group(self) -> str:
        return self._impl.group

    def _run_blocking(self, coro: Coroutine[Any, Any, T], action: str) -> T:
        # The async core enforces send_timeout; the margin only guards against a wedged loop.
        return run_coro(
            self._loop,
            coro,
            self._impl.send_timeout * 3 + 10,
            lambda: self._impl.require_running("send"),
        )

    def start(self) -> Producer:
        self._loop = start_blocking(self._impl, "P")
        self._intake = Intake(self._loop.loop, self._impl.start_prepared)
        self._lane = self._impl.open_lane(self._call_soon)
        return self

    def _call_soon(self, f: Callable[[], None]) -> None:
        assert self._loop is not None
        try:
            self._loop.loop.call_soon_threadsafe(f)
        except RuntimeError:
            # The loop closed after the lane was: the shutdown took what this call handed over.
            pass

    def shutdown(self) -> None:
        try:
            shutdown_blocking(self._impl, self._loop, 30.0)
        finally:
            if self._intake is not None:
                # A send_async that passed the running check as the shutdown began may have
                # reached the intake after the loop's last turn: it fails instead of hanging.
                kind = self._impl.kind
                self._intake.close(lambda: ClientClosedError(kind, "send"))

    def __enter__(self) -> Producer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.shutdown()

    send = blocking(AsyncProducer.send)
    send_to_queue = blocking(AsyncProducer.send_to_queue)
    send_batch = blocking(AsyncProducer.send_batch)
    send_encoded_batch = blocking(AsyncProducer.send_encoded_batch)
    send_orderly = blocking(AsyncProducer.send_orderly)
    send_oneway = blocking(AsyncProducer.send_oneway)
    message_queues = blocking(AsyncProducer.message_queues)

    def send_async(self, msg: Message) -> concurrent.futures.Future[SendResult]:
        """Validation errors raise here; send errors arrive through the future. The future is
        running from the start: a message handed over cannot be cancelled."""
        lane = self._lane
        if lane is not None:
            # The common message, on this thread, straight into its batch.
            future = lane.submit(msg)
            if future is not None:
                return future
        impl = self._impl
        impl.require_running("send")
        out = impl._prepare(msg)
        if lane is not None and batchable(out):
            lane.learn(out.topic, impl._valid_topic(out.topic))
            # out.text is its properties as prepared: encoded once, as a batch entry wants them.
            return lane.submit_entry(out.topic, out.body, out.flag, out.text.encode(), out.uniq_id)
        assert self._intake is not None
        return self._intake.submit(out)
