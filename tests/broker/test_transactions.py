"""Transactional messages on the broker, request by request: half messages, END_TRANSACTION,
the check of open transactions and its limits, a restart in the middle, and a failover. An in-process
broker over real sockets and files, with an injected clock and the check pass run by the test,
so "older than the transaction timeout" is exact and nothing waits on wall time."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from test_failover import Setup, _true
from wire_util import Wire

from ferrymq.broker.config import BrokerConfig
from ferrymq.broker.controller import Broker
from ferrymq.broker.roles import MASTER, SLAVE
from ferrymq.common import jsonx
from ferrymq.common.codes import RequestCode, ResponseCode
from ferrymq.common.ids import decode_offset_msg_id
from ferrymq.common.message import Message, MessageExt
from ferrymq.common.props import properties_to_string
from ferrymq.common.record import decode_records, encode_batch
from ferrymq.namesrv.server import NameServer, NamesrvConfig
from ferrymq.remoting import ClientConfig, Connection, RemotingClient, RemotingCommand
from waits import eventually

GROUP = "tx-group"
TOPIC = "tx-orders"
HALF = "RMQ_SYS_TRANS_HALF_TOPIC"
CHECK_MAX = "TRANS_CHECK_MAX_TIME_TOPIC"
COMMIT, ROLLBACK, UNKNOWN = 0x8, 0xC, 0x0
TIMEOUT_MS = 6_000


class Clock:
    def __init__(self) -> None:
        self.ms = int(time.time() * 1000)

    def __call__(self) -> int:
        return self.ms

    def advance(self, ms: int) -> None:
        self.ms += ms


class TxProducer:
    """A producer as a Java TransactionMQProducer is on the wire: heartbeats its group and
    takes CHECK_TRANSACTION_STATE on its connection."""

    def __init__(self, broker: str) -> None:
        self.broker = broker
        self.client = RemotingClient(ClientConfig(connect_timeout=3.0))
        self.checks: asyncio.Queue[tuple[dict[str, str], MessageExt]] = asyncio.Queue()
        self.client.register(RequestCode.CHECK_TRANSACTION_STATE, self._on_check)

    async def _on_check(self, conn: Connection, req: RemotingCommand) -> RemotingCommand | None:
        assert req.is_oneway
        (msg,) = decode_records(req.body or b"")
        await self.checks.put((dict(req.ext_fields), msg))
        return None

    async def heartbeat(self) -> None:
        body = jsonx.dumps_bytes({"clientID": "tx-client@1", "producerDataSet": [{"groupName": GROUP}],
                                  "consumerDataSet": []})
        resp = await self.client.invoke(self.broker, RemotingCommand.request(RequestCode.HEART_BEAT, body=body), 5)
        assert resp.code == ResponseCode.SUCCESS, resp.remark

    async def send_half(self, body: bytes, *, uniq: str, extra: dict[str, str] | None = None,
                        sys_flag: int = 0x4, expect: int = ResponseCode.SUCCESS) -> RemotingCommand:
        props = {"TRAN_MSG": "true", "PGROUP": GROUP, "UNIQ_KEY": uniq, "TAGS": "t", **(extra or {})}
        ext = dict(producerGroup=GROUP, topic=TOPIC, defaultTopic="TBW102", defaultTopicQueueNums=4,
                   queueId=1, sysFlag=sys_flag, bornTimestamp=broker_clock_now(), flag=0,
                   properties=properties_to_string(props), reconsumeTimes=0, unitMode="false", batch="false")
        req = RemotingCommand.request(RequestCode.SEND_MESSAGE, ext_fields={k: str(v) for k, v in ext.items()},
                                      body=body)
        resp = await self.client.invoke(self.broker, req, 5)
        assert resp.code == expect, resp.remark
        return resp

    async def end(self, table_offset: int | str, commit_log_offset: int | str, state: int, *,
                  from_check: bool = False, group: str = GROUP) -> RemotingCommand | None:
        ext = dict(producerGroup=group, tranStateTableOffset=table_offset, commitLogOffset=commit_log_offset,
                   commitOrRollback=state, fromTransactionCheck=str(from_check).lower(), msgId="m", topic=TOPIC)
        req = RemotingCommand.request(RequestCode.END_TRANSACTION, ext_fields={k: str(v) for k, v in ext.items()})
        if state == UNKNOWN:  # the broker does not answer "not known yet"; clients send it one-way
            await self.client.invoke_oneway(self.broker, req)
            return None
        return await self.client.invoke(self.broker, req, 5)

    async def end_sent(self, sent: RemotingCommand, state: int) -> RemotingCommand:
        offset = decode_offset_msg_id(sent.ext_fields["msgId"]).offset
        resp = await self.end(sent.ext_fields["queueOffset"], offset, state)
        assert resp is not None
        return resp

    async def next_check(self) -> tuple[dict[str, str], MessageExt]:
        return await asyncio.wait_for(self.checks.get(), 5)


_NOW: list[Clock] = []


def broker_clock_now() -> int:
    return _NOW[0].ms


class Env:
    def __init__(self, tmp_path: Path, clock: Clock) -> None:
        self.tmp_path = tmp_path
        self.clock = clock
        self.namesrv = NameServer(NamesrvConfig(port=0))
        self.broker: Broker | None = None
        self.wire: Wire | None = None
        self.producer: TxProducer | None = None

    async def start_broker(self, **config: Any) -> Broker:
        cfg = BrokerConfig(store_dir=self.tmp_path / "store", listen_port=0, namesrv_addr=self.namesrv.address,
                           transaction_check_interval_ms=3_600_000, transaction_timeout_ms=TIMEOUT_MS,
                           **config)
        self.broker = Broker(cfg, clock=self.clock)
        await self.broker.start()
        self.wire = Wire(self.namesrv.address, self.broker.addr)
        self.producer = TxProducer(self.broker.addr)
        await self.producer.heartbeat()
        return self.broker

    async def stop_broker(self) -> None:
        if self.producer is not None:
            await self.producer.client.close()
        if self.wire is not None:
            await self.wire.close()
        if self.broker is not None:
            await self.broker.stop()
        self.broker = self.wire = self.producer = None

    async def delivered(self) -> list[bytes]:
        assert self.wire is not None
        out: list[bytes] = []
        for qid in range(4):
            out += [m.body for m in await self.wire.pull_all(TOPIC, qid)]
        return out

    async def check(self, *, after_ms: int = TIMEOUT_MS + 1) -> int:
        self.clock.advance(after_ms)
        assert self.broker is not None
        return await self.broker.transactions.check_once()


@pytest.fixture
async def env(tmp_path: Path) -> AsyncIterator[Env]:
    clock = Clock()
    _NOW[:] = [clock]
    e = Env(tmp_path, clock)
    await e.namesrv.start()
    await e.start_broker(transaction_check_max=2)
    assert e.wire is not None
    await e.wire.create_topic(TOPIC, queues=4)
    yield e
    await e.stop_broker()
    await e.namesrv.stop()


async def test_commit_delivers_the_message_once_even_when_repeated(env: Env) -> None:
    p = env.producer
    assert p is not None
    sent = await p.send_half(b"order-1", uniq="U1")
    assert sent.ext_fields["queueId"] == "1"
    assert await env.delivered() == []
    resp = await p.end_sent(sent, COMMIT)
    assert resp.code == ResponseCode.SUCCESS, resp.remark
    assert env.wire is not None
    (msg,) = await env.wire.pull_all(TOPIC, 1)
    assert msg.body == b"order-1" and msg.sys_flag & 0xC == COMMIT
    assert msg.properties["UNIQ_KEY"] == "U1" and msg.tags == "t"
    assert not {"TRAN_MSG", "REAL_TOPIC", "REAL_QID"} & set(msg.properties)
    assert msg.prepared_transaction_offset == decode_offset_msg_id(sent.ext_fields["msgId"]).offset
    for state in (COMMIT, COMMIT, ROLLBACK):
        again = await p.end_sent(sent, state)
        assert again.code == ResponseCode.SUCCESS and again.remark == "the transaction has already ended"
    assert await env.check() == 0
    assert await env.delivered() == [b"order-1"] and p.checks.empty()


async def test_a_batch_half_message_commits_as_its_members(env: Env) -> None:
    # TRAN_BATCH (the Spark sink's halves): one transaction, its body a message batch whose
    # members reach the topic on commit, each a message of its own, all or none.
    p = env.producer
    assert p is not None
    members = [Message(TOPIC, f"row-{i}".encode(), keys=f"k{i}") for i in range(3)]
    for i, m in enumerate(members):
        m.properties["UNIQ_KEY"] = f"R{i}"
    batch = {"TRAN_BATCH": "true"}
    sent = await p.send_half(encode_batch(members), uniq="B1", extra=batch)
    assert await env.delivered() == []
    assert (await p.end_sent(sent, COMMIT)).code == ResponseCode.SUCCESS
    assert env.wire is not None
    got = await env.wire.pull_all(TOPIC, 1)
    assert [m.body for m in got] == [b"row-0", b"row-1", b"row-2"]
    assert [m.properties["UNIQ_KEY"] for m in got] == ["R0", "R1", "R2"]
    assert [m.keys for m in got] == ["k0", "k1", "k2"]
    half_offset = decode_offset_msg_id(sent.ext_fields["msgId"]).offset
    assert all(m.sys_flag & 0xC == COMMIT and m.prepared_transaction_offset == half_offset for m in got)
    again = await p.end_sent(sent, COMMIT)
    assert again.remark == "the transaction has already ended"
    assert len(await env.delivered()) == 3

    rolled = await p.send_half(encode_batch(members), uniq="B2", extra=batch)
    assert (await p.end_sent(rolled, ROLLBACK)).code == ResponseCode.SUCCESS
    assert len(await env.delivered()) == 3
    # Refused when sent, so no commit can meet a body it cannot store.
    bad = await p.send_half(b"not a batch", uniq="B3", extra=batch, expect=ResponseCode.MESSAGE_ILLEGAL)
    assert "not a message batch" in (bad.remark or "")
    packed = await p.send_half(encode_batch(members), uniq="B4", extra=batch, sys_flag=0x4 | 0x1,
                               expect=ResponseCode.MESSAGE_ILLEGAL)
    assert "compressed" in (packed.remark or "")


async def test_rollback_is_never_delivered_nor_checked(env: Env) -> None:
    p = env.producer
    assert p is not None
    sent = await p.send_half(b"cancelled", uniq="U2")
    assert (await p.end_sent(sent, ROLLBACK)).code == ResponseCode.SUCCESS
    assert await env.check() == 0 and await env.check() == 0
    assert await env.delivered() == [] and p.checks.empty()


async def test_end_transaction_must_name_the_half_message_of_its_group(env: Env) -> None:
    p = env.producer
    assert p is not None
    sent = await p.send_half(b"x", uniq="U3")
    offset = decode_offset_msg_id(sent.ext_fields["msgId"]).offset
    wrong_group = await p.end(sent.ext_fields["queueOffset"], offset, COMMIT, group="other")
    assert (wrong_group.code, wrong_group.remark) == (ResponseCode.SYSTEM_ERROR, "The producer group wrong")
    wrong_offset = await p.end(7, offset, COMMIT)
    assert wrong_offset.remark == "The transaction state table offset wrong"
    nowhere = await p.end(0, offset + 1, COMMIT)
    assert nowhere.remark == "Find prepared transaction message failed"
    assert await env.delivered() == []


async def test_an_open_transaction_is_checked_and_the_answer_commits_it(env: Env) -> None:
    p = env.producer
    assert p is not None
    sent = await p.send_half(b"pending", uniq="U4")
    offset = decode_offset_msg_id(sent.ext_fields["msgId"]).offset
    assert await p.end(sent.ext_fields["queueOffset"], offset, UNKNOWN) is None  # "not known yet"
    assert await env.check(after_ms=TIMEOUT_MS - 1) == 0, "checked before the transaction timeout"
    assert await env.check(after_ms=2) == 1
    header, msg = await p.next_check()
    assert msg.topic == TOPIC and msg.queue_id == 1 and msg.body == b"pending"
    assert msg.properties["PGROUP"] == GROUP and msg.properties["TRANSACTION_CHECK_TIMES"] == "1"
    assert header["transactionId"] == header["msgId"] == "U4"
    assert header["topic"] == HALF and int(header["tranStateTableOffset"]) == 1  # the check copy
    assert decode_offset_msg_id(header["offsetMsgId"]).offset == int(header["commitLogOffset"])
    resp = await p.end(header["tranStateTableOffset"], header["commitLogOffset"], COMMIT, from_check=True)
    assert resp.code == ResponseCode.SUCCESS, resp.remark
    # The producer's own END arriving late, naming the first copy, ends nothing twice.
    assert (await p.end_sent(sent, COMMIT)).remark == "the transaction has already ended"
    assert await env.check() == 0
    assert await env.delivered() == [b"pending"]


async def test_a_transaction_checked_too_often_is_discarded_and_never_delivered(env: Env) -> None:
    p = env.producer
    assert p is not None
    await p.send_half(b"abandoned", uniq="U5")
    last: dict[str, str] = {}
    for n in (1, 2):  # transaction_check_max = 2
        assert await env.check() == 1
        last, msg = await p.next_check()
        assert msg.properties["TRANSACTION_CHECK_TIMES"] == str(n)
    assert await env.check() == 0
    assert env.wire is not None
    (discarded,) = await env.wire.pull_all(CHECK_MAX, 0)
    assert discarded.body == b"abandoned" and discarded.properties["REAL_TOPIC"] == TOPIC
    late = await p.end(last["tranStateTableOffset"], last["commitLogOffset"], COMMIT, from_check=True)
    assert late.remark == "the transaction has already ended"
    assert await env.check() == 0 and p.checks.empty()
    assert await env.delivered() == []


async def test_a_restarted_broker_checks_the_transactions_still_open(env: Env) -> None:
    p = env.producer
    assert p is not None
    committed = await p.send_half(b"committed", uniq="C")
    await p.send_half(b"open", uniq="O")
    assert (await p.end_sent(committed, COMMIT)).code == ResponseCode.SUCCESS
    assert await env.check() == 1  # one check copy of "open" before the restart
    await p.next_check()
    await env.stop_broker()
    await env.start_broker(transaction_check_max=2)
    p = env.producer
    assert p is not None
    assert await env.check() == 1
    header, msg = await p.next_check()
    assert msg.body == b"open" and msg.properties["TRANSACTION_CHECK_TIMES"] == "2"  # the count survived
    assert (await p.end_sent(committed, COMMIT)).remark == "the transaction has already ended"
    resp = await p.end(header["tranStateTableOffset"], header["commitLogOffset"], COMMIT, from_check=True)
    assert resp.code == ResponseCode.SUCCESS
    await env.stop_broker()
    await env.start_broker(transaction_check_max=2)
    assert await env.check() == 0
    assert sorted(await env.delivered()) == [b"committed", b"open"]


@pytest.fixture
async def replicas(tmp_path: Path) -> AsyncIterator[Setup]:
    s = Setup(tmp_path)
    await s.namesrv.start()
    yield s
    for w in s.wires:
        await w.close()
    for b in s.brokers.values():
        await b.stop()
    await s.namesrv.stop()


async def test_only_the_master_ends_transactions_and_a_new_master_checks_the_open_ones(replicas: Setup) -> None:
    _NOW[:] = [Clock()]
    b1 = await replicas.broker(1, transaction_timeout_ms=0)
    await eventually(lambda: _true(b1.replication.role == MASTER), what="b1 to be master")
    b2 = await replicas.broker(2, transaction_timeout_ms=0)
    await eventually(lambda: _true(b2.replication.role == SLAVE), what="b2 to be slave")
    await eventually(lambda: _true(b1.replication.agent is not None
                                   and b1.replication.agent.sync_state_set == {1, 2}),
                     what="b2 in the controller's in-sync set")
    await replicas.wire(b1).create_topic(TOPIC, 4)
    on_b1, on_b2 = TxProducer(b1.addr), TxProducer(b2.addr)
    try:
        sent = await on_b1.send_half(b"failover", uniq="F1")  # SYNC_MASTER: on b2 once answered
        offset = decode_offset_msg_id(sent.ext_fields["msgId"]).offset
        refused = await on_b2.end(sent.ext_fields["queueOffset"], offset, COMMIT)
        assert refused is not None and refused.code == ResponseCode.SLAVE_NOT_AVAILABLE
        assert await b2.transactions.check_once() == 0
        await b1.stop()
        await eventually(lambda: _true(b2.replication.role == MASTER), what="b2 elected")
        await on_b2.heartbeat()
        await eventually(lambda: b2.transactions.check_once(), what="b2 to ask about the open transaction")
        header, msg = await on_b2.next_check()
        assert msg.body == b"failover" and header["brokerName"] == b2.config.broker_name
        resp = await on_b2.end(header["tranStateTableOffset"], header["commitLogOffset"], COMMIT, from_check=True)
        assert resp is not None and resp.code == ResponseCode.SUCCESS, resp.remark
        w2 = replicas.wire(b2)
        bodies = [m.body for qid in range(4) for m in await w2.pull_all(TOPIC, qid)]
        assert bodies == [b"failover"]
    finally:
        await on_b1.client.close()
        await on_b2.client.close()
