"""TransactionProducer (blocking and asyncio) against a real `ferrymq standalone` whose
transaction check runs every 200 ms on half messages older than 500 ms: commit, rollback, a
transaction decided by the broker's check, a producer SIGKILLed with its transaction open, and
a broker restarted with one. Every topic has one queue, so a plain message sent last is a fence:
once a consumer has it, everything committed before it has been delivered."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from scenario_util import FAST_CONSUMER, FAST_PRODUCER, Recorder

from conftest import Standalone, start_standalone
from ferrymq import (
    AdminClient,
    ConsumeFromWhere,
    ConsumeStatus,
    LocalTransactionState,
    Message,
    MessageExt,
    Producer,
    PushConsumer,
    TransactionProducer,
    aio,
)
from waits import wait_until

COMMIT, ROLLBACK, UNKNOW = (LocalTransactionState.COMMIT_MESSAGE, LocalTransactionState.ROLLBACK_MESSAGE,
                            LocalTransactionState.UNKNOW)
BROKER_CONFIG = """
transaction_check_interval_ms = 200
transaction_timeout_ms = 500
transaction_check_max = 1000
"""


def _start(store: Path) -> Standalone:
    config = store.parent / "broker.toml"
    config.write_text(BROKER_CONFIG)
    return start_standalone(store, "--config", str(config))


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Standalone]:
    s = _start(tmp_path / "store")
    try:
        yield s
    finally:
        s.stop()


class Listener:
    """Decides as the send's `arg` says ("raise": fails); answers every check with
    `check_answer`."""

    def __init__(self, check_answer: LocalTransactionState = UNKNOW) -> None:
        self.check_answer = check_answer
        self.executed: list[bytes] = []
        self.checked: list[MessageExt] = []
        self.lock = threading.Lock()

    def execute_local_transaction(self, msg: Message, arg: Any) -> LocalTransactionState:
        with self.lock:
            self.executed.append(msg.body)
        if arg == "raise":
            raise RuntimeError("the local transaction failed")
        assert isinstance(arg, LocalTransactionState)
        return arg

    def check_local_transaction(self, msg: MessageExt) -> LocalTransactionState:
        with self.lock:
            self.checked.append(msg)
        return self.check_answer


def _consumer(namesrv: str, topic: str, group: str) -> tuple[PushConsumer, Recorder]:
    rec = Recorder()
    consumer = PushConsumer(group, namesrv, consume_from_where=ConsumeFromWhere.FIRST_OFFSET, **FAST_CONSUMER)
    consumer.subscribe(topic)

    def listen(msgs: list[MessageExt], ctx: Any) -> ConsumeStatus:
        rec.add(msgs)
        return ConsumeStatus.CONSUME_SUCCESS

    consumer.register_listener(listen)
    consumer.start()
    return consumer, rec


def _fence(namesrv: str, topic: str) -> None:
    with Producer("fence-producer", namesrv, **FAST_PRODUCER) as p:
        p.send(Message(topic, b"fence"))


def test_commit_is_consumed_once_and_rollback_never(server: Standalone) -> None:
    AdminClient(server.namesrv).create_topic("tx-a", 1)
    listener = Listener()
    consumer, rec = _consumer(server.namesrv, "tx-a", "tx-a-consumers")
    try:
        with TransactionProducer("tx-a-producer", server.namesrv, listener=listener, **FAST_PRODUCER) as p:
            ok = p.send_message_in_transaction(Message("tx-a", b"paid", tags="order"), COMMIT)
            no = p.send_message_in_transaction(Message("tx-a", b"cancelled"), ROLLBACK)
            failed = p.send_message_in_transaction(Message("tx-a", b"failed"), "raise")
            assert ok.local_transaction_state is COMMIT and no.local_transaction_state is ROLLBACK
            assert failed.local_transaction_state is UNKNOW
            assert ok.transaction_id == ok.msg_id and ok.queue_offset != no.queue_offset
            assert listener.executed == [b"paid", b"cancelled", b"failed"]
            # The failed one stays open: the broker asks, the listener says roll back.
            listener.check_answer = ROLLBACK
            wait_until(lambda: listener.checked, 15, "the check of the failed transaction")
            assert {m.body for m in listener.checked} == {b"failed"}
            _fence(server.namesrv, "tx-a")
            wait_until(lambda: b"fence" in rec.bodies(), 15, "the fence")
        assert rec.bodies() == [b"paid", b"fence"]
        (paid,) = [m for m in rec.snapshot() if m.body == b"paid"]
        assert paid.msg_id == ok.msg_id and paid.tags == "order" and "TRAN_MSG" not in paid.properties
    finally:
        consumer.shutdown()


def test_an_undecided_transaction_is_committed_by_the_check(server: Standalone) -> None:
    AdminClient(server.namesrv).create_topic("tx-b", 1)
    listener = Listener(check_answer=COMMIT)
    consumer, rec = _consumer(server.namesrv, "tx-b", "tx-b-consumers")
    try:
        with TransactionProducer("tx-b-producer", server.namesrv, listener=listener, **FAST_PRODUCER) as p:
            sent = p.send_message_in_transaction(Message("tx-b", b"later", keys="k1"), UNKNOW)
            assert sent.local_transaction_state is UNKNOW
            wait_until(lambda: b"later" in rec.bodies(), 15, "the message committed by the check")
            checked = listener.checked[0]
            assert checked.topic == "tx-b" and checked.msg_id == sent.msg_id and checked.keys == "k1"
            _fence(server.namesrv, "tx-b")
            wait_until(lambda: b"fence" in rec.bodies(), 15, "the fence")
        # A check may be asked again before the first answer lands; it is committed once.
        assert rec.bodies() == [b"later", b"fence"]
        assert {m.msg_id for m in listener.checked} == {sent.msg_id}
    finally:
        consumer.shutdown()


def test_a_new_producer_of_the_group_answers_for_one_killed_with_its_transaction_open(
        server: Standalone) -> None:
    AdminClient(server.namesrv).create_topic("tx-c", 1)
    child = subprocess.Popen(
        [sys.executable, str(Path(__file__).parent / "tx_producer_child.py"), server.namesrv, "tx-c",
         "tx-c-producer", "orphan"], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None
        sent = child.stdout.readline().split()
        assert sent[:1] == ["SENT"], sent
        # Asked at least once while alive, it could not say.
        assert child.stdout.readline().split() == ["CHECKED", sent[1]]
    finally:
        child.kill()
        child.wait()
    listener = Listener(check_answer=COMMIT)
    consumer, rec = _consumer(server.namesrv, "tx-c", "tx-c-consumers")
    try:
        with TransactionProducer("tx-c-producer", server.namesrv, listener=listener, **FAST_PRODUCER):
            wait_until(lambda: b"orphan" in rec.bodies(), 15, "the orphan committed by the new producer")
            assert {m.msg_id for m in listener.checked} == {sent[1]}
            _fence(server.namesrv, "tx-c")
            wait_until(lambda: b"fence" in rec.bodies(), 15, "the fence")
        assert rec.bodies() == [b"orphan", b"fence"]
    finally:
        consumer.shutdown()


def test_a_restarted_broker_checks_the_transactions_left_open(tmp_path: Path) -> None:
    server = _start(tmp_path / "store")
    try:
        AdminClient(server.namesrv).create_topic("tx-d", 1)
        with TransactionProducer("tx-d-producer", server.namesrv, listener=Listener(), **FAST_PRODUCER) as p:
            open_one = p.send_message_in_transaction(Message("tx-d", b"open"), UNKNOW)
            p.send_message_in_transaction(Message("tx-d", b"done"), COMMIT)
    finally:
        server.stop()
    server = _start(tmp_path / "store")
    listener = Listener(check_answer=COMMIT)
    consumer, rec = _consumer(server.namesrv, "tx-d", "tx-d-consumers")
    try:
        with TransactionProducer("tx-d-producer", server.namesrv, listener=listener, **FAST_PRODUCER):
            wait_until(lambda: b"open" in rec.bodies(), 15, "the open transaction committed after the restart")
            assert {m.msg_id for m in listener.checked} == {open_one.msg_id}
            _fence(server.namesrv, "tx-d")
            wait_until(lambda: b"fence" in rec.bodies(), 15, "the fence")
        assert rec.bodies() == [b"done", b"open", b"fence"]
    finally:
        consumer.shutdown()
        server.stop()


async def test_the_asyncio_producer_takes_coroutine_listeners(server: Standalone) -> None:
    AdminClient(server.namesrv).create_topic("tx-e", 1)
    checked: list[str] = []

    class AsyncListener:
        async def execute_local_transaction(self, msg: Message, arg: Any) -> LocalTransactionState:
            await asyncio.sleep(0)
            return COMMIT if msg.body == b"now" else UNKNOW

        async def check_local_transaction(self, msg: MessageExt) -> LocalTransactionState:
            checked.append(msg.msg_id)
            return COMMIT

    async with aio.TransactionProducer("tx-e-producer", server.namesrv, listener=AsyncListener(),
                                       **FAST_PRODUCER) as p:
        now = await p.send_message_in_transaction(Message("tx-e", b"now"))
        later = await p.send_message_in_transaction(Message("tx-e", b"later"))
        assert (now.local_transaction_state, later.local_transaction_state) == (COMMIT, UNKNOW)
        reader = aio.LitePullConsumer("tx-e-reader", server.namesrv, consume_from_where=ConsumeFromWhere.FIRST_OFFSET,
                                      **FAST_CONSUMER)
        reader.subscribe("tx-e")
        async with reader:
            bodies: list[bytes] = []
            for _ in range(150):
                bodies += [m.body for m in await reader.poll(timeout=0.1)]
                if len(bodies) >= 2:
                    break
        assert bodies == [b"now", b"later"] and set(checked) == {later.msg_id}
