"""The slave's end of the replication stream against a scripted master on a real socket: the
spans that come in the same read as the WELCOME are written after the welcome, every span is
reported once it is applied (never when its write failed), and a master gone silent, a long
cut and a link dropped during the cut are each handled."""

from __future__ import annotations

import asyncio
import contextlib
import errno
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from store_util import msg, open_store

from ferrymq.ha.protocol import Beat, FrameReader, Hello, Welcome, encode_beat, encode_data_head, encode_welcome
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


@contextlib.asynccontextmanager
async def replicating(master: ScriptedMaster, target: MessageStore, **config: Any) -> AsyncIterator[HaSlave]:
    """A slave writing into `target` from the scripted master (HaSlaveConfig's `config`),
    stopped, and the master's port closed, when the block ends."""
    addr = await master.start()
    slave = HaSlave(target, HaSlaveConfig("b", 1, "127.0.0.1:2", **config), lambda: addr)
    slave.start()
    try:
        yield slave
    finally:
        await slave.stop()
        assert master.server is not None
        master.server.close()


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
    async with replicating(master, target):
        await eventually(lambda: target.max_phy_offset == end, what="the slave to have both spans")
        got = target.reads.get_messages("T", 0, 0, 100)
        assert got.count == 8
        assert master.reports == sorted(master.reports)  # never back
        assert master.connections == 1  # nothing failed on the way
        assert master.reports[-1] == end


async def test_a_master_gone_silent_is_left_for_a_new_connection(
        stores: tuple[MessageStore, MessageStore]) -> None:
    _, target = stores

    async def script(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, hello: Hello) -> None:
        writer.write(encode_welcome(Welcome(0, [], "127.0.0.1:1", 0)))
        await writer.drain()
        await asyncio.Event().wait()  # then nothing, ever: no data, no beat

    master = ScriptedMaster(script)
    async with replicating(master, target, retry_interval_ms=50, read_timeout_s=0.3) as slave:
        await eventually(lambda: slave.connected, what="the slave welcomed")
        await eventually(lambda: master.connections >= 2, what="a new connection after the silence")


async def test_a_span_the_slave_could_not_dispatch_is_never_reported(
        stores: tuple[MessageStore, MessageStore], monkeypatch: pytest.MonkeyPatch) -> None:
    """A report is what a SYNC_MASTER acknowledges sends on: a span whose queue write fails
    (a full disk) leaves the slave's log end where it was, and no report may claim it."""
    source, target = stores
    for i in range(3):
        source.put_messages([msg("T", 0, f"m{i}".encode())])
    span, end = _data_frames(source, 0)

    def full(*_a: object, **_k: object) -> object:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(target, "write_pending", full)

    async def script(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, hello: Hello) -> None:
        writer.write(encode_welcome(Welcome(0, [], "127.0.0.1:1", 0)))
        await writer.drain()
        await eventually(lambda: master.reports, what="the first report")
        writer.write(span)
        await writer.drain()

    master = ScriptedMaster(script)
    async with replicating(master, target, retry_interval_ms=60_000) as slave:
        # Up first (the slave is not connected before its WELCOME either), then ended.
        await eventually(lambda: master.reports, what="the first report")
        await eventually(lambda: not slave.connected and master.connections == 1,
                         what="the link to end on the failed write")
        assert target.max_phy_offset == 0
        assert master.reports and max(master.reports) == 0 < end


async def test_the_masters_silence_counts_from_the_end_of_a_long_cut(
        stores: tuple[MessageStore, MessageStore]) -> None:
    """Reading waits while a WELCOME's cut runs; a cut longer than the read timeout is not the
    master's silence (the beats sent meanwhile are still unread)."""
    _, target = stores
    target.put_messages([msg("T", 0, b"never on the master")])
    cut = target.replica.truncate_log

    def slow_cut(pos: int) -> int:
        time.sleep(1.5)  # in the cut's thread: a long cut of a large log
        return cut(pos)

    target.replica.truncate_log = slow_cut  # type: ignore[method-assign]

    async def script(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, hello: Hello) -> None:
        writer.write(encode_welcome(Welcome(0, [], "127.0.0.1:1", 0)))
        await writer.drain()
        for _ in range(30):  # beats every 0.1 s, as a master sends them
            writer.write(encode_beat(Beat(0, 0)))
            await writer.drain()
            await asyncio.sleep(0.1)

    master = ScriptedMaster(script)
    # A read timeout shorter than the cut, with room for a loaded machine's late beats.
    async with replicating(master, target, retry_interval_ms=50, read_timeout_s=1.0) as slave:
        await eventually(lambda: slave.connected, what="the slave welcomed")
        assert target.max_phy_offset == 0  # cut
        await eventually(lambda: slave.last_beat_ms > 0, what="the beats read after the cut")
        assert master.connections == 1


async def test_a_link_dropped_during_the_cut_reconnects_and_replicates(
        stores: tuple[MessageStore, MessageStore]) -> None:
    """The master changes (drop_connection) while the slave cuts its log after a WELCOME that
    came with a span: the held span is not written or reported on the closed link (uvloop
    refuses the write, which ended the replication task for good), and the next link copies it."""
    source, target = stores
    for i in range(3):
        source.put_messages([msg("T", 0, f"m{i}".encode())])
    target.put_messages([msg("T", 0, b"never on the master")])
    span, end = _data_frames(source, 0)
    loop = asyncio.get_running_loop()
    cut = target.replica.truncate_log
    dropped: list[int] = []

    def cut_while_dropped(pos: int) -> int:
        if not dropped:
            dropped.append(pos)
            loop.call_soon_threadsafe(slave.drop_connection)
            time.sleep(0.2)  # the close lands while the cut runs
        return cut(pos)

    target.replica.truncate_log = cut_while_dropped  # type: ignore[method-assign]

    async def script(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, hello: Hello) -> None:
        # The WELCOME (cut to 0) and the span in one write: the span waits for the cut.
        writer.write(encode_welcome(Welcome(0, [], "127.0.0.1:1", 0)) + span)
        await writer.drain()
        if master.connections == 1:  # the first link: dropped during its cut
            await asyncio.Event().wait()
        await eventually(lambda: end in master.reports, what="the span reported")

    master = ScriptedMaster(script)
    async with replicating(master, target, retry_interval_ms=50) as slave:
        await eventually(lambda: target.max_phy_offset == end, what="the span copied on the next link")
        assert dropped and master.connections >= 2
        assert slave._task is not None and not slave._task.done()
