"""Consumer offsets are on disk before a commit is answered: a broker killed right after
answering comes back with them (offset journal, compacted into consumerOffset.json)."""

from __future__ import annotations

import asyncio
import contextlib
import errno
import os
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from conftest import small_tmpfs, start_standalone
from ferrymq import AdminClient, Message, Producer
from ferrymq.broker.config import BrokerConfig
from ferrymq.broker.controller import Broker
from ferrymq.broker.offset_journal import JOURNAL_PREFIX
from ferrymq.broker.offsets import OffsetManager
from ferrymq.namesrv.server import NameServer, NamesrvConfig
from waits import eventually


def test_an_answered_commit_survives_a_broker_kill(tmp_path: Path) -> None:
    store = tmp_path / "store"
    server = start_standalone(store)
    try:
        with AdminClient(server.namesrv) as admin:
            admin.create_topic("durable", 2)
            q0, q1 = admin.message_queues("durable")
            admin.update_consumer_offset("g-durable", q0, 42)
            assert admin.acknowledge("g-durable", q1, 7, [(9, 12)])
    finally:
        server.kill()  # SIGKILL right after the answers: no snapshot was written since
    server = start_standalone(store)
    try:
        with AdminClient(server.namesrv) as admin:
            q0, q1 = admin.message_queues("durable")
            assert admin.query_consumer_offset("g-durable", q0) == 42
            assert admin.acknowledged("g-durable", q1) == (7, [(9, 12)])
    finally:
        server.stop()


def test_an_answered_offset_reset_survives_a_broker_kill(tmp_path: Path) -> None:
    store = tmp_path / "store"
    server = start_standalone(store)
    try:
        with AdminClient(server.namesrv) as admin:
            admin.create_topic("reset", 1)
            (q0,) = admin.message_queues("reset")
            admin.update_consumer_offset("g-reset", q0, 0)  # the group exists, at 0
            with Producer("p-reset", server.namesrv) as producer:
                for i in range(5):
                    producer.send(Message("reset", b"m%d" % i))
            assert admin.reset_offset_by_time("g-reset", "reset", -1) == {q0: 5}
    finally:
        server.kill()  # SIGKILL right after the answer
    server = start_standalone(store)
    try:
        with AdminClient(server.namesrv) as admin:
            (q0,) = admin.message_queues("reset")
            assert admin.query_consumer_offset("g-reset", q0) == 5
    finally:
        server.stop()


def _journal_files(config: Path) -> list[Path]:
    return sorted(config.glob(JOURNAL_PREFIX + "*"))


def test_journal_replays_after_the_snapshot_and_stops_at_a_torn_record(tmp_path: Path) -> None:
    async def commits() -> None:
        m = OffsetManager(tmp_path)
        m.load()
        flusher = asyncio.create_task(m.run_flusher())
        await asyncio.sleep(0)  # let the flusher start listening
        await m.wait_durable(m.commit("g", "t", 0, 5))
        assert m.persist()  # snapshot covers offset 5; records after it go to a new file
        await m.wait_durable(m.commit("g", "t", 0, 9, acked=[(11, 13)]))
        await m.wait_durable(m.commit("g", "t", 1, 3))
        flusher.cancel()
        m.close()

    asyncio.run(commits())
    journals = _journal_files(tmp_path)
    assert len(journals) == 1  # the generation before the snapshot is gone
    replayed = OffsetManager(tmp_path)
    replayed.load()
    assert replayed.query("g", "t", 0) == 9
    assert replayed.progress("g", "t", 0).acked == [(11, 13)]  # type: ignore[union-attr]
    assert replayed.query("g", "t", 1) == 3

    data = journals[0].read_bytes()
    journals[0].write_bytes(data[:-5])  # the last record torn by a crash mid-write
    torn = OffsetManager(tmp_path)
    torn.load()
    assert torn.query("g", "t", 0) == 9
    assert torn.query("g", "t", 1) == -1  # only the torn record is lost; it was never answered


def test_commit_without_a_running_flusher_is_kept_by_the_snapshot(tmp_path: Path) -> None:
    m = OffsetManager(tmp_path)
    m.commit("g", "t", 0, 3)
    assert m.persist()
    again = OffsetManager(tmp_path)
    again.load()
    assert again.query("g", "t", 0) == 3
    assert _journal_files(tmp_path) == []



def _on_disk(config: Path, topic: str, queue_id: int) -> int:
    seen = OffsetManager(config)
    seen.load()
    return seen.query("g", topic, queue_id)


