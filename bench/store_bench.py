"""Benchmark of ferrymq.store with 1 KiB messages, beside plain-Python file baselines measured
in the same run (what plain Python can do with the same files on the same machine):

- append, ASYNC_FLUSH, batches of 32            peer: f.write of 32 records, fsync once a second
- append, SYNC_FLUSH, 64 asyncio writers        peer: f.write of 64 records + fsync per write
- append, SYNC_FLUSH, 1 writer                  peer: f.write of 1 record + fsync per write
  (the writers run on the event loop the broker runs, uvloop where installed, and start once
  the store has zero-filled the space ahead of its write position, as a running broker's has:
  on a fresh store that first fill, 64 MiB, competes with the first fsyncs)
- read through the consume queue, 32 per pull   peer: f.read of 32 records at a time
- recovery of a 1 GiB log after SIGKILL of a writer in full flow (1 s checkpoints), and
  without any checkpoint (every record verified)
                                                peer: read 1 GiB and CRC every record

Messages carry what a client's do: UNIQ_KEY, TAGS, WAIT. Every figure is the median of 3 runs.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ferrymq.remoting.loop import new_event_loop
from ferrymq.store import (
    FlushDiskType,
    GetStatus,
    MessageStore,
    PutStatus,
    StoreConfig,
    StoreMessage,
)

BODY = 1024
RUNS = 3
PEER_ASYNC = "plain Python: write 32 × 1 KiB, fsync once a second"
PEER_SYNC64 = "plain Python: write 64 × 1 KiB + fsync per write"
PEER_SYNC1 = "plain Python: write 1 KiB + fsync per write"
PEER_READ = "plain Python: read 32 × 1 KiB per call"
PEER_RECOVER = "plain Python: read 1 GiB, CRC each 1 KiB record"
TOPIC = "BenchTopic"
BENCH_TMP = Path(__file__).resolve().parent.parent / ".tmp"


def sizes(quick: bool) -> dict[str, int]:
    if quick:
        return {"async": 60_000, "sync64": 12_000, "sync1": 1_500, "log": 256 << 20}
    return {"async": 300_000, "sync64": 60_000, "sync1": 5_000, "log": 1 << 30}


def make_batch(n: int, seq: int) -> list[StoreMessage]:
    body = os.urandom(BODY)
    return [StoreMessage(TOPIC, 0, body,
                         {"UNIQ_KEY": f"7F0000010D4418B4AAC2{seq * n + i:012X}", "TAGS": "TagA",
                          "WAIT": "true"},
                         born_timestamp=1_700_000_000_000, born_host=("127.0.0.1", 50000))
            for i in range(n)]


def new_store(tmp: Path, flush: FlushDiskType, **kw: Any) -> MessageStore:
    store = MessageStore(StoreConfig(tmp / "store", flush_disk_type=flush,
                                     store_host="127.0.0.1:10911", **kw))
    store.start()
    return store


def tempdir() -> tempfile.TemporaryDirectory[str]:
    BENCH_TMP.mkdir(exist_ok=True)
    return tempfile.TemporaryDirectory(prefix="ferrymq-store-bench-", dir=BENCH_TMP)


# --- ours ---------------------------------------------------------------------------------------
def append_async(n: int) -> tuple[float, float]:
    """(append msgs/s, read msgs/s) on the same data."""
    pool = [make_batch(32, s) for s in range(64)]
    with tempdir() as d:
        store = new_store(Path(d), FlushDiskType.ASYNC_FLUSH)
        try:
            batches = n // 32
            t0 = time.perf_counter()
            for i in range(batches):
                if store.put_messages(pool[i % 64]).status is not PutStatus.PUT_OK:
                    raise RuntimeError("put failed")
            append_rate = batches * 32 / (time.perf_counter() - t0)
            read_rate = read_all(store, batches * 32)
        finally:
            store.shutdown()
    return append_rate, read_rate


def read_all(store: MessageStore, expected: int) -> float:
    offset = count = 0
    t0 = time.perf_counter()
    while True:
        r = store.reads.get_messages(TOPIC, 0, offset, 32)
        if r.status is not GetStatus.FOUND:
            break
        count += r.count
        offset = r.next_begin_offset
    elapsed = time.perf_counter() - t0
    if count != expected:
        raise RuntimeError(f"read {count} of {expected}")
    return count / elapsed


def _filled_ahead(store: MessageStore, timeout: float = 30.0) -> None:
    pre = store.preallocator
    if pre is None:
        return
    want = store.max_phy_offset + store.config.preallocate_bytes
    deadline = time.monotonic() + timeout
    while pre.filled < want:
        if time.monotonic() > deadline:
            raise RuntimeError(f"the store filled {pre.filled} of {want} bytes ahead")
        time.sleep(0.005)


def append_sync(n: int, writers: int) -> float:
    pool = [make_batch(1, s) for s in range(256)]
    with tempdir() as d:
        store = new_store(Path(d), FlushDiskType.SYNC_FLUSH)
        try:
            assert store.put_messages(pool[0]).status is PutStatus.PUT_OK  # creates the log
            _filled_ahead(store)
            per_writer = n // writers

            async def writer(w: int) -> None:
                for i in range(per_writer):
                    res = await store.put_messages_async(pool[(w + i) % 256])
                    if res.status is not PutStatus.PUT_OK:
                        raise RuntimeError(res.status.name)

            async def all_writers() -> float:
                t0 = time.perf_counter()
                await asyncio.gather(*(writer(w) for w in range(writers)))
                return per_writer * writers / (time.perf_counter() - t0)

            with asyncio.Runner(loop_factory=new_event_loop) as runner:
                return runner.run(all_writers())
        finally:
            store.shutdown()


_GENERATOR = """
import sys, time
sys.path[:0] = {paths!r}
from bench.store_bench import generate_forever
generate_forever({store_dir!r}, {target})
"""


def generate_log(store_dir: Path, target: int) -> None:
    """A writer child fills the log past `target` bytes and keeps writing; it is killed with
    SIGKILL in full flow, like a crash."""
    code = _GENERATOR.format(paths=sys.path, store_dir=str(store_dir), target=target)
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE)
    assert proc.stdout is not None
    line = proc.stdout.readline()
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    if not line.startswith(b"past"):
        raise RuntimeError("log generator failed")


def generate_forever(store_dir: str, target: int) -> None:
    store = MessageStore(StoreConfig(store_dir, store_host="127.0.0.1:10911"))
    store.start()
    pool = [make_batch(32, s) for s in range(64)]
    i = 0
    announced = False
    while True:
        store.put_messages(pool[i % 64])
        i += 1
        if not announced and store.max_phy_offset >= target:
            print("past", store.max_phy_offset, flush=True)
            announced = True


def recovery_runs(log_bytes: int) -> tuple[list[float], list[float], int]:
    """Seconds to start() after SIGKILL: with the checkpoint the writer left, and with none."""
    with tempdir() as d:
        store_dir = Path(d) / "store"
        generate_log(store_dir, log_bytes)
        saved = Path(d) / "checkpoint.saved"
        shutil.copy(store_dir / "checkpoint", saved)
        with_cp: list[float] = []
        without: list[float] = []
        records = 0
        for variant, out in (("checkpoint", with_cp), ("none", without)):
            for _ in range(RUNS):
                # Each run starts from the same crash image: abort file present, the
                # checkpoint as the killed writer left it (or none at all).
                (store_dir / "abort").write_bytes(b"bench")
                cp = store_dir / "checkpoint"
                if variant == "checkpoint":
                    shutil.copy(saved, cp)
                else:
                    cp.unlink(missing_ok=True)
                store = MessageStore(StoreConfig(store_dir, store_host="127.0.0.1:10911"))
                t0 = time.perf_counter()
                store.start()
                out.append(time.perf_counter() - t0)
                if not store.recovered_abnormally:
                    raise RuntimeError("recovery did not run")
                records = store.last_recovery.records if store.last_recovery else 0
                store.shutdown()
        size = store.max_phy_offset
    del records
    return with_cp, without, size


# --- peers -------------------------------------------------------------------------------------
def _record() -> bytes:
    return os.urandom(BODY)


def peer_async(n: int) -> float:
    chunk = _record() * 32
    with tempdir() as d, open(Path(d) / "peer", "wb", buffering=0) as f:
        t0 = last = time.perf_counter()
        for _ in range(n // 32):
            f.write(chunk)
            now = time.perf_counter()
            if now - last >= 1.0:
                os.fsync(f.fileno())
                last = now
        os.fsync(f.fileno())
        return (n // 32) * 32 / (time.perf_counter() - t0)


def peer_sync(n: int, per_write: int) -> float:
    chunk = _record() * per_write
    with tempdir() as d, open(Path(d) / "peer", "wb", buffering=0) as f:
        t0 = time.perf_counter()
        for _ in range(n // per_write):
            f.write(chunk)
            os.fsync(f.fileno())
        return (n // per_write) * per_write / (time.perf_counter() - t0)


def peer_read(n: int) -> float:
    with tempdir() as d:
        path = Path(d) / "peer"
        path.write_bytes(_record() * n)
        with open(path, "rb", buffering=0) as f:
            t0 = time.perf_counter()
            count = 0
            while chunk := f.read(32 * BODY):
                count += len(chunk) // BODY
            return count / (time.perf_counter() - t0)


def peer_recover(log_bytes: int) -> float:
    with tempdir() as d:
        path = Path(d) / "peer"
        block = _record() * 1024
        with open(path, "wb") as f:
            for _ in range(log_bytes // len(block)):
                f.write(block)
        t0 = time.perf_counter()
        with open(path, "rb", buffering=0) as f:
            while chunk := f.read(1 << 20):
                view = memoryview(chunk)
                for o in range(0, len(view), BODY):
                    zlib.crc32(view[o : o + BODY])
        return time.perf_counter() - t0


# --- rows ---------------------------------------------------------------------------------------
def _median(values: list[float]) -> float:
    return round(statistics.median(values), 3) if values else float("nan")


def _row(measurement: str, unit: str, runs: list[float], target: float | None,
         peer_name: str | None = None, peer_runs: list[float] | None = None,
         **extra: Any) -> dict[str, Any]:
    row: dict[str, Any] = {"workload": "store", "measurement": measurement, "unit": unit,
                           "value": _median(runs), "runs": [round(v, 3) for v in runs],
                           "target": target, **extra}
    if peer_name is not None and peer_runs:
        row.update(peer_name=peer_name, peer_value=_median(peer_runs),
                   peer_runs=[round(v, 3) for v in peer_runs])
    return row


def _repeat(fn: Callable[[], float]) -> list[float]:
    return [fn() for _ in range(RUNS)]


def run(quick: bool) -> list[dict[str, Any]]:
    sz = sizes(quick)
    appends: list[float] = []
    reads: list[float] = []
    for _ in range(RUNS):
        a, r = append_async(sz["async"])
        appends.append(a)
        reads.append(r)
    rows = [
        _row("append, ASYNC_FLUSH, batches of 32", "msg/s", appends, 600_000, PEER_ASYNC,
             _repeat(lambda: peer_async(sz["async"]))),
        _row("append, SYNC_FLUSH, 64 asyncio writers (group commit)", "msg/s",
             _repeat(lambda: append_sync(sz["sync64"], 64)), 120_000, PEER_SYNC64,
             _repeat(lambda: peer_sync(sz["sync64"], 64))),
        _row("append, SYNC_FLUSH, 1 writer", "msg/s",
             _repeat(lambda: append_sync(sz["sync1"], 1)), None, PEER_SYNC1,
             _repeat(lambda: peer_sync(sz["sync1"], 1))),
        _row("read through the consume queue, 32 per pull", "msg/s", reads, 1_000_000,
             PEER_READ, _repeat(lambda: peer_read(sz["async"]))),
    ]
    with_cp, without, size = recovery_runs(sz["log"])
    peer = _repeat(lambda: peer_recover(size))
    gib = f"{size / (1 << 30):.2f} GiB"
    rows.append(_row(f"recovery of a {gib} log after SIGKILL (1 s checkpoints)", "s", with_cp,
                     5.0, PEER_RECOVER, peer))
    rows.append(_row(f"recovery of a {gib} log with no checkpoint (every record verified)",
                     "s", without, None, PEER_RECOVER, peer))
    return rows


if __name__ == "__main__":
    import json

    for r in run("--quick" in sys.argv):
        print(json.dumps(r))
