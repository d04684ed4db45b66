"""Transactional messages on the broker (RocketMQ's TransactionalMessageServiceImpl and
TransactionalMessageCheckService): half messages kept out of their topic until END_TRANSACTION
commits or rolls them back, and the periodic check that asks a producer of the group about
half messages nobody ended.

Everything lives in the log (records.py): half messages and their check copies in the half
queue, ended transactions as ops in the op queue. How far the check has got is two offsets of
the group CID_RMQ_SYS_TRANS: H on the half queue (every copy below H is dead: its transaction
ended, or a newer copy exists) and O on the op queue (every op below O names only transactions
whose copies are all below H). H is committed before O, so after a crash O never runs ahead of
the H it was computed against. On start the service reads the ops from O and the copies from H
to learn which transactions are still open; open ones are held in memory (one small record per
open transaction), which is what makes a repeated END_TRANSACTION, or one that arrives after a
check copy was written, end the transaction once and only once.

Only a master runs the service; a broker that becomes master rebuilds it from its log."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import enum
import logging
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING

from ...common import props as P
from ...common.codes import RequestCode, ResponseCode
from ...common.headers import fields
from ...common.message import MessageExt
from ...common.names import (
    CID_SYS_RMQ_TRANS,
    TRANS_CHECK_MAX_TIME_TOPIC,
    TRANS_HALF_TOPIC,
    TRANS_OP_HALF_TOPIC,
)
from ...common.record import MessageDecodeError, decode_record, encode_record, pack_host
from ...remoting import RemotingCommand, RemotingError
from ...store import PutResult, PutStatus, StoreMessage
from ..events import MessageEvent, MessageEventKind
from . import records as R

if TYPE_CHECKING:
    from ..core import BrokerCore

log = logging.getLogger("ferrymq.broker.transaction")

SCAN_BATCH = 32


class _Step(enum.Enum):
    NEXT = "next"  # this copy is dealt with: the scan moves past it
    STOP = "stop"  # this copy must be looked at again on a later pass


@dataclasses.dataclass(frozen=True, slots=True)
class EndOutcome:
    code: int
    remark: str | None = None


class _KeyedLock:
    """One asyncio lock per transaction, dropped when nobody holds or waits for it: an
    END_TRANSACTION and the check of the same transaction take turns, others run at once."""

    def __init__(self) -> None:
        self._locks: dict[int, tuple[asyncio.Lock, int]] = {}

    @contextlib.asynccontextmanager
    async def hold(self, key: int) -> AsyncIterator[None]:
        lock, users = self._locks.get(key) or (asyncio.Lock(), 0)
        self._locks[key] = (lock, users + 1)
        try:
            async with lock:
                yield
        finally:
            lock, users = self._locks[key]
            if users <= 1:
                del self._locks[key]
            else:
                self._locks[key] = (lock, users - 1)


class TransactionService:
    def __init__(self, broker: BrokerCore) -> None:
        self.broker = broker
        self.running = False
        self._live: dict[int, R.HalfInfo] = {}  # origin -> newest copy of an open transaction
        self._ended: dict[int, int] = {}  # origin -> newest copy, until H passes it
        self._ops: dict[int, int] = {}  # op queue offset -> newest half offset it names
        self._half_offset = 0  # H
        self._op_offset = 0  # O
        self._locks = _KeyedLock()
        self._task: asyncio.Task[None] | None = None
        self._wake = asyncio.Event()
        self._rr = 0
        self.checks_sent = 0
        self.discarded = 0

    # --- lifecycle ---------------------------------------------------------------------------
    def start(self) -> None:
        if self.running:
            return
        self._rebuild()
        self.running = True
        self._task = asyncio.get_running_loop().create_task(self._run(), name="ferrymq-transaction-check")

    async def stop(self) -> None:
        self.running = False
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._live.clear()
        self._ended.clear()
        self._ops.clear()

    @property
    def open_transactions(self) -> int:
        return len(self._live)

    def poke(self) -> None:
        """Run a check pass now rather than at the end of the interval."""
        self._wake.set()

    async def _run(self) -> None:
        while True:
            interval = self.broker.config.transaction_check_interval_ms / 1000
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), interval)
            self._wake.clear()
            try:
                await self.check_once()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("transaction check pass failed; retried at the next interval")

    def _rebuild(self) -> None:
        store = self.broker.store
        assert store is not None
        self._live.clear()
        self._ended.clear()
        self._ops.clear()
        self._half_offset = self._position(TRANS_HALF_TOPIC, R.HALF_QUEUE_ID)
        self._op_offset = self._position(TRANS_OP_HALF_TOPIC, R.OP_QUEUE_ID)
        ended: dict[int, int] = {}
        for entry, msg in self._read(TRANS_OP_HALF_TOPIC, R.OP_QUEUE_ID, self._op_offset):
            named = R.op_offsets(msg)
            newest = max(named, default=-1)
            self._ops[entry] = newest
            for offset in named:
                ended[offset] = max(ended.get(offset, -1), newest)
        for _, msg in self._read(TRANS_HALF_TOPIC, R.HALF_QUEUE_ID, self._half_offset):
            try:
                info = R.half_info(msg)
            except R.HalfMessageError as exc:
                log.error("%s; passed over", exc)
                continue
            if info.origin in ended:
                self._ended[info.origin] = max(ended[info.origin], info.queue_offset)
            else:
                self._live[info.origin] = info
        self._advance_positions()
        if self._live:
            log.info("transactions: %d open half message(s) from the log", len(self._live))

    def _position(self, topic: str, queue_id: int) -> int:
        store = self.broker.store
        assert store is not None
        offset = self.broker.offsets.query(CID_SYS_RMQ_TRANS, topic, queue_id)
        return max(offset, store.reads.get_min_offset(topic, queue_id))

    def _read(self, topic: str, queue_id: int, offset: int) -> list[tuple[int, MessageExt]]:
        store = self.broker.store
        assert store is not None
        out: list[tuple[int, MessageExt]] = []
        while True:
            entries = store.reads.read_queue_entries(topic, queue_id, offset, SCAN_BATCH)
            if not entries:
                return out
            for entry in entries:
                offset = entry.queue_offset + 1
                msg = self._decode(entry.phys_offset, store.reads.read_queue_record(topic, queue_id, entry))
                if msg is not None:
                    out.append((entry.queue_offset, msg))

    def _decode_at(self, phys_offset: int) -> MessageExt | None:
        store = self.broker.store
        assert store is not None
        return self._decode(phys_offset, store.reads.read_record(phys_offset))

    @staticmethod
    def _decode(phys_offset: int, raw: bytes | None) -> MessageExt | None:
        if raw is None:
            return None
        try:
            return decode_record(raw, decompress=False)
        except MessageDecodeError as exc:
            log.error("transaction record at %d is unreadable: %s; passed over", phys_offset, exc)
            return None

    async def ensure_topics(self) -> None:
        """The system topics exist in the topic table (RocketMQ creates them on first use with
        one queue), so tools list them and a new master serves them."""
        topics = self.broker.topics
        version = topics.version
        for topic in (TRANS_HALF_TOPIC, TRANS_OP_HALF_TOPIC, TRANS_CHECK_MAX_TIME_TOPIC):
            topics.create_group_topic(topic)
        if topics.version != version:
            await self.broker.persist_topics()

    # --- half messages -----------------------------------------------------------------------
    async def prepare(self, msg: StoreMessage) -> PutResult:
        """Store a producer's half message; it stays out of its topic until it is ended."""
        await self.ensure_topics()
        half = R.to_half(msg)
        result = await self.broker.put([half], allow_delay=False)
        if result.status.stored and self.running:
            appended = result.messages[0]
            props = half.properties
            assert isinstance(props, dict)
            self._live[appended.queue_offset] = R.HalfInfo(
                queue_offset=appended.queue_offset, phys_offset=appended.phys_offset,
                origin=appended.queue_offset, check_times=0,
                producer_group=props.get(P.PROPERTY_PRODUCER_GROUP, ""),
                born_timestamp=msg.born_timestamp, store_timestamp=appended.store_timestamp,
                immunity_ms=_immunity_ms(props.get(P.PROPERTY_CHECK_IMMUNITY_TIME_IN_SECONDS)),
            )
        return result

    async def end(self, *, producer_group: str, tran_state_table_offset: int, commit_log_offset: int,
                  commit_or_rollback: int) -> EndOutcome:
        """END_TRANSACTION with a commit or a rollback (EndTransactionProcessor): the message
        named must be a half message of that producer group at that half-queue offset. A
        transaction that has already ended is left as it is."""
        if not self.running:
            return EndOutcome(ResponseCode.SLAVE_NOT_AVAILABLE,
                              "the broker is not its group's master: transactions end on the master")
        msg = self._decode_at(commit_log_offset)
        if msg is None or msg.topic != TRANS_HALF_TOPIC:
            return EndOutcome(ResponseCode.SYSTEM_ERROR, "Find prepared transaction message failed")
        try:
            info = R.half_info(msg)
        except R.HalfMessageError as exc:
            return EndOutcome(ResponseCode.SYSTEM_ERROR, str(exc))
        if info.producer_group != producer_group:
            return EndOutcome(ResponseCode.SYSTEM_ERROR, "The producer group wrong")
        if info.queue_offset != tran_state_table_offset:
            return EndOutcome(ResponseCode.SYSTEM_ERROR, "The transaction state table offset wrong")
        async with self._locks.hold(info.origin):
            live = self._live.get(info.origin)
            if live is None:
                return EndOutcome(ResponseCode.SUCCESS, "the transaction has already ended")
            if commit_or_rollback == R.TRANSACTION_COMMIT_TYPE:
                try:
                    stored = R.committed_messages(msg, commit_log_offset, self.broker.config.broker_cluster_name)
                except R.BatchHalfError as exc:
                    return EndOutcome(ResponseCode.MESSAGE_ILLEGAL, str(exc))
                result = await self.broker.put(stored, allow_delay=len(stored) == 1)
                if not result.status.stored:
                    return EndOutcome(_put_code(result.status), result.reason or result.status.name)
            elif commit_or_rollback == R.TRANSACTION_ROLLBACK_TYPE and self.broker.events.active:
                self.broker.events.emit(MessageEvent(
                    MessageEventKind.ROLLED_BACK, msg.topic, msg.queue_id, msg.queue_offset,
                    group=producer_group, msg_id=msg.msg_id))
            await self._close(live)
        return EndOutcome(ResponseCode.SUCCESS)

    async def _close(self, live: R.HalfInfo) -> None:
        """The transaction ended (caller holds its lock): no check will ask about it again,
        and an op in the log says so after a restart."""
        self._live.pop(live.origin, None)
        self._ended[live.origin] = live.queue_offset
        named = [live.queue_offset] if live.queue_offset == live.origin else [live.queue_offset, live.origin]
        store = self.broker.store
        assert store is not None
        op = R.op_message(named, self.broker.now_ms(), str(store.config.store_host))
        result = await self.broker.put([op], allow_delay=False)
        if result.status.stored:
            self._ops[result.messages[0].queue_offset] = max(named)
        else:
            # Ended in memory all the same; only a restart before the op is written could
            # ask the producer about it again.
            log.error("transaction op for half offset %d not written: %s", live.origin,
                      result.reason or result.status.name)

    # --- the check ---------------------------------------------------------------------------
    async def check_once(self) -> int:
        """One pass over the half queue from H: ask about every open transaction older than
        the transaction timeout, discard those asked about transaction_check_max times.
        Returns how many producers were asked."""
        if not self.running:
            return 0
        store = self.broker.store
        assert store is not None
        await self.ensure_topics()
        start = self.broker.now_ms()
        asked = 0
        offset = max(self._half_offset, store.reads.get_min_offset(TRANS_HALF_TOPIC, R.HALF_QUEUE_ID))
        stopped = False
        while not stopped:
            entries = store.reads.read_queue_entries(TRANS_HALF_TOPIC, R.HALF_QUEUE_ID, offset, SCAN_BATCH)
            if not entries:
                break
            for entry in entries:
                msg = self._decode(entry.phys_offset, store.reads.read_queue_record(
                    TRANS_HALF_TOPIC, R.HALF_QUEUE_ID, entry))
                step = _Step.NEXT
                if msg is not None:
                    step, sent = await self._check_one(msg, start)
                    asked += sent
                if step is _Step.STOP:
                    stopped = True
                    break
                offset = entry.queue_offset + 1
        if not self.running:
            return asked
        self._half_offset = max(self._half_offset, offset)
        self._advance_positions()
        return asked

    async def _check_one(self, msg: MessageExt, start: int) -> tuple[_Step, int]:
        try:
            info = R.half_info(msg)
        except R.HalfMessageError as exc:
            log.error("%s; passed over", exc)
            return _Step.NEXT, 0
        live = self._live.get(info.origin)
        if live is None:
            # Ended, or a half message whose send has not finished registering it.
            return (_Step.NEXT if info.origin in self._ended else _Step.STOP), 0
        if live.queue_offset != info.queue_offset:
            return _Step.NEXT, 0  # an older copy
        if info.store_timestamp >= start:
            return _Step.STOP, 0  # written during this pass: the next pass looks at it
        cfg = self.broker.config
        age = start - info.born_timestamp
        if 0 <= age <= max(cfg.transaction_timeout_ms, info.immunity_ms):
            return _Step.STOP, 0  # too young: its producer may still end it
        async with self._locks.hold(info.origin):
            live = self._live.get(info.origin)
            if live is None or live.queue_offset != info.queue_offset:
                return _Step.NEXT, 0
            if info.check_times >= cfg.transaction_check_max or age > cfg.file_reserved_time * 3600_000:
                return await self._discard(msg, info), 0
            copy = R.check_copy(msg, info)
            result = await self.broker.put([copy], allow_delay=False)
            if not result.status.stored:
                log.warning("check copy of half offset %d not written (%s); retried next pass",
                            info.queue_offset, result.reason or result.status.name)
                return _Step.STOP, 0
            appended = result.messages[0]
            renewed = dataclasses.replace(info, queue_offset=appended.queue_offset,
                                          phys_offset=appended.phys_offset, check_times=info.check_times + 1,
                                          store_timestamp=appended.store_timestamp)
            self._live[info.origin] = renewed
        assert isinstance(copy.properties, dict)
        msg.properties = copy.properties  # the checker sees the copy it is asked about
        sent = await self._ask_producer(msg, renewed, appended.offset_msg_id)
        return _Step.NEXT, int(sent)

    async def _discard(self, msg: MessageExt, info: R.HalfInfo) -> _Step:
        result = await self.broker.put([R.discarded(msg)], allow_delay=False)
        if not result.status.stored:
            log.warning("discarding half offset %d failed (%s); retried next pass", info.queue_offset,
                        result.reason or result.status.name)
            return _Step.STOP
        log.warning("half message %s of %s (group %s) checked %d times: discarded to %s",
                    msg.properties.get(P.PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX, ""),
                    msg.properties.get(P.PROPERTY_REAL_TOPIC, ""), info.producer_group, info.check_times,
                    TRANS_CHECK_MAX_TIME_TOPIC)
        self.discarded += 1
        await self._close(info)
        return _Step.NEXT

    async def _ask_producer(self, msg: MessageExt, info: R.HalfInfo, offset_msg_id: str) -> bool:
        """CHECK_TRANSACTION_STATE, one-way, to one producer of the group (Broker2Client):
        the producer answers with END_TRANSACTION when it knows. Nobody online: the next pass
        asks again, and counts it."""
        conn = self.broker.clients.producer_connection(info.producer_group, self._rr)
        self._rr += 1
        if conn is None:
            log.warning("transaction check of %s: no producer of group %s online",
                        msg.properties.get(P.PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX, ""), info.producer_group)
            return False
        uniq = msg.properties.get(P.PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX)
        req = RemotingCommand.request(RequestCode.CHECK_TRANSACTION_STATE, ext_fields=fields(
            topic=TRANS_HALF_TOPIC, tranStateTableOffset=info.queue_offset, commitLogOffset=info.phys_offset,
            msgId=uniq, transactionId=uniq, offsetMsgId=offset_msg_id,
            brokerName=self.broker.config.broker_name,
        ), body=check_body(msg, info))
        try:
            await conn.invoke_oneway(req)
        except RemotingError as exc:
            log.warning("transaction check to %s failed: %s", getattr(conn, "remote_addr", "?"), exc)
            return False
        self.checks_sent += 1
        return True

    # --- progress ----------------------------------------------------------------------------
    def _advance_positions(self) -> None:
        """Drop what H has passed; move O over the ops whose transactions are all below H;
        commit H, then O."""
        h = self._half_offset
        self._ended = {o: newest for o, newest in self._ended.items() if newest >= h}
        o = self._op_offset
        while o in self._ops and self._ops[o] < h:
            del self._ops[o]
            o += 1
        offsets = self.broker.offsets
        if offsets.query(CID_SYS_RMQ_TRANS, TRANS_HALF_TOPIC, R.HALF_QUEUE_ID) != h:
            offsets.commit(CID_SYS_RMQ_TRANS, TRANS_HALF_TOPIC, R.HALF_QUEUE_ID, h, self.broker.now_ms())
        if o != self._op_offset or offsets.query(CID_SYS_RMQ_TRANS, TRANS_OP_HALF_TOPIC, R.OP_QUEUE_ID) != o:
            self._op_offset = o
            offsets.commit(CID_SYS_RMQ_TRANS, TRANS_OP_HALF_TOPIC, R.OP_QUEUE_ID, o, self.broker.now_ms())


