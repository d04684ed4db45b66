"""Kill -9 a real writer process under SYNC_FLUSH at random moments, over and over, on the
same store. After each recovery every acknowledged record reads back byte for byte, its
consume-queue entry points at it, and the store takes new appends. Every other round the writer
puts from several asyncio writers at once, so groups of coalesced puts are cut by the kill too."""

from __future__ import annotations

import hashlib
import os
import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from store_util import open_store

from ferrymq.common.record import decode_record
from ferrymq.store import FlushDiskType, GetStatus, PutStatus, StoreMessage

WRITER = Path(__file__).with_name("crash_writer.py")
ROUNDS = 24


def run_and_kill(store_dir: Path, seed: int, rng: random.Random) -> list[str]:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    proc = subprocess.Popen([sys.executable, str(WRITER), str(store_dir), str(seed)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    assert proc.stdout is not None
    lines: list[bytes] = []
    ready = threading.Event()

    def read() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line)
            ready.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    assert ready.wait(20), proc.stderr.read() if proc.stderr else ""
    # kill at a random moment after the writer got going
    deadline = time.monotonic() + rng.uniform(0.02, 0.5)
    while time.monotonic() < deadline and proc.poll() is None:
        ready.clear()
        ready.wait(deadline - time.monotonic())
    proc.send_signal(signal.SIGKILL)
    proc.wait(10)
    reader.join(10)
    assert proc.returncode == -signal.SIGKILL, proc.stderr.read() if proc.stderr else ""
    # a line cut by the kill was never acknowledged to anyone
    return [ln.decode() for ln in lines if ln.endswith(b"\n") and not ln.startswith(b"ready")]


def test_sigkill_rounds_lose_no_acknowledged_record(tmp_path: Path) -> None:
    rng = random.Random(int.from_bytes(os.urandom(4), "big"))
    store_dir = tmp_path / "store"
    acked: dict[int, tuple[int, str]] = {}
    started = time.monotonic()
    for round_no in range(ROUNDS):
        lines = run_and_kill(store_dir, round_no, rng)
        errors = [ln for ln in lines if ln.startswith("error")]
        assert not errors, errors
        for ln in lines:
            phys, size, sha = ln.split()
            acked[int(phys)] = (int(size), sha)
        store = open_store(store_dir, flush_disk_type=FlushDiskType.SYNC_FLUSH,
                           commitlog_segment_size=256 * 1024,
                           consume_queue_entries_per_file=500, index_hash_slots=512,
                           index_max_entries=4096)
        try:
            assert store.recovered_abnormally
            for phys, (size, sha) in acked.items():
                raw = store.reads.read_record(phys, size)
                assert raw is not None, f"round {round_no}: acked record at {phys} is gone"
                assert hashlib.sha256(raw).hexdigest() == sha, f"record at {phys} changed"
            # the newest acknowledged records are reachable through their queues
            for phys in sorted(acked)[-20:]:
                raw = store.reads.read_record(phys)
                assert raw is not None
                m = decode_record(raw, check_crc=True)
                got = store.reads.get_messages(m.topic, m.queue_id, m.queue_offset, 1)
                assert got.status is GetStatus.FOUND and got.data == raw
                assert store.reads.query_by_uniq_key(m.topic, m.properties["UNIQ_KEY"]) == [phys]
            res = store.put_messages([StoreMessage("T0", 0, b"after-crash")])
            assert res.status is PutStatus.PUT_OK
            raw = store.reads.read_record(res.messages[0].phys_offset)
            assert raw is not None and decode_record(raw).body == b"after-crash"
        finally:
            store.shutdown()
    assert len(acked) > ROUNDS  # the writer really got going in most rounds
    assert time.monotonic() - started < 120
