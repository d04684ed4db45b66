"""Child process for the crash test: appends under SYNC_FLUSH forever and prints one line per
acknowledged record: `phys size sha256-of-the-record-bytes`. The parent kills it with SIGKILL.
With an odd seed the puts come from several asyncio writers at once (coalesced into groups),
with an even one from one blocking writer."""

from __future__ import annotations

import asyncio
import hashlib
import random
import sys
from pathlib import Path

from ferrymq.store import (
    FlushDiskType,
    MessageStore,
    PutResult,
    PutStatus,
    StoreConfig,
    StoreMessage,
)

ASYNC_WRITERS = 6


def make_batch(rng: random.Random, seed: int, n: int) -> tuple[list[StoreMessage], int]:
    batch = []
    for _ in range(rng.randint(1, 6)):
        n += 1
        body = rng.randbytes(rng.randint(0, 3000))
        batch.append(StoreMessage(f"T{n % 3}", n % 4, body,
                                  {"UNIQ_KEY": f"{seed}-{n}", "TAGS": "t"}))
    return batch, n


def report(store: MessageStore, res: PutResult) -> None:
    if res.status is not PutStatus.PUT_OK:
        print(f"error {res.status.name} {res.reason}", flush=True)
        return
    lines = []
    for a in res.messages:
        raw = store.reads.read_record(a.phys_offset, a.size)
        assert raw is not None
        lines.append(f"{a.phys_offset} {a.size} {hashlib.sha256(raw).hexdigest()}\n")
    sys.stdout.write("".join(lines))
    sys.stdout.flush()


async def write_async(store: MessageStore, rng: random.Random, seed: int) -> None:
    n = 0

    async def writer() -> None:
        nonlocal n
        while True:
            batch, n = make_batch(rng, seed, n)
            report(store, await store.put_messages_async(batch))

    await asyncio.gather(*(writer() for _ in range(ASYNC_WRITERS)))


def main() -> None:
    store_dir, seed = Path(sys.argv[1]), int(sys.argv[2])
    rng = random.Random(seed)
    store = MessageStore(StoreConfig(
        store_dir, commitlog_segment_size=256 * 1024, consume_queue_entries_per_file=500,
        flush_disk_type=FlushDiskType.SYNC_FLUSH, index_hash_slots=512,
        index_max_entries=4096, checkpoint_interval_ms=rng.choice([20, 100, 1000]),
        store_host="127.0.0.1:10911"))
    store.start()
    print("ready", flush=True)
    if seed % 2:
        asyncio.run(write_async(store, rng, seed))
    n = 0
    while True:
        batch, n = make_batch(rng, seed, n)
        report(store, store.put_messages(batch))


if __name__ == "__main__":
    main()
