"""Child process for the crash test: appends under SYNC_FLUSH forever and prints one line per
acknowledged record: `phys size sha256-of-the-record-bytes`. The parent kills it with SIGKILL."""

from __future__ import annotations

import hashlib
import random
import sys
from pathlib import Path

from ferrymq.store import FlushDiskType, MessageStore, PutStatus, StoreConfig, StoreMessage


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
    n = 0
    while True:
        batch = []
        for _ in range(rng.randint(1, 6)):
            n += 1
            body = rng.randbytes(rng.randint(0, 3000))
            batch.append(StoreMessage(f"T{n % 3}", n % 4, body,
                                      {"UNIQ_KEY": f"{seed}-{n}", "TAGS": "t"}))
        res = store.put_messages(batch)
        if res.status is not PutStatus.PUT_OK:
            print(f"error {res.status.name} {res.reason}", flush=True)
            continue
        lines = []
        for a in res.messages:
            raw = store.read_record(a.phys_offset, a.size)
            assert raw is not None
            lines.append(f"{a.phys_offset} {a.size} {hashlib.sha256(raw).hexdigest()}\n")
        sys.stdout.write("".join(lines))
        sys.stdout.flush()


if __name__ == "__main__":
    main()
