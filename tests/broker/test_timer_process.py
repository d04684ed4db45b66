"""Timer messages on a real `ferrymq standalone` process: sent with ferrymq's Producer API,
and pending across a clean restart (exactly once) and a SIGKILL (at least once: the timers
delivered since the timer's last sync, one flush interval, come again; duplicates are counted
and reported)."""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from pathlib import Path

import pytest
from wire_util import Wire

from conftest import Standalone, start_standalone
from ferrymq import AdminClient, Message, Producer
from ferrymq.client.errors import MessageValidationError
from ferrymq.common.message import MessageExt
from waits import eventually


async def _delivered(standalone: Standalone, topic: str) -> list[MessageExt]:
    wire = Wire(standalone.namesrv, standalone.broker)
    try:
        return await wire.pull_all(topic, 0)
    finally:
        await wire.close()


def _send_timers(standalone: Standalone, topic: str, n: int, first_ms: int, spread_ms: int) -> list[str]:
    ids = []
    with Producer("timer-p", standalone.namesrv) as producer:
        for i in range(n):
            msg = Message(topic, f"m{i}".encode(), deliver_time_ms=first_ms + spread_ms * i // n)
            ids.append(producer.send(msg).msg_id)
    return ids


def _create(standalone: Standalone, topic: str) -> None:
    with AdminClient(standalone.namesrv) as admin:
        admin.create_topic(topic, 1)


async def test_producer_deliver_time_is_honoured(standalone: Standalone) -> None:
    _create(standalone, "at")
    with Producer("timer-p", standalone.namesrv) as producer, pytest.raises(MessageValidationError):
        producer.send(Message("at", b"x", delay_level=2, deliver_time_ms=1))
    with pytest.raises(ValueError):
        Message("at", b"x", deliver_time_ms=-5)
    at = int(time.time() * 1000) + 1_500
    (msg_id,) = _send_timers(standalone, "at", 1, at, 0)
    assert await _delivered(standalone, "at") == []
    (msg,) = await eventually(lambda: _delivered(standalone, "at"), what="the timer delivery")
    assert msg.msg_id == msg_id and msg.timer_out_ms == at
    assert msg.store_timestamp >= at  # never early


@pytest.mark.parametrize("crash", [False, True], ids=["clean", "sigkill"])
async def test_pending_timers_survive_a_restart(tmp_path: Path, crash: bool, run_report: list[str]) -> None:
    server = start_standalone(tmp_path / "store")
    try:
        _create(server, "t")
        n = 300
        start = int(time.time() * 1000) + 1_000
        ids = await asyncio.to_thread(_send_timers, server, "t", n, start, 3_000)
        await eventually(lambda: _some(server, "t"), what="the first deliveries")
        assert len(await _delivered(server, "t")) < n  # some are still pending at the stop
        if crash:
            server.kill()
        else:
            server.stop()
        server = start_standalone(tmp_path / "store")
        got = await eventually(lambda: _all(server, "t", set(ids)), timeout=30,
                               what="every timer after the restart")
        dups = len(got) - len(set(got))
        run_report.append(f"timer restart ({'SIGKILL' if crash else 'clean'}): {n} timers, "
                          f"{dups} delivered twice")
        assert set(got) == set(ids)
        if crash:
            # The deliveries made since the timer's last sync are made again, once.
            assert max(Counter(got).values()) <= 2
        else:
            assert dups == 0
    finally:
        server.stop()


async def _some(server: Standalone, topic: str) -> bool:
    return len(await _delivered(server, topic)) > 0


async def _all(server: Standalone, topic: str, ids: set[str]) -> list[str] | None:
    got = [m.msg_id for m in await _delivered(server, topic)]
    return got if set(got) >= ids else None
