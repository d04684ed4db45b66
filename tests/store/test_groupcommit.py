"""Coalesced asynchronous puts: puts waiting on one loop at the same time are appended with one
commit-log write and one flush waiter, and each caller still gets its own result (offsets,
message ids, status); an illegal message fails only its own put; a full disk refuses every put
of the group and leaves nothing behind; a late fsync is every put's FLUSH_DISK_TIMEOUT."""

from __future__ import annotations

import asyncio
import errno
import os
import threading
from collections.abc import Sequence
from pathlib import Path

import pytest
from store_util import crash_image, msg, open_store

from ferrymq.common.record import decode_record, decode_records
from ferrymq.store import FileIO, FlushDiskType, GetStatus, MessageStore, PutResult, PutStatus
from ferrymq.store.groupcommit import SINGLES_BEFORE_EAGER
from ferrymq.store.model import StoreMessage

SYNC = FlushDiskType.SYNC_FLUSH
ASYNC = FlushDiskType.ASYNC_FLUSH


class RecordingIO(FileIO):
    """Counts data writes; fsync can be held (gate) and fails with ENOSPC when armed."""

    def __init__(self) -> None:
        self.pwrites = 0
        self.gate = threading.Event()
        self.gate.set()
        self.fail_next_pwrite = False

    def pwrite(self, fd: int, data: bytes | memoryview, pos: int) -> int:
        if self.fail_next_pwrite:
            self.fail_next_pwrite = False
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        self.pwrites += 1
        return super().pwrite(fd, data, pos)

    def fsync(self, fd: int) -> None:
        self.gate.wait()
        super().fsync(fd)


async def put_together(store: MessageStore,
                       puts: Sequence[Sequence[StoreMessage]]) -> list[PutResult]:
    """All puts made in the same loop turn (gather starts every task in one turn)."""
    return list(await asyncio.gather(*(store.put_messages_async(p) for p in puts)))


def stored(store: MessageStore, queue_id: int = 0) -> list[bytes]:
    r = store.reads.get_messages("T", queue_id, 0, 1000)
    return [m.body for m in decode_records(r.data)] if r.status is GetStatus.FOUND else []


@pytest.mark.parametrize("flush", [SYNC, ASYNC])
def test_concurrent_puts_are_one_write_and_each_gets_its_own_result(tmp_path: Path,
                                                                     flush: FlushDiskType) -> None:
    io = RecordingIO()
    s = open_store(tmp_path / "s", flush_disk_type=flush, file_io=io)
    # queue 0 gets single messages and one batch of three; queue 1 gets two singles
    puts = [[msg(body=b"a")], [msg(body=b"b1"), msg(body=b"b2"), msg(body=b"b3")],
            [msg(queue_id=1, body=b"c")], [msg(body=b"d")], [msg(queue_id=1, body=b"e")]]
    try:
        assert s.put_messages([msg(body=b"first")]).ok  # queues and segment exist
        groups, grouped, writes = s.coalescer.groups, s.coalescer.grouped_puts, io.pwrites
        results = asyncio.run(put_together(s, puts))
        assert [r.status for r in results] == [PutStatus.PUT_OK] * len(puts)
        # one commit-log write, one consume-queue write per queue
        assert io.pwrites - writes == 3
        assert (s.coalescer.groups - groups, s.coalescer.grouped_puts - grouped) == (1, 5)
        assert [len(r.messages) for r in results] == [1, 3, 1, 1, 1]
        q0 = [m.queue_offset for i in (0, 1, 3) for m in results[i].messages]
        q1 = [m.queue_offset for i in (2, 4) for m in results[i].messages]
        assert q0 == [1, 2, 3, 4, 5] and q1 == [0, 1]
        phys = [m.phys_offset for r in results for m in r.messages]
        assert phys == sorted(phys) and len(set(phys)) == len(phys)
        for put, r in zip(puts, results, strict=True):
            last = r.messages[-1]
            assert r.end_offset == last.phys_offset + last.size
            for sent, appended in zip(put, r.messages, strict=True):
                raw = s.reads.read_record(appended.phys_offset, appended.size)
                assert raw is not None
                back = decode_record(raw)
                assert back.body == sent.body and back.queue_offset == appended.queue_offset
                assert back.msg_id == appended.offset_msg_id
        if flush is SYNC:
            assert s.flushed_offset >= max(r.end_offset for r in results)
        assert stored(s) == [b"first", b"a", b"b1", b"b2", b"b3", b"d"]
        assert stored(s, 1) == [b"c", b"e"]
    finally:
        s.shutdown()


