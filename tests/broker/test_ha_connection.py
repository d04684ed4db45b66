"""The master's end of a slave's connection on real loopback sockets: the HELLO admits it and
its reports are handed on as they are read; silence before the HELLO, a bad first frame and a
closed peer end it with the reason; drain waits while the peer does not read."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import pytest

from ferrymq.ha.connection import SlaveConnection
from ferrymq.ha.protocol import HaProtocolError, Hello, encode_hello, encode_report
from ferrymq.remoting.tls import TlsServerSettings
from ferrymq.remoting.tls_streams import start_protocol_server
from waits import eventually

HELLO = encode_hello(Hello("b", 1, "127.0.0.1:2", 0, []))


@dataclass
class Master:
    """What a master does with connections, recorded."""

    admitted: list[SlaveConnection] = field(default_factory=list)
    reports: list[int] = field(default_factory=list)
    ended: list[BaseException | None] = field(default_factory=list)
    addr: tuple[str, int] = ("", 0)

    def admit(self, hello: Hello, conn: SlaveConnection) -> object:
        assert hello.broker_id == 1
        self.admitted.append(conn)
        return self.reports.append

    def end(self, conn: SlaveConnection, why: BaseException | None) -> None:
        self.ended.append(why)


@pytest.fixture
async def master() -> AsyncIterator[Master]:
    m = Master()
    server = await start_protocol_server(lambda: SlaveConnection(m.admit, m.end, 0.3),  # type: ignore[arg-type]
                                         "127.0.0.1", 0, TlsServerSettings())
    m.addr = server.sockets[0].getsockname()[:2]
    yield m
    server.close()


async def test_hello_admits_and_reports_are_handed_on_in_order(master: Master) -> None:
    _, writer = await asyncio.open_connection(*master.addr)
    writer.write(HELLO)
    await eventually(lambda: master.admitted, what="the HELLO")
    writer.write(encode_report(5) + encode_report(9))
    writer.write(encode_report(12)[:6])  # a report cut by the read's end waits for its rest
    await eventually(lambda: master.reports == [5, 9], what="two reports")
    writer.write(encode_report(12)[6:])
    await eventually(lambda: master.reports == [5, 9, 12], what="the third report")
    writer.close()
    await eventually(lambda: master.ended == [None], what="a plain close, no error")


async def test_silence_before_the_hello_ends_the_connection(master: Master) -> None:
    reader, writer = await asyncio.open_connection(*master.addr)
    assert await asyncio.wait_for(reader.read(), 5) == b""
    assert len(master.ended) == 1 and isinstance(master.ended[0], TimeoutError)
    assert not master.admitted
    writer.close()


async def test_a_first_frame_that_is_not_a_lone_hello_is_refused(master: Master) -> None:
    for first in (encode_report(1), HELLO + encode_report(1)):
        reader, writer = await asyncio.open_connection(*master.addr)
        writer.write(first)
        assert await asyncio.wait_for(reader.read(), 5) == b""
        writer.close()
    assert len(master.ended) == 2
    assert all(isinstance(e, HaProtocolError) and "HELLO, alone" in str(e) for e in master.ended)
    assert not master.admitted


async def test_drain_waits_while_the_peer_does_not_read_and_fails_once_it_is_gone(master: Master) -> None:
    reader, writer = await asyncio.open_connection(*master.addr, limit=1 << 24)
    writer.write(HELLO)
    await eventually(lambda: master.admitted, what="the HELLO")
    conn = master.admitted[0]
    chunk = bytes(1 << 20)
    for _ in range(64):  # far more than the socket buffers take while nobody reads
        conn.write(chunk)
    assert conn.buffered() > 0
    drained = asyncio.ensure_future(conn.drain())
    await asyncio.sleep(0.05)
    assert not drained.done(), "drain returned while the peer read nothing"
    got = 0
    while got < 64 << 20:
        got += len(await asyncio.wait_for(reader.read(1 << 20), 10))
    await asyncio.wait_for(drained, 10)
    writer.close()
    await eventually(lambda: master.ended, what="the close")
    with pytest.raises(ConnectionResetError):
        await conn.drain()
    assert conn.is_closing()