@contextlib.asynccontextmanager
async def _journaling(config: Path, delay: float) -> AsyncIterator[OffsetManager]:
    """An OffsetManager with its journal's flusher running, as in a broker."""
    m = OffsetManager(config, journal_delay=delay)
    m.load()
    flusher = asyncio.create_task(m.run_flusher())
    await asyncio.sleep(0)  # let the flusher start listening
    try:
        yield m
    finally:
        flusher.cancel()
        m.close()


def test_an_unawaited_commit_rides_with_the_next_awaited_one(tmp_path: Path) -> None:
    # A pull's commit-offset flag commits without waiting: it must not cost a journal write of
    # its own, and it must not be left behind by the next answered commit.
    async def commits() -> None:
        async with _journaling(tmp_path, 30.0) as m:
            m.commit("g", "t", 0, 5)
            for _ in range(25):  # written on its own, it would be on disk within a few ms
                await asyncio.sleep(0.02)
                assert _on_disk(tmp_path, "t", 0) == -1
            await m.wait_durable(m.commit("g", "t", 1, 3))
            assert (_on_disk(tmp_path, "t", 0), _on_disk(tmp_path, "t", 1)) == (5, 3)

    asyncio.run(commits())


def test_an_unawaited_commit_is_written_within_the_journal_delay(tmp_path: Path) -> None:
    async def commits() -> None:
        async with _journaling(tmp_path, 0.05) as m:
            m.commit("g", "t", 0, 8)
            await eventually(lambda: _on_disk(tmp_path, "t", 0) == 8, 10, "the commit on disk")

    asyncio.run(commits())