def test_an_acknowledged_coalesced_put_is_on_disk(tmp_path: Path) -> None:
    s = open_store(tmp_path / "s", flush_disk_type=SYNC, flush_interval_ms=60_000)

    async def writer(w: int, seen: list[tuple[int, int]]) -> None:
        for i in range(10):
            r = await s.put_messages_async([msg(body=b"%d-%d" % (w, i))])
            assert r.status is PutStatus.PUT_OK
            seen.append((r.end_offset, s.flushed_offset))  # read when the caller resumes

    async def scenario() -> list[tuple[int, int]]:
        seen: list[tuple[int, int]] = []
        await asyncio.gather(*(writer(w, seen) for w in range(16)))
        return seen

    try:
        seen = asyncio.run(scenario())
        assert len(seen) == 160
        assert all(flushed >= end for end, flushed in seen)
        assert s.coalescer.grouped_puts > 0
    finally:
        s.shutdown()


@pytest.mark.parametrize("flush", [SYNC, ASYNC])
def test_an_illegal_message_fails_only_its_own_put(tmp_path: Path, flush: FlushDiskType) -> None:
    s = open_store(tmp_path / "s", flush_disk_type=flush, max_message_size=1024)
    too_big = msg(body=b"x" * 2000)
    puts = [[msg(body=b"a")], [msg(body=b"b"), too_big], [msg(body=b"c1"), msg(body=b"c2")],
            [too_big], [msg(body=b"d")]]
    try:
        results = asyncio.run(put_together(s, puts))
        assert [r.status for r in results] == [PutStatus.PUT_OK, PutStatus.MESSAGE_ILLEGAL,
                                               PutStatus.PUT_OK, PutStatus.MESSAGE_ILLEGAL,
                                               PutStatus.PUT_OK]
        assert results[1].messages == [] and results[3].messages == []
        assert "2" in results[1].reason  # says what was too large
        assert [m.queue_offset for r in results for m in r.messages] == [0, 1, 2, 3]
        assert stored(s) == [b"a", b"c1", b"c2", b"d"]
    finally:
        s.shutdown()


def test_flush_timeout_is_every_coalesced_puts_answer(tmp_path: Path) -> None:
    io = RecordingIO()
    s = open_store(tmp_path / "s", flush_disk_type=SYNC, sync_flush_timeout_ms=1000,
                   file_io=io)
    puts = [[msg(body=b"%d" % i)] for i in range(8)]
    try:
        io.gate.clear()  # the disk does not answer
        results = asyncio.run(put_together(s, puts))
        assert [r.status for r in results] == [PutStatus.FLUSH_DISK_TIMEOUT] * 8
        assert all("1000 ms" in r.reason for r in results)
        # stored all the same, each with its own offset
        assert [r.messages[0].queue_offset for r in results] == list(range(8))
        io.gate.set()
        # The flush that timed out finishes once the disk answers; the next put then gets its
        # own flush within the timeout however slow the machine was at catching up.
        last = results[-1].messages[0]
        assert s.wait_flushed(last.phys_offset + last.size, 30.0)
        assert asyncio.run(put_together(s, [[msg(body=b"later")]]))[0].status is PutStatus.PUT_OK
        assert stored(s) == [b"%d" % i for i in range(8)] + [b"later"]
    finally:
        io.gate.set()
        s.shutdown()


@pytest.mark.parametrize("flush", [SYNC, ASYNC])
def test_a_full_disk_refuses_every_put_of_the_group(tmp_path: Path, flush: FlushDiskType) -> None:
    io = RecordingIO()
    s = open_store(tmp_path / "s", flush_disk_type=flush, file_io=io)
    try:
        assert s.put_messages([msg(body=b"ok")]).ok
        end, max_q = s.max_phy_offset, s.reads.get_max_offset("T", 0)
        io.fail_next_pwrite = True  # the group's commit-log write
        results = asyncio.run(put_together(s, [[msg(body=b"lost-%d" % i)] for i in range(6)]))
        assert [r.status for r in results] == [PutStatus.DISK_FULL] * 6
        assert all(r.messages == [] and "no space left" in r.reason for r in results)
        assert (s.max_phy_offset, s.reads.get_max_offset("T", 0)) == (end, max_q)
        image = crash_image(s, tmp_path / "img")
        results = asyncio.run(put_together(s, [[msg(body=b"resumed")], [msg(body=b"too")]]))
        assert [r.messages[0].queue_offset for r in results] == [1, 2]
        assert stored(s) == [b"ok", b"resumed", b"too"]
    finally:
        s.shutdown()
    r = open_store(image)
    try:
        assert stored(r) == [b"ok"] and r.max_phy_offset == end
    finally:
        r.shutdown()


