"""The blocking transactional producer: AsyncTransactionProducer on its client instance's
event-loop thread. The local transaction runs in the thread that sends; the broker's checks run
the listener on the producer's own check threads, never on the event loop."""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
from typing import Any

from ..common.message import Message, MessageExt
from .producer import Producer
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

    def __init__(self, group: str, namesrv: str = "127.0.0.1:9876", *, listener: TransactionListener,
                 check_threads: int = 1, **options: Any) -> None:
        super().__init__(group, namesrv)
        self._tx = AsyncTransactionProducer(group, namesrv, listener=listener, **options)
        self._impl = self._tx
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
