"""The transactional producer, async core (RocketMQ's TransactionMQProducer): a half message,
the local transaction, then END_TRANSACTION; and the answer to the broker's
CHECK_TRANSACTION_STATE about a transaction it never heard the end of. `TransactionProducer`
(blocking) and `ferrymq.aio.TransactionProducer` are this class."""

from __future__ import annotations

import asyncio
import dataclasses
import enum
import inspect
import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from ..common import props as P
from ..common.codes import RequestCode
from ..common.headers import fields
from ..common.ids import MessageIdError, decode_offset_msg_id
from ..common.message import Message, MessageExt
from ..common.record.layout import SYSFLAG_TRANSACTION_PREPARED
from ..remoting import RemotingError
from ..remoting.tls import TlsClientSettings
from .instance import ClientInstance
from .producer_async import AsyncProducer
from .producer_options import PRODUCER_DEFAULTS as _D
from .results import SendResult, SendStatus

log = logging.getLogger("ferrymq.client.transaction")


class LocalTransactionState(enum.Enum):
    """What the local transaction came to (RocketMQ's names, UNKNOW included)."""

    COMMIT_MESSAGE = "COMMIT_MESSAGE"
    ROLLBACK_MESSAGE = "ROLLBACK_MESSAGE"
    UNKNOW = "UNKNOW"


# MessageSysFlag's transaction types, as END_TRANSACTION's commitOrRollback carries them.
COMMIT_OR_ROLLBACK = {
    LocalTransactionState.COMMIT_MESSAGE: 0x8,
    LocalTransactionState.ROLLBACK_MESSAGE: 0xC,
    LocalTransactionState.UNKNOW: 0x0,
}

StateOrAwaitable = LocalTransactionState | Awaitable[LocalTransactionState] | None


class TransactionListener(Protocol):
    """RocketMQ's TransactionListener. In ferrymq.aio either method may be a coroutine
    function; the blocking producer runs `execute_local_transaction` in the thread that sends
    and `check_local_transaction` in its check threads. Returning None, or raising, is UNKNOW:
    the broker asks again later."""

    def execute_local_transaction(self, msg: Message, arg: Any) -> StateOrAwaitable: ...

    def check_local_transaction(self, msg: MessageExt) -> StateOrAwaitable: ...


@dataclass(frozen=True, slots=True)
class TransactionSendResult(SendResult):
    local_transaction_state: LocalTransactionState
    transaction_id: str

    def to_json(self) -> dict[str, Any]:
        out = SendResult.to_json(self)
        out["local_transaction_state"] = self.local_transaction_state.value
        out["transaction_id"] = self.transaction_id
        return out


Checker = Callable[[MessageExt], Awaitable[LocalTransactionState]]


async def _state(value: StateOrAwaitable) -> LocalTransactionState:
    if inspect.isawaitable(value):
        value = await value
    if value is None:
        return LocalTransactionState.UNKNOW
    if not isinstance(value, LocalTransactionState):
        raise TypeError(f"a transaction listener returned {value!r}, not a LocalTransactionState")
    return value


