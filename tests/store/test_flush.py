"""Flushing: SYNC_FLUSH acknowledges only fsynced bytes, concurrent writers share fsyncs
(group commit), a stuck disk yields FLUSH_DISK_TIMEOUT, and waiting never blocks the loop."""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path

from store_util import msg, open_store, wait_until

from ferrymq.store import FileIO, FlushDiskType, PutStatus

SYNC = FlushDiskType.SYNC_FLUSH


class GatedIO(FileIO):
    """fsync blocks while the gate is closed and counts calls."""

    def __init__(self) -> None:
        self.gate = threading.Event()
        self.gate.set()
        self.fsyncs = 0

    def fsync(self, fd: int) -> None:
        self.gate.wait()
        self.fsyncs += 1
        super().fsync(fd)


def test_sync_put_returns_after_fsync(tmp_path: Path) -> None:
    s = open_store(tmp_path / "s", flush_disk_type=SYNC, flush_interval_ms=10_000)
    try:
        for _ in range(20):
            res = s.put_messages([msg(body=b"x" * 100)])
            assert res.status is PutStatus.PUT_OK
            assert s.flushed_offset >= res.end_offset
    finally:
        s.shutdown()


def test_async_flush_catches_up_on_its_interval(tmp_path: Path) -> None:
    s = open_store(tmp_path / "s", flush_interval_ms=20)
    try:
        res = s.put_messages([msg()])
        assert res.status is PutStatus.PUT_OK
        wait_until(lambda: s.flushed_offset >= res.end_offset, message="async flush")
    finally:
        s.shutdown()


def test_sync_flush_timeout(tmp_path: Path) -> None:
    io = GatedIO()
    s = open_store(tmp_path / "s", flush_disk_type=SYNC, sync_flush_timeout_ms=200,
                   file_io=io)
    try:
        io.gate.clear()
        t0 = time.monotonic()
        res = s.put_messages([msg()])
        assert res.status is PutStatus.FLUSH_DISK_TIMEOUT and res.messages
        assert "200 ms" in res.reason
        assert time.monotonic() - t0 >= 0.2

        async def one() -> PutStatus:
            return (await s.put_messages_async([msg()])).status

        assert asyncio.run(one()) is PutStatus.FLUSH_DISK_TIMEOUT
        io.gate.set()
        res = s.put_messages([msg()])
        assert res.status is PutStatus.PUT_OK
        # the stored-but-late messages are there
        assert s.reads.get_max_offset("T", 0) == 3
    finally:
        io.gate.set()
        s.shutdown()


def test_group_commit_does_not_block_the_loop(tmp_path: Path) -> None:
    io = GatedIO()
    s = open_store(tmp_path / "s", flush_disk_type=SYNC, file_io=io)
    writers = 64

    async def scenario() -> tuple[list[PutStatus], int, int]:
        io.gate.clear()  # the disk is slow: everybody piles up behind one fsync
        ticks = 0
        stop = asyncio.Event()

        async def ticker() -> None:
            nonlocal ticks
            while not stop.is_set():
                ticks += 1
                await asyncio.sleep(0)

        tick_task = asyncio.create_task(ticker())
        before = io.fsyncs
        puts = [asyncio.create_task(s.put_messages_async([msg(body=bytes([i]))]))
                for i in range(writers)]
        # The loop keeps turning while every put waits for the gated fsync: the ticker gets
        # many turns (counted, not timed, so a starved machine cannot fail this).
        deadline = time.monotonic() + 10
        while ticks < 200 and time.monotonic() < deadline:
            await asyncio.sleep(0)
        assert not any(p.done() for p in puts)  # nobody is acknowledged before the fsync
        ticks_while_blocked = ticks
        io.gate.set()
        results = await asyncio.gather(*puts)
        stop.set()
        await tick_task
        return [r.status for r in results], io.fsyncs - before, ticks_while_blocked

    try:
        statuses, fsyncs, ticks = asyncio.run(scenario())
        assert statuses == [PutStatus.PUT_OK] * writers
        assert fsyncs <= 4, f"{writers} writers needed {fsyncs} fsyncs"
        assert ticks >= 200  # the loop kept running while the puts waited
    finally:
        io.gate.set()
        s.shutdown()