def _fill(path: Path) -> None:
    """Writes `path` until the file system is full."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        block = b"\0" * 4096
        while True:
            try:
                if os.write(fd, block) <= 0:
                    return
            except OSError as exc:
                assert exc.errno == errno.ENOSPC
                return
    finally:
        os.close(fd)


def test_a_full_disk_delays_the_journal_and_loses_nothing(tmp_path: Path) -> None:
    # A journal write failing with ENOSPC must neither end the flusher (every later commit
    # answered with nothing on disk, the commits waiting then never answered) nor leave a
    # torn record in the journal (the replay stops at it: every commit after it is lost).
    with small_tmpfs(tmp_path / "mnt", "256k") as config:
        async def commits() -> None:
            async with _journaling(config, 0.05) as m:
                await m.wait_durable(m.commit("g", "t", 0, 1))  # the journal holds a record
                _fill(config / "ballast")
                long_topic = "t" + "x" * 6000  # spans pages: a part of it lands, then ENOSPC
                waiting = asyncio.ensure_future(
                    m.wait_durable(m.commit("g", long_topic, 0, 2)))
                await eventually(lambda: m.journal_failures > 0, 10, "the journal write to fail")
                assert not waiting.done()  # not on disk: not answered
                (config / "ballast").unlink()
                await asyncio.wait_for(waiting, 10)
                await asyncio.wait_for(m.wait_durable(m.commit("g", "t", 1, 3)), 10)
                m.commit("g", "t", 2, 4)  # unawaited: written within the delay again
                await eventually(lambda: _on_disk(config, "t", 2) == 4, 20, "the unawaited commit on disk")

        asyncio.run(commits())
        replayed = OffsetManager(config)
        replayed.load()  # the journal alone: no snapshot was written
        assert [replayed.query("g", "t", 0), replayed.query("g", "t" + "x" * 6000, 0),
                replayed.query("g", "t", 1), replayed.query("g", "t", 2)] == [1, 2, 3, 4]


def test_a_commit_waiting_when_the_flusher_stops_is_written_and_answered(
        tmp_path: Path) -> None:
    # The broker's stop cancels the journal's flusher before the server lets the requests in
    # progress finish. A commit waiting for its write then waited out the server's grace and
    # was never answered.
    async def commits() -> None:
        m = OffsetManager(tmp_path, journal_delay=30.0)
        m.load()
        flusher = asyncio.create_task(m.run_flusher())
        await asyncio.sleep(0)  # let the flusher start listening
        waiting = asyncio.ensure_future(m.wait_durable(m.commit("g", "t", 0, 7)))
        await asyncio.sleep(0)  # the commit waits; the flusher is woken but has not run
        assert not waiting.done()
        flusher.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await flusher
        await asyncio.wait_for(waiting, 10)
        m.close()

    asyncio.run(commits())
    assert _on_disk(tmp_path, "t", 0) == 7  # answered, so on disk (no snapshot written)


async def test_a_broker_stops_cleanly_with_its_config_disk_full(tmp_path: Path) -> None:
    # At stop the broker writes its offsets and topics snapshots. On a full disk those writes
    # fail; raised, the failure ended stop() there: the store was never shut down (no final
    # flush, no clean checkpoint) and the trace's last changes were never written.
    store = tmp_path / "store"
    with small_tmpfs(store / "config", "256k") as config:
        namesrv = NameServer(NamesrvConfig(port=0))
        await namesrv.start()
        b = Broker(BrokerConfig(store_dir=store, listen_port=0, grpc_listen_port=-1,
                                namesrv_addr=namesrv.address))
        await b.start()
        try:
            await b.offsets.wait_durable(b.offsets.commit("g", "t", 0, 11))
            _fill(config / "ballast")
            b.offsets.commit("g", "t", 1, 12)  # only a snapshot could keep this one now
            await b.stop()
            assert not (store / "abort").exists()  # the store was shut down cleanly
            (config / "ballast").unlink()
            again = Broker(BrokerConfig(store_dir=store, listen_port=0, grpc_listen_port=-1,
                                        namesrv_addr=namesrv.address))
            await again.start()
            try:
                assert again.offsets.query("g", "t", 0) == 11  # answered: in the journal
            finally:
                await again.stop()
        finally:
            await b.stop()
            await namesrv.stop()


async def test_a_commit_answered_as_the_broker_starts_is_on_disk(tmp_path: Path) -> None:
    # The broker answers requests once its store is open, and it still awaits the start of
    # replication (and gRPC) before it starts the journal's flusher. A commit answered then
    # was neither journaled nor waited for: answered, yet lost to a crash.
    namesrv = NameServer(NamesrvConfig(port=0))
    await namesrv.start()
    b = Broker(BrokerConfig(store_dir=tmp_path / "store", listen_port=0, grpc_listen_port=-1,
                            namesrv_addr=namesrv.address))
    starting = asyncio.ensure_future(b.start())
    try:
        deadline = asyncio.get_running_loop().time() + 10
        while b.store is None:  # requests are answered from here on
            assert asyncio.get_running_loop().time() < deadline, "the store never opened"
            await asyncio.sleep(0)
        await b.offsets.wait_durable(b.offsets.commit("g", "t", 0, 21))
        assert _on_disk(tmp_path / "store" / "config", "t", 0) == 21
        await starting
    finally:
        await asyncio.gather(starting, return_exceptions=True)
        await b.stop()
        await namesrv.stop()


def test_a_snapshot_that_failed_is_written_by_the_next_persist(tmp_path: Path) -> None:
    # A snapshot failing on a full disk left the table marked clean: the next periodic persist
    # wrote nothing, and the journal generations kept growing until another commit.
    with small_tmpfs(tmp_path / "mnt", "256k") as config:
        m = OffsetManager(config)
        m.load()
        m.commit("g", "t", 0, 5)  # no flusher: only the snapshot keeps it
        _fill(config / "ballast")
        with pytest.raises(OSError):
            m.persist()
        (config / "ballast").unlink()
        assert m.persist()  # still dirty: written now
        assert _on_disk(config, "t", 0) == 5


def test_snapshots_are_written_one_at_a_time(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                             ) -> None:
    # Two persists at once (the periodic one on a worker thread, the stop's) shared the
    # snapshot's temporary file, and the older snapshot could be renamed over the newer one
    # after the journal generations the newer one covered were dropped.
    import threading

    from ferrymq.broker import offsets as offsets_module

    real_write = offsets_module.atomic_write
    inside = threading.Event()
    overlapped = threading.Event()
    active = [0]
    guard = threading.Lock()

    def slow_write(path: Path | str, data: bytes) -> None:
        with guard:
            active[0] += 1
            if active[0] > 1:
                overlapped.set()
        inside.set()
        overlapped.wait(0.3)  # long enough for the second persist to get here if it can
        try:
            real_write(path, data)
        finally:
            with guard:
                active[0] -= 1

    monkeypatch.setattr(offsets_module, "atomic_write", slow_write)
    m = OffsetManager(tmp_path)
    m.load()
    m.commit("g", "t", 0, 1)
    first = threading.Thread(target=m.persist)
    first.start()
    assert inside.wait(10)
    m.commit("g", "t", 0, 2)  # after the first snapshot took its copy
    second = threading.Thread(target=m.persist)
    second.start()
    first.join(10)
    second.join(10)
    assert not overlapped.is_set(), "two snapshot writes ran at once"
    assert _on_disk(tmp_path, "t", 0) == 2  # the newer snapshot is the one on disk
