"""A send that wakes a held pull: the consumer's answer is written before the producer's.
The producer only learns what it expects (stored, at this offset); the consumer is the one
waiting for the message, so its latency is the one that counts."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from wire_util import Wire

from ferrymq.broker.config import BrokerConfig
from ferrymq.broker.controller import Broker
from ferrymq.common.codes import RequestCode, ResponseCode
from ferrymq.namesrv.server import NameServer, NamesrvConfig
from ferrymq.remoting import RemotingCommand
from ferrymq.remoting.connection import Connection

TOPIC = "held-first"


@pytest.fixture
async def broker(tmp_path: Path) -> AsyncIterator[tuple[NameServer, Broker]]:
    namesrv = NameServer(NamesrvConfig(port=0))
    await namesrv.start()
    b = Broker(BrokerConfig(store_dir=tmp_path / "store", listen_port=0,
                            namesrv_addr=namesrv.address, grpc_listen_port=-1))
    await b.start()
    try:
        yield namesrv, b
    finally:
        await b.stop()
        await namesrv.stop()


async def test_the_woken_pull_is_answered_before_the_send(
        broker: tuple[NameServer, Broker], monkeypatch: pytest.MonkeyPatch) -> None:
    namesrv, b = broker
    consumer, producer = Wire(namesrv.address, b.addr), Wire(namesrv.address, b.addr)
    try:
        await producer.create_topic(TOPIC, 1)
        # One at a time, as a paced producer sends: the store then appends each put in the
        # sender's own step (no loop turn in between), the case where the order is a choice.
        for i in range(12):
            assert (await producer.send(TOPIC, b"before-%d" % i)).code == ResponseCode.SUCCESS
        written: list[int] = []  # request codes of the broker's answers, in the order written
        opaques: dict[int, int] = {}
        real = Connection._send_nowait

        def record(self: Connection, cmd: RemotingCommand) -> None:
            if cmd.is_response and cmd.opaque in opaques:
                written.append(opaques[cmd.opaque])
            real(self, cmd)

        monkeypatch.setattr(Connection, "_send_nowait", record)
        real_request = RemotingCommand.request

        def tagged(code: int, **kw: object) -> RemotingCommand:
            cmd = real_request(code, **kw)  # type: ignore[arg-type]
            if code in (RequestCode.PULL_MESSAGE, RequestCode.SEND_MESSAGE):
                opaques[cmd.opaque] = code
            return cmd

        monkeypatch.setattr(RemotingCommand, "request", staticmethod(tagged))
        held = asyncio.create_task(consumer.pull(TOPIC, 0, 12, suspend_ms=10_000))
        while b.waiters is None or b.waiters.pending() == 0:  # the pull is held
            assert not held.done(), held.result().remark
            await asyncio.sleep(0.005)
        sent = await producer.send(TOPIC, b"wanted", queue_id=0)
        answer = await asyncio.wait_for(held, 10)
        assert sent.code == ResponseCode.SUCCESS and answer.code == ResponseCode.SUCCESS
        assert written == [RequestCode.PULL_MESSAGE, RequestCode.SEND_MESSAGE]
    finally:
        await consumer.close()
        await producer.close()
