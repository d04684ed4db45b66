"""A master whose readers were held back (store/visibility.py) loses its role to a replica that
already has everything it held, and rejoins as that replica's slave over the real replication
stream: nothing is cut, and what it held must become readable without waiting for new writes."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from pathlib import Path

from store_util import msg, open_store

from ferrymq.ha.master import HaMaster, HaMasterConfig
from ferrymq.ha.slave import HaSlave, HaSlaveConfig
from ferrymq.store import MessageStore, PutStatus


async def until(probe: Callable[[], bool], what: str, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not probe():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        await asyncio.sleep(0.02)


async def replicate(source: MessageStore, source_addr: str, target: MessageStore, target_id: int,
                    target_addr: str, masters: list[HaMaster],
                    slaves: list[HaSlave]) -> tuple[HaMaster, HaSlave]:
    """`target` follows `source` over a real replication link (both kept for the cleanup)."""
    master = HaMaster(source, HaMasterConfig(port=0, heartbeat_interval_ms=100), lambda: source_addr)
    masters.append(master)
    await master.start()
    slave = HaSlave(target, HaSlaveConfig("b", target_id, target_addr, retry_interval_ms=50),
                    lambda: master.address)
    slaves.append(slave)
    slave.start()
    return master, slave


async def test_a_demoted_master_shows_what_it_held_once_it_agrees_with_its_new_master(
        tmp_path: Path) -> None:
    old, new = open_store(tmp_path / "old"), open_store(tmp_path / "new")
    masters: list[HaMaster] = []
    slaves: list[HaSlave] = []
    try:
        old.replica.epochs.begin(1, 0)
        old.set_confirmed(0)  # the gate is closed: readers wait for the replica's acks
        r = old.put_messages([msg("T", 0, f"m{i}".encode()) for i in range(3)])
        assert r.status is PutStatus.PUT_OK
        assert old.reads.get_max_offset("T", 0) == 0

        # The replica copies all of it; the old master has not taken its acks in yet.
        m_old, s_new = await replicate(old, "old:1", new, 2, "new:1", masters, slaves)
        await until(lambda: new.max_phy_offset == old.max_phy_offset, "the replica to copy the log")
        assert new.reads.get_max_offset("T", 0) == 3
        await s_new.stop()
        await m_old.stop()

        # The replica is elected; the old master follows it. Its log is a prefix of the new
        # master's, so nothing is truncated.
        new.replica.epochs.begin(2, new.max_phy_offset)
        _, s_old = await replicate(new, "new:1", old, 1, "old:1", masters, slaves)
        await until(lambda: s_old.connected, "the old master to rejoin as slave")
        assert s_old.truncated_bytes == 0
        await until(lambda: old.reads.get_max_offset("T", 0) == 3,
                    "the old master's held entries to become readable")
        assert [e.queue_offset for e in old.reads.read_queue_entries("T", 0, 0, 10)] == [0, 1, 2]
    finally:
        for s in slaves:
            await s.stop()
        for m in masters:
            await m.stop()
        old.shutdown()
        new.shutdown()