def test_a_put_cancelled_before_its_turn_is_not_stored(tmp_path: Path) -> None:
    s = open_store(tmp_path / "s")

    async def scenario() -> PutResult:
        doomed = asyncio.ensure_future(s.put_messages_async([msg(body=b"cancelled")]))
        kept = asyncio.ensure_future(s.put_messages_async([msg(body=b"kept")]))
        await asyncio.sleep(0)  # both have queued their put; the append runs next
        doomed.cancel()
        with pytest.raises(asyncio.CancelledError):
            await doomed
        return await kept

    try:
        r = asyncio.run(scenario())
        assert r.ok and r.messages[0].queue_offset == 0
        assert stored(s) == [b"kept"]
    finally:
        s.shutdown()


def test_a_lone_put_waits_for_no_timer(tmp_path: Path) -> None:
    s = open_store(tmp_path / "s")

    async def scenario() -> None:
        put = asyncio.ensure_future(s.put_messages_async([msg(body=b"alone")]))
        await asyncio.sleep(0)  # the put queues itself and schedules its append (call_soon)
        await asyncio.sleep(0)  # the append runs and answers the put's future
        await asyncio.sleep(0)  # the put's task resumes with its result
        assert put.done() and put.result().ok

    try:
        asyncio.run(scenario())
    finally:
        s.shutdown()


def test_a_lone_sync_writer_does_not_gather(tmp_path: Path) -> None:
    s = open_store(tmp_path / "s", flush_disk_type=SYNC)

    async def lone() -> None:
        for i in range(20):
            assert (await s.put_messages_async([msg(body=b"%d" % i)])).ok

    try:
        asyncio.run(lone())
        assert s.coalescer.eager_puts == 20 - SINGLES_BEFORE_EAGER
        for i in range(5):
            assert s.put_messages([msg(body=b"blocking %d" % i)]).ok
        assert s._flusher.gathers == 0
    finally:
        s.shutdown()


def test_a_lone_writer_is_appended_at_once_until_another_writer_joins(tmp_path: Path) -> None:
    s = open_store(tmp_path / "s")

    def at_once(body: bytes) -> PutResult:
        """The put finishes in the caller's step: the coroutine returns without suspending."""
        coro = s.put_messages_async([msg(body=body)])
        with pytest.raises(StopIteration) as stop:
            coro.send(None)
        result = stop.value.value
        assert isinstance(result, PutResult)
        return result

    async def scenario() -> None:
        co = s.coalescer
        for i in range(SINGLES_BEFORE_EAGER):  # queued, each alone in its turn
            assert (await s.put_messages_async([msg(body=b"q%d" % i)])).ok
        assert co.eager_puts == 0
        assert at_once(b"eager-1").ok and at_once(b"eager-2").ok  # one task, again and again
        assert co.eager_puts == 2
        groups, grouped = co.groups, co.grouped_puts
        results = await put_together(s, [[msg(body=b"g%d" % i)] for i in range(5)])
        # the first was appended at once; the others came in the same turn and were grouped
        assert (co.eager_puts, co.groups - groups, co.grouped_puts - grouped) == (3, 1, 4)
        offsets = [r.messages[0].queue_offset for r in results]
        assert offsets == list(range(SINGLES_BEFORE_EAGER + 2, SINGLES_BEFORE_EAGER + 7))
        for i in range(SINGLES_BEFORE_EAGER):  # alone again
            assert (await s.put_messages_async([msg(body=b"r%d" % i)])).ok
        assert at_once(b"eager-3").ok

    try:
        asyncio.run(scenario())
        assert stored(s) == ([b"q%d" % i for i in range(SINGLES_BEFORE_EAGER)]
                             + [b"eager-1", b"eager-2"] + [b"g%d" % i for i in range(5)]
                             + [b"r%d" % i for i in range(SINGLES_BEFORE_EAGER)] + [b"eager-3"])
    finally:
        s.shutdown()


def test_a_large_group_is_cut_to_stay_well_inside_a_segment(tmp_path: Path) -> None:
    s = open_store(tmp_path / "s")  # 64 KiB segments: groups of at most 16 KiB
    bodies = [bytes([i]) * 4000 for i in range(12)]
    try:
        results = asyncio.run(put_together(s, [[msg(body=b)] for b in bodies]))
        assert all(r.ok for r in results)
        assert [r.messages[0].queue_offset for r in results] == list(range(12))
        assert s.coalescer.groups >= 3  # 12 x ~4 KiB does not go as one group
        assert stored(s) == bodies
    finally:
        s.shutdown()
