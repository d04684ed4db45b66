"""The trace recorder's flush makes records in slices with a loop turn between them: a busy
broker's 50 ms of events made into records at once held its loop, and every request waiting
meanwhile (a held pull's answer among them) took the delay."""

from __future__ import annotations

import asyncio
from pathlib import Path

from ferrymq.broker.config import BrokerConfig
from ferrymq.broker.controller import Broker
from ferrymq.broker.trace.recorder import FLUSH_SLICE
from ferrymq.namesrv.server import NameServer, NamesrvConfig


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
