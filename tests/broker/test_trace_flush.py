"""The trace recorder's flush makes records in slices with a loop turn between them: a busy
broker's 50 ms of events made into records at once held its loop, and every request waiting
meanwhile (a held pull's answer among them) took the delay."""

from __future__ import annotations

import asyncio
from pathlib import Path

from ferrymq.broker.config import BrokerConfig
from ferrymq.broker.controller import Broker
from ferrymq.broker.trace.recorder import FLUSH_SLICE
from ferrymq.broker.trace.timeline import lookup
from ferrymq.common import props as P
from ferrymq.namesrv.server import NameServer, NamesrvConfig
from ferrymq.store import StoreMessage


async def test_a_large_flush_lets_the_loop_run_between_slices(tmp_path: Path) -> None:
    namesrv = NameServer(NamesrvConfig(port=0))
    await namesrv.start()
    # A long interval: only the explicit flush below writes.
    b = Broker(BrokerConfig(store_dir=tmp_path / "store", listen_port=0, grpc_listen_port=-1,
                            namesrv_addr=namesrv.address, trace_flush_interval_ms=600_000))
    await b.start()
    try:
        trace = b.trace
        assert trace is not None
        entries = 10 * FLUSH_SLICE
        for i in range(entries):
            trace.delivered("traced", i % 4, i, i + 1, "g-traced", "127.0.0.1:1")
        turns = 0
        flushed = False

        async def other_work() -> None:
            nonlocal turns
            while not flushed:
                turns += 1
                await asyncio.sleep(0)

        other = asyncio.create_task(other_work())
        await asyncio.sleep(0)
        start = turns
        written = await trace.flush()
        flushed = True
        await other
        assert written == entries  # every event is stored, slices or not
        assert trace.events_written == entries and trace.dropped == 0
        assert turns - start >= 9  # a turn between each two of the ten slices
    finally:
        await b.stop()
        await namesrv.stop()


async def test_a_stop_in_the_middle_of_a_flushs_slices_keeps_every_event(tmp_path: Path) -> None:
    # The broker's stop cancels the recorder's task, then flushes what is buffered. A flush
    # the task had under way has taken its entries out of the buffer: cancelled between two
    # slices, it dropped them all, and the final flush found an empty buffer.
    namesrv = NameServer(NamesrvConfig(port=0))
    await namesrv.start()
    b = Broker(BrokerConfig(store_dir=tmp_path / "store", listen_port=0, grpc_listen_port=-1,
                            namesrv_addr=namesrv.address, trace_flush_interval_ms=1))
    await b.start()
    stopped = False
    try:
        trace = b.trace
        assert trace is not None
        entries = 10 * FLUSH_SLICE
        for i in range(entries):
            trace.delivered("traced", i % 4, i, i + 1, "g-traced", "127.0.0.1:1")
        deadline = asyncio.get_running_loop().time() + 10
        while not trace._flushing.locked():  # the task's flush between two of its slices
            assert asyncio.get_running_loop().time() < deadline, "the task never flushed"
            await asyncio.sleep(0)
        assert trace.events_written == 0
        await b.stop()
        stopped = True
        assert trace.events_written == entries and trace.dropped == 0
    finally:
        if not stopped:
            await b.stop()
        await namesrv.stop()


async def test_a_queues_contiguous_pulls_and_commits_are_one_event_each_timed_per_offset(
        tmp_path: Path) -> None:
    # A consumer's pulls of a queue follow each other, and so do its commits: each run is
    # written as one event whose splits keep every pull's (and commit's) own time, so the
    # writer builds a few events per flush instead of two per pull, and the timeline still
    # says when each message was delivered and consumed.
    now = [1_000]
    namesrv = NameServer(NamesrvConfig(port=0))
    await namesrv.start()
    b = Broker(BrokerConfig(store_dir=tmp_path / "store", listen_port=0, grpc_listen_port=-1,
                            namesrv_addr=namesrv.address, trace_flush_interval_ms=600_000),
               clock=lambda: now[0])
    await b.start()
    try:
        trace = b.trace
        assert trace is not None
        ids = [f"{i:032X}" for i in range(8)]
        result = await b.put([StoreMessage(topic="T", queue_id=0, body=b"m",
                                           properties={P.PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX: m})
                              for m in ids])
        assert result.status.stored
        for ts, start, end, client in ((1_001, 0, 2, "127.0.0.1:1"), (1_001, 2, 3, "127.0.0.1:1"),
                                       (1_005, 3, 5, "127.0.0.1:1"), (1_006, 5, 8, "127.0.0.1:2")):
            now[0] = ts
            trace.delivered("T", 0, start, end, "G", client)
        for ts, old, new in ((1_007, 0, 4), (1_009, 4, 8)):
            now[0] = ts
            trace.on_commit("G", "T", 0, old, new)
        assert await trace.flush() == 3  # client 1's three pulls, client 2's, the commits
        assert trace.records_written == 1
        timeline = {i: [(e.kind, e.ts, e.client) for e in lookup(b.store, m, "b")]
                    for i, m in enumerate(ids)}
        stored = timeline[0][0][1]
        assert timeline[1] == [("stored", stored, ""), ("delivered", 1_001, "127.0.0.1:1"),
                               ("consumed", 1_007, "")]
        assert timeline[4] == [("stored", stored, ""), ("delivered", 1_005, "127.0.0.1:1"),
                               ("consumed", 1_009, "")]
        assert timeline[7] == [("stored", stored, ""), ("delivered", 1_006, "127.0.0.1:2"),
                               ("consumed", 1_009, "")]
    finally:
        await b.stop()
        await namesrv.stop()