def check_body(msg: MessageExt, info: R.HalfInfo) -> bytes:
    """The half message as its producer's checker sees it: its real topic and queue, the
    offsets of the copy asked about (MessageDecoder.encode of the message)."""
    props = msg.properties
    topic = props.get(P.PROPERTY_REAL_TOPIC, msg.topic)
    try:
        queue_id = int(props.get(P.PROPERTY_REAL_QUEUE_ID, "0"))
    except ValueError:
        queue_id = 0
    return encode_record(
        topic=topic.encode(), queue_id=queue_id, flag=msg.flag, body=msg.body,
        properties=P.properties_to_string(dict(props)).encode(), sys_flag=msg.sys_flag,
        born_timestamp=msg.born_timestamp, born_host=_host(msg.born_host),
        store_timestamp=info.store_timestamp, store_host=_host(msg.store_host),
        reconsume_times=msg.reconsume_times, prepared_transaction_offset=msg.prepared_transaction_offset,
        queue_offset=info.queue_offset, physical_offset=info.phys_offset,
    )


def _host(addr: str) -> bytes:
    host, _, port = addr.rpartition(":")
    try:
        return pack_host(host.strip("[]") or "127.0.0.1", int(port))
    except (ValueError, OSError):
        return pack_host("127.0.0.1", 0)


def _immunity_ms(text: str | None) -> int:
    try:
        return max(int(text or "0"), 0) * 1000
    except ValueError:
        return 0


def _put_code(status: PutStatus) -> int:
    if status in (PutStatus.MESSAGE_ILLEGAL, PutStatus.PROPERTIES_SIZE_EXCEEDED):
        return ResponseCode.MESSAGE_ILLEGAL
    if status in (PutStatus.SERVICE_NOT_AVAILABLE, PutStatus.DISK_FULL):
        return ResponseCode.SERVICE_NOT_AVAILABLE
    return ResponseCode.SYSTEM_ERROR
