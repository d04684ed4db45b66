"""Bad input on raw sockets while another client keeps sending and pulling: each bad request
gets a clear error or only its own connection is closed, and nothing stored is lost."""

from __future__ import annotations

import asyncio
import itertools
import socket
import struct
from collections.abc import AsyncIterator

import pytest
from wire_util import Wire

from conftest import Standalone
from ferrymq.common.codes import RequestCode, ResponseCode
from ferrymq.common.record import decode_records
from ferrymq.remoting import RemotingCommand, decode_frame, encode_frame
from waits import eventually

# The tests here each use their own topics and groups: one server serves the module.
pytestmark = pytest.mark.shared_standalone


@pytest.fixture
async def wire(standalone: Standalone) -> AsyncIterator[Wire]:
    w = Wire(standalone.namesrv, standalone.broker)
    await w.create_topic("steady", 1)
    yield w
    await w.close()


_STEADY_TOPICS = (f"steady-{i}" for i in itertools.count())


class Steady:
    """A well-behaved client sending and pulling the whole time, on a topic of its own."""

    def __init__(self, wire: Wire) -> None:
        self.wire = wire
        self.topic = next(_STEADY_TOPICS)
        self.sent: list[bytes] = []
        self.stop = asyncio.Event()
        self.errors: list[str] = []

    async def run(self) -> None:
        await self.wire.create_topic(self.topic, 1)
        i = 0
        while not self.stop.is_set():
            body = b"steady-%06d" % i
            resp = await self.wire.send(self.topic, body)
            if resp.code == ResponseCode.SUCCESS:
                self.sent.append(body)
            else:
                self.errors.append(f"send: {resp.code} {resp.remark}")
            pulled = await self.wire.pull(self.topic, 0, max(0, len(self.sent) - 1))
            if pulled.code != ResponseCode.SUCCESS:
                self.errors.append(f"pull: {pulled.code} {pulled.remark}")
            i += 1
            await asyncio.sleep(0)


async def _steady_around(wire: Wire, attack) -> Steady:  # type: ignore[no-untyped-def]
    steady = Steady(wire)
    task = asyncio.ensure_future(steady.run())
    try:
        await eventually(lambda: len(steady.sent) >= 3, what="the steady client to be served")
        await attack()
        after = len(steady.sent)
        await eventually(lambda: len(steady.sent) >= after + 3, what="the steady client to be served still")
    finally:
        steady.stop.set()
        await task
    assert steady.errors == [] and len(steady.sent) > 0
    stored = await wire.pull_all(steady.topic, 0)
    assert [m.body for m in stored] == steady.sent  # nothing stored was lost or reordered
    return steady


def _addr(text: str) -> tuple[str, int]:
    host, port = text.rsplit(":", 1)
    return host, int(port)


async def _raw_exchange(addr: str, payload: bytes, *, expect_close: bool) -> bytes:
    reader, writer = await asyncio.open_connection(*_addr(addr))
    writer.write(payload)
    await writer.drain()
    if expect_close:
        data = await asyncio.wait_for(reader.read(), 5.0)
    else:
        (length,) = struct.unpack(">i", await asyncio.wait_for(reader.readexactly(4), 5.0))
        data = await reader.readexactly(length)
    writer.close()
    return data


@pytest.mark.parametrize("payload", [
    pytest.param(b"\xde\xad\xbe\xef" * 64, id="garbage"),
    pytest.param(struct.pack(">i", 100 * 1024 * 1024) + b"\x00" * 1024, id="100MiB-length-prefix"),
    pytest.param(b"GET / HTTP/1.0\r\n\r\n", id="http"),
])
async def test_unframeable_bytes_close_only_their_connection(wire: Wire, payload: bytes) -> None:
    async def attack() -> None:
        for _ in range(5):
            assert await _raw_exchange(wire.broker, payload, expect_close=True) == b""

    await _steady_around(wire, attack)


async def test_truncated_frames_and_vanishing_peers(wire: Wire) -> None:
    frame = encode_frame(RemotingCommand.request(RequestCode.SEND_MESSAGE, body=b"x" * 4096))

    async def attack() -> None:
        for cut in (2, 7, 100, len(frame) - 1):
            with socket.create_connection(_addr(wire.broker)) as s:
                s.sendall(frame[:cut])

    await _steady_around(wire, attack)


async def test_malformed_header_is_answered_with_an_error(wire: Wire) -> None:
    async def attack() -> None:
        bad = b'{"code": "not a number"'
        answer = await _raw_exchange(wire.broker, struct.pack(">ii", 4 + len(bad), len(bad)) + bad,
                                     expect_close=False)
        resp = decode_frame(answer)
        assert resp.code == ResponseCode.SYSTEM_ERROR and "malformed" in (resp.remark or "")

    await _steady_around(wire, attack)


async def test_unknown_codes_and_missing_fields_get_clear_errors(wire: Wire) -> None:
    async def attack() -> None:
        for code in (0, 999, 30000, -5):
            resp = await wire.call(code)
            assert resp.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED
        resp = await wire.call(RequestCode.PULL_MESSAGE, topic="steady")
        assert resp.code == ResponseCode.SYSTEM_ERROR and "consumerGroup" in (resp.remark or "")
        resp = await wire.call(RequestCode.PULL_MESSAGE, consumerGroup="g", topic="steady", queueId="zero",
                               queueOffset=0)
        assert resp.code == ResponseCode.SYSTEM_ERROR and "queueId" in (resp.remark or "")

    await _steady_around(wire, attack)


@pytest.mark.parametrize("topic", ["bad topic", "a/b", "x" * 128, "tópico", ""])
async def test_invalid_topic_names_are_refused(wire: Wire, topic: str) -> None:
    async def attack() -> None:
        resp = await wire.send(topic, b"body")
        assert resp.code != ResponseCode.SUCCESS
        assert resp.remark, "the refusal says why"
        created = await wire.call(RequestCode.UPDATE_AND_CREATE_TOPIC, topic=topic, readQueueNums=1,
                                  writeQueueNums=1, perm=6)
        assert created.code != ResponseCode.SUCCESS and created.remark

    await _steady_around(wire, attack)


async def test_oversized_body_gets_message_illegal(wire: Wire) -> None:
    async def attack() -> None:
        resp = await wire.send("steady", b"\x00" * (4 * 1024 * 1024 + 1))
        assert resp.code == ResponseCode.MESSAGE_ILLEGAL and resp.remark
        just_fits = await wire.send("steady", b"\x01" * (4 * 1024 * 1024 - 4096))
        assert just_fits.code == ResponseCode.SUCCESS, just_fits.remark
        pulled = await wire.pull("steady", 0, int(just_fits.ext_fields["queueOffset"]), max_nums=1)
        assert decode_records(pulled.body or b"")[0].body == b"\x01" * (4 * 1024 * 1024 - 4096)

    steady = Steady(wire)
    task = asyncio.ensure_future(steady.run())
    try:
        await attack()
    finally:
        steady.stop.set()
        await task
    assert steady.errors == []
