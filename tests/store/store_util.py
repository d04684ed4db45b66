"""Helpers for the store tests: configs with tiny files, message factories, crash images."""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import sparse_copy
from ferrymq.common.record import decode_records
from ferrymq.store import FileIO, GetStatus, MessageStore, StoreConfig, StoreMessage
from waits import wait_until as wait_until  # the store tests import it from here

SMALL_SEGMENT = 64 * 1024


def small_config(store_dir: Path, **overrides: Any) -> StoreConfig:
    values: dict[str, Any] = {
        "commitlog_segment_size": SMALL_SEGMENT,
        "consume_queue_entries_per_file": 64,
        "index_hash_slots": 256,
        "index_max_entries": 1024,
        "flush_interval_ms": 50,
        "checkpoint_interval_ms": 100,
        "cleanup_interval_ms": 3_600_000,  # tests call run_cleanup themselves
        "store_host": "127.0.0.1:10911",
        # The file-layout tests expect the last segment to be the one written; preallocation
        # (a zero-filled segment after it) has its own tests in test_prealloc.py.
        "preallocate_ahead_bytes": 0,
    }
    values.update(overrides)
    return StoreConfig(store_dir, **values)


def msg(topic: str = "T", queue_id: int = 0, body: bytes = b"hello", *, tags: str | None = None,
        keys: str | None = None, uniq: str | None = None, **props: str) -> StoreMessage:
    properties = dict(props)
    if tags is not None:
        properties["TAGS"] = tags
    if keys is not None:
        properties["KEYS"] = keys
    if uniq is not None:
        properties["UNIQ_KEY"] = uniq
    return StoreMessage(topic, queue_id, body, properties, born_timestamp=1_700_000_000_000,
                        born_host=("10.0.0.7", 4321))


class FakeClock:
    def __init__(self, start_ms: int = 1_700_000_000_000) -> None:
        self.now = start_ms

    def __call__(self) -> int:
        return self.now

    def advance(self, ms: int) -> None:
        self.now += ms


def open_store(store_dir: Path, *, clock: Callable[[], int] | None = None,
               disk_usage: Callable[[str], float] | None = None, file_io: FileIO | None = None,
               **overrides: Any) -> MessageStore:
    store = MessageStore(small_config(store_dir, **overrides), clock=clock, disk_usage=disk_usage,
                         file_io=file_io)
    store.start()
    return store


def crash_image(store: MessageStore, dest: Path) -> Path:
    """What a SIGKILL leaves behind: the files as they are now in the page cache, with the
    abort file present. Taken between puts, so no write is half done."""
    sparse_copy.copytree(store.config.root, dest)
    assert (dest / "abort").exists()
    return dest


def crash_stop(store: MessageStore) -> None:
    """As a SIGKILL ends a store: its threads stop and its directory lock goes (the kernel
    would drop it), with no checkpoint and no clean mark, so the next start recovers. Its
    threads must stop: one left running fsyncs this store's files during later tests."""
    store.stop_threads()
    store._dir_lock.release()


def segment_files(store_dir: Path) -> list[Path]:
    return sorted((store_dir / "commitlog").iterdir())


def file_size(path: Path) -> int:
    return os.stat(path).st_size


def queue_bodies(store: MessageStore, topic: str = "T", qid: int = 0) -> list[bytes]:
    """The bodies of every message a queue gives, read from its first offset to its end."""
    out: list[bytes] = []
    offset = store.reads.get_min_offset(topic, qid)
    while True:
        r = store.reads.get_messages(topic, qid, offset, 1000)
        if r.status is not GetStatus.FOUND:
            return out
        out += [m.body for m in decode_records(r.data)]
        offset = r.next_begin_offset


def queue_rebuilt_by_recovery(tmp_path: Path, late: int) -> tuple[Path, list[int]]:
    """A store image whose queue B/0 was lost after a crash: A/0 and B/0 hold A0%d / B0%d
    (4 each) up to a checkpoint, then B/0 L0%d (`late` of them, their positions returned);
    recovery rebuilds B/0 from the checkpoint, so its records sit at offsets 0.. while their
    QUEUEOFFSET fields say 4.."""
    store = open_store(tmp_path / "s", scrub_bytes_per_s=0, checkpoint_interval_ms=3_600_000)
    try:
        for i in range(4):
            store.put_messages([msg("A", 0, b"A0%d" % i * 10)])
            store.put_messages([msg("B", 0, b"B0%d" % i * 10)])
        store.checkpoint(clean=True)
        at = [store.put_messages([msg("B", 0, b"L0%d" % i * 10)]).messages[0].phys_offset
              for i in range(late)]
        image = crash_image(store, tmp_path / "img")
    finally:
        store.shutdown()
    shutil.rmtree(image / "consumequeue" / "B")
    return image, at
