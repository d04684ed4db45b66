"""The blocking transactional producer: AsyncTransactionProducer on its client instance's
event-loop thread. The local transaction runs in the thread that sends; the broker's checks run
the listener on the producer's own check threads, never on the event loop."""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
from typing import Any

from ..common.message import Message, MessageExt
from ..remoting.tls import TlsClientSettings
from .producer import Producer
from .producer_options import PRODUCER_DEFAULTS as _D
from .results import SendResult
from .transaction_async import (
    AsyncTransactionProducer,
    LocalTransactionState,
    TransactionListener,
    TransactionSendResult,
)

log = logging.getLogger("ferrymq.client.transaction")

__all__ = ["LocalTransactionState", "TransactionListener", "TransactionProducer", "TransactionSendResult"]


class TransactionProducer(Producer):
    """A Producer that also sends in transactions. `listener`'s methods must be plain
    (blocking) functions here; `check_threads` run the broker's checks."""

    def __init__(
        self,
        group: str,
        namesrv: str = "127.0.0.1:9876",
        *,
        listener: TransactionListener,
        check_threads: int = 1,
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
        self._tx = AsyncTransactionProducer(
            group, namesrv, listener=listener,
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
        )
        self._attach(self._tx)
        self._pool = concurrent.futures.ThreadPoolExecutor(
            max(check_threads, 1), thread_name_prefix=f"ferrymq-transaction-check-{group}")
        self._tx.run_checker = self._check_in_pool

    async def _check_in_pool(self, msg: MessageExt) -> LocalTransactionState:
        value = await asyncio.get_running_loop().run_in_executor(
            self._pool, self._tx.listener.check_local_transaction, msg)
        return _sync_state(value)

    def send_message_in_transaction(self, msg: Message, arg: Any = None) -> TransactionSendResult:
        """Send `msg` as a half message, run listener.execute_local_transaction(msg, arg) in
        this thread, then commit or roll back as it answered (UNKNOW: the broker checks)."""
        result = self._run_blocking(self._tx.send_half(msg), "send")
        state, error = LocalTransactionState.ROLLBACK_MESSAGE, None
        if result.status.value == "SEND_OK":
            try:
                state = _sync_state(self._tx.listener.execute_local_transaction(msg, arg))
            except Exception as exc:
                state, error = LocalTransactionState.UNKNOW, exc
                log.exception("local transaction of %s (topic %s) failed", result.msg_id, msg.topic)
        self._run_blocking(self._tx.end_transaction(msg, result, state, error), "send")
        return self._tx.transaction_result(result, state)

    def send_half(self, msg: Message) -> SendResult:
        """The half message alone, left open: for a caller that ends it later, elsewhere
        (the Spark sink's driver ends its tasks' halves with AdminClient.end_transaction)."""
        return self._run_blocking(self._tx.send_half(msg), "send")

    def shutdown(self) -> None:
        try:
            super().shutdown()
        finally:
            self._pool.shutdown(wait=False, cancel_futures=True)

    def __enter__(self) -> TransactionProducer:
        self.start()
        return self


def _sync_state(value: object) -> LocalTransactionState:
    if value is None:
        return LocalTransactionState.UNKNOW
    if not isinstance(value, LocalTransactionState):
        raise TypeError(f"a transaction listener returned {value!r}, not a LocalTransactionState "
                        "(the blocking TransactionProducer needs plain functions)")
    return value
