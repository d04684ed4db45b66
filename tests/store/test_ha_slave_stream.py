"""The slave's end of the replication stream against a scripted master on a real socket: the
spans that come in the same read as the WELCOME are written after the welcome, every span is
reported once it is in the log, and a master gone silent is left for a new connection."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest
from store_util import msg, open_store

from ferrymq.ha.protocol import FrameReader, Hello, Welcome, encode_data_head, encode_welcome
from ferrymq.ha.slave import HaSlave, HaSlaveConfig
from ferrymq.store import MessageStore
from waits import eventually

Script = Callable[[asyncio.StreamReader, asyncio.StreamWriter, Hello], Awaitable[None]]


class ScriptedMaster:
    """Accepts slaves; reads each one's HELLO and runs the script; keeps the REPORTs."""

    def __init__(self, script: Script) -> None:
        self.script = script
        self.connections = 0
        self.reports: list[int] = []
        self.server: asyncio.base_events.Server | None = None

    async def start(self) -> str:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        host, port = self.server.sockets[0].getsockname()[:2]
        return f"{host}:{port}"

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        frames = FrameReader()
        hello: Hello | None = None
        while hello is None:
            data = await reader.read(65536)
            if not data:
                return
            got = frames.feed(data)
            if got:
                assert isinstance(got[0], Hello)
                hello = got[0]
        reading = asyncio.ensure_future(self._read_reports(reader, frames))
        try:
            await self.script(reader, writer, hello)
            await reading
        finally:
            reading.cancel()
            writer.close()

    async def _read_reports(self, reader: asyncio.StreamReader, frames: FrameReader) -> None:
        while data := await reader.read(65536):
            self.reports += [f for f in frames.feed(data) if isinstance(f, int)]


@pytest.fixture
async def stores(tmp_path: Path) -> AsyncIterator[tuple[MessageStore, MessageStore]]:
    source = open_store(tmp_path / "source")
    target = open_store(tmp_path / "slave")
    yield source, target
    source.shutdown()
    target.shutdown()


def _data_frames(source: MessageStore, start: int) -> tuple[bytes, int]:
    span = source.replica.read_span(start, 1 << 20)
    assert span is not None
    return encode_data_head(span.pos, span.next_pos, len(span.data)) + span.data, span.next_pos


async def test_spans_in_the_welcomes_read_are_written_after_it_and_reported(
        stores: tuple[MessageStore, MessageStore]) -> None:
    source, target = stores
    for i in range(5):
        source.put_messages([msg("T", 0, f"m{i}".encode())])
    first, end_first = _data_frames(source, 0)
    for i in range(5, 8):
        source.put_messages([msg("T", 0, f"m{i}".encode())])
    second, end = _data_frames(source, end_first)

    async def script(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, hello: Hello) -> None:
        assert hello.max_offset == 0
        # The WELCOME and the first span in one write, so in one read of the slave's.
        writer.write(encode_welcome(Welcome(0, [], "127.0.0.1:1", 0)) + first)
        await writer.drain()
        await eventually(lambda: end_first in master.reports, what="the first span reported")
        writer.write(second)
        await writer.drain()
        await eventually(lambda: end in master.reports, what="the second span reported")

    master = ScriptedMaster(script)
    addr = await master.start()
    slave = HaSlave(target, HaSlaveConfig("b", 1, "127.0.0.1:2"), lambda: addr)
    slave.start()
    try:
        await eventually(lambda: target.max_phy_offset == end, what="the slave to have both spans")
        got = target.reads.get_messages("T", 0, 0, 100)
        assert got.count == 8
        assert master.reports == sorted(master.reports)  # never back
        assert master.connections == 1  # nothing failed on the way
        assert master.reports[-1] == end
    finally:
        await slave.stop()
        assert master.server is not None
        master.server.close()


async def test_a_master_gone_silent_is_left_for_a_new_connection(
        stores: tuple[MessageStore, MessageStore]) -> None:
    _, target = stores

    async def script(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, hello: Hello) -> None:
        writer.write(encode_welcome(Welcome(0, [], "127.0.0.1:1", 0)))
        await writer.drain()
        await asyncio.Event().wait()  # then nothing, ever: no data, no beat

    master = ScriptedMaster(script)
    addr = await master.start()
    slave = HaSlave(target, HaSlaveConfig("b", 1, "127.0.0.1:2", retry_interval_ms=50, read_timeout_s=0.3),
                    lambda: addr)
    slave.start()
    try:
        await eventually(lambda: slave.connected, what="the slave welcomed")
        await eventually(lambda: master.connections >= 2, what="a new connection after the silence")
    finally:
        await slave.stop()
        assert master.server is not None
        master.server.close()