class AsyncTransactionProducer(AsyncProducer):
    kind = "TransactionProducer"

    def __init__(
        self,
        group: str,
        namesrv: str = "127.0.0.1:9876",
        *,
        listener: TransactionListener,
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
        super().__init__(
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
        )
        self.listener = listener
        # How a check runs the listener; the blocking producer puts it on its check threads.
        self.run_checker: Checker = self._check_on_loop
        self._checks: set[asyncio.Task[None]] = set()
        self._announced: set[str] = set()  # brokers told of this group since it started

    async def attach(self, inst: ClientInstance) -> None:
        await super().attach(inst)
        # The start-up heartbeat went out before any route was known; the brokers found since
        # (those serving the create-topic key's route) hear of this group now, so a producer
        # that replaces a dead one is asked about its open transactions at once.
        await inst.heartbeat_now()

    async def shutdown(self) -> bool:
        for task in list(self._checks):
            task.cancel()
        return await super().shutdown()

    # --- sending in a transaction ------------------------------------------------------------
    async def send_message_in_transaction(self, msg: Message, arg: Any = None) -> TransactionSendResult:
        """Send `msg` as a half message (kept from consumers), run the listener's
        execute_local_transaction(msg, arg), and tell the broker to commit or roll back what
        it returned; UNKNOW leaves the decision to a later check."""
        result = await self.send_half(msg)
        state, error = LocalTransactionState.ROLLBACK_MESSAGE, None
        if result.status is SendStatus.SEND_OK:
            try:
                state = await _state(self.listener.execute_local_transaction(msg, arg))
            except Exception as exc:
                state, error = LocalTransactionState.UNKNOW, exc
                log.exception("local transaction of %s (topic %s) failed", result.msg_id, msg.topic)
        await self.end_transaction(msg, result, state, error)
        return self.transaction_result(result, state)

    async def send_half(self, msg: Message) -> SendResult:
        """The half message alone (send_message_in_transaction's first step). A delay level is
        dropped, as RocketMQ does."""
        self.require_running("send")
        msg.properties.pop(P.PROPERTY_DELAY_TIME_LEVEL, None)
        msg.properties[P.PROPERTY_TRANSACTION_PREPARED] = "true"
        msg.properties[P.PROPERTY_PRODUCER_GROUP] = self.group
        out = self._prepare(msg)
        out = dataclasses.replace(out, sys_flag=out.sys_flag | SYSFLAG_TRANSACTION_PREPARED)
        result = await self._send_with_retries(out, 1 + self.retry_times_when_send_failed, same_broker=False)
        msg.properties[P.PROPERTY_TRANSACTION_ID] = result.msg_id
        if result.broker not in self._announced:
            # The broker asks a producer of the group about open transactions: it must know
            # this one now, not at the next periodic heartbeat (the first one, at start, went
            # to no broker: routes were not known yet).
            self._announced.add(result.broker)
            await self.instance.heartbeat_now()
        return result

    @staticmethod
    def transaction_result(result: SendResult, state: LocalTransactionState) -> TransactionSendResult:
        return TransactionSendResult(
            status=result.status, msg_id=result.msg_id, offset_msg_id=result.offset_msg_id,
            queue_id=result.queue_id, queue_offset=result.queue_offset, broker=result.broker,
            local_transaction_state=state, transaction_id=result.msg_id,
        )

    async def end_transaction(self, msg: Message, result: SendResult, state: LocalTransactionState,
                              error: BaseException | None = None) -> None:
        """END_TRANSACTION, one-way, to the broker that holds the half message. A failure is
        logged, not raised: the broker's check recovers the decision."""
        try:
            commit_log_offset = decode_offset_msg_id(result.offset_msg_id).offset
        except MessageIdError as exc:
            log.warning("cannot end transaction %s: %s", result.msg_id, exc)
            return
        addr = await self.instance.find_broker_addr(result.broker, msg.topic)
        if addr is None:
            log.warning("cannot end transaction %s: broker %s has no address", result.msg_id, result.broker)
            return
        remark = f"executeLocalTransactionBranch exception: {error!r}" if error is not None else None
        await self._end(addr, fields(
            topic=msg.topic, producerGroup=self.group, tranStateTableOffset=result.queue_offset,
            commitLogOffset=commit_log_offset, commitOrRollback=COMMIT_OR_ROLLBACK[state],
            fromTransactionCheck=False, msgId=result.msg_id, transactionId=result.msg_id,
            brokerName=result.broker,
        ), remark)

    async def _end(self, addr: str, header: dict[str, str], remark: str | None) -> None:
        api = self.instance.api
        cmd = api.command(RequestCode.END_TRANSACTION, header)
        cmd.remark = remark
        try:
            await api.remoting.invoke_oneway(addr, cmd)
        except RemotingError as exc:
            log.warning("END_TRANSACTION to %s failed: %s; the broker will check back", addr, exc)

    # --- the broker's check ------------------------------------------------------------------
    def check_transaction_state(self, broker_addr: str, msg: MessageExt, header: Mapping[str, str]) -> None:
        """CHECK_TRANSACTION_STATE from a broker (called by the client instance): ask the
        listener, answer with END_TRANSACTION (fromTransactionCheck=true)."""
        task = asyncio.get_running_loop().create_task(self._answer_check(broker_addr, msg, dict(header)))
        self._checks.add(task)
        task.add_done_callback(self._checks.discard)

    async def _check_on_loop(self, msg: MessageExt) -> LocalTransactionState:
        return await _state(self.listener.check_local_transaction(msg))

    async def _answer_check(self, broker_addr: str, msg: MessageExt, header: dict[str, str]) -> None:
        error: BaseException | None = None
        try:
            state = await self.run_checker(msg)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            state, error = LocalTransactionState.UNKNOW, exc
            log.exception("transaction check of %s failed", msg.msg_id)
        uniq = msg.properties.get(P.PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX) or msg.msg_id
        remark = f"checkLocalTransactionState Exception: {error!r}" if error is not None else None
        await self._end(broker_addr, fields(
            topic=header.get("topic"), producerGroup=self.group,
            tranStateTableOffset=header.get("tranStateTableOffset"),
            commitLogOffset=header.get("commitLogOffset"), commitOrRollback=COMMIT_OR_ROLLBACK[state],
            fromTransactionCheck=True, msgId=uniq, transactionId=header.get("transactionId"),
            brokerName=header.get("brokerName"),
        ), remark)
