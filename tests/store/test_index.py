"""The key index's batch put, run with both implementations (pure Python and compiled): for the
same keys they must leave byte-identical index files, rolling to new files at the same keys,
and a query must find every key afterwards. Files are real, tiny (few slots, few entries), so
batches fill files in the middle and hash chains are long."""

from __future__ import annotations

import itertools
import shutil
import string
from pathlib import Path
from types import ModuleType

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ferrymq.common.record import _py as RECORD_PY
from ferrymq.store import FileIO, index
from ferrymq.store import _index_py as PY
from ferrymq.store.index import Index
from ferrymq.store.index_layout import KEY_ENTRY, MAX_DIFF, key_hash

try:
    from ferrymq.common.record import _crecord as RECORD_C  # type: ignore[attr-defined]
    from ferrymq.store import _cindex as C  # type: ignore[attr-defined]
except ImportError:
    C = RECORD_C = None

IMPLS: list[ModuleType] = [PY] + ([C] if C is not None else [])
# The record codec's implementation of the same kind (it makes the key entries).
RECORD = {PY: RECORD_PY, C: RECORD_C}
needs_compiled = pytest.mark.skipif(C is None, reason="the compiled index is not built in this "
                                                      "tree (make venv builds it)")

topics = st.sampled_from(["T", "Orders", "%RETRY%g", "\u4e2d"])
key_text = st.text(alphabet=string.ascii_letters[:4] + " #\u00e9\U0001f600", max_size=10)
# (topic, KEYS, UNIQ_KEY, step in position, step in time): time may step back, or jump past
# what a file's time field holds.
records = st.tuples(topics, st.none() | key_text, st.none() | key_text, st.integers(1, 5000),
                    st.sampled_from([0, 0, 1, 7, -3, MAX_DIFF // 3, MAX_DIFF + 1]))
batches = st.lists(st.lists(records, min_size=1, max_size=12), min_size=1, max_size=8)


def _files(directory: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(directory.iterdir())}


def _fill(impl: ModuleType, directory: Path, plan: list[list[tuple[str, str | None, str | None,
                                                                    int, int]]],
          monkeypatch: pytest.MonkeyPatch) -> tuple[Index, list[tuple[str, str, int]]]:
    """Index the batches as the store does (ensure_room, then one put per batch); returns the
    index and every (topic, key, phys) put."""
    monkeypatch.setattr(index, "put_keys", impl.put_keys)
    idx = Index(directory, slots=5, max_entries=9, io=FileIO())
    idx.load()
    phys, ts = 1000, 1_700_000_000_000
    put: list[tuple[str, str, int]] = []
    for batch in plan:
        entries = bytearray()
        for topic, keys, uniq, dphys, dts in batch:
            phys += dphys
            ts += dts
            RECORD[impl].key_entries(entries, topic, keys, uniq, phys, ts)
            put += [(topic, k, phys) for k in (keys or "").split(" ") if k]
            if uniq:
                put.append((topic, uniq, phys))
        if entries:
            _h, first_phys, first_ts = KEY_ENTRY.unpack_from(entries, 0)
            idx.ensure_room(1, first_phys, first_ts)
            idx.put_entries(entries, 0, 0)
    return idx, put


@given(plan=batches)
@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_both_implementations_write_the_same_files_and_every_key_is_found(
        tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch,
        plan: list[list[tuple[str, str | None, str | None, int, int]]]) -> None:
    results = []
    for impl in IMPLS:
        directory = tmp_path_factory.mktemp(impl.IMPLEMENTATION)
        idx, put = _fill(impl, directory, plan, monkeypatch)
        try:
            for topic, key, phys in put:
                assert phys in idx.query(topic, key, 10_000, 0, 2**62), (impl, topic, key)
            results.append(_files(directory))
        finally:
            idx.close()
    assert all(r == results[0] for r in results[1:])


@pytest.mark.parametrize("impl", IMPLS, ids=[m.IMPLEMENTATION for m in IMPLS])
@pytest.mark.parametrize("slots", [1, 3])
def test_keys_of_a_put_cut_by_a_kill_leave_the_older_keys_findable(
        impl: ModuleType, slots: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A kill between a put's entries (and the slots pointing at them) and its header (the
    count, written last) leaves slots pointing past the count. Recovery puts those keys again:
    every key put before must still be found. Without the repair at load, the chains those
    slots headed were cut and the older keys were lost to queries (a SIGKILL test found it)."""
    monkeypatch.setattr(index, "put_keys", impl.put_keys)

    def put(idx: Index, first: int, n: int) -> None:
        entries = bytearray()
        for i in range(first, first + n):
            entries += KEY_ENTRY.pack(key_hash("T", f"k{i}"), 100 * i, i)
        idx.ensure_room(1, 100 * first, 1000 + first)
        idx.put_entries(entries, 0, 1000)

    live = tmp_path / "live"
    idx = Index(live, slots=slots, max_entries=40, io=FileIO())
    idx.load()
    put(idx, 0, 6)
    (path,) = live.iterdir()
    header = path.read_bytes()[:40]
    put(idx, 6, 4)  # the put the kill cuts: entries and slots written, then...
    cut = header + path.read_bytes()[40:]  # ...its header never was
    idx.close()
    crashed = tmp_path / "crashed"
    crashed.mkdir()
    (crashed / path.name).write_bytes(cut)
    idx = Index(crashed, slots=slots, max_entries=40, io=FileIO())
    idx.load()
    assert (idx.files[0].count, idx.files[0].end_phys) == (7, 500)
    put(idx, 6, 4)  # recovery indexes the records past end_phys again
    put(idx, 10, 2)  # and the store goes on
    try:
        for i in range(12):
            assert idx.query("T", f"k{i}", 5, 0, 2**62) == [100 * i], i
    finally:
        idx.close()


@pytest.mark.parametrize("impl", IMPLS, ids=[m.IMPLEMENTATION for m in IMPLS])
def test_a_batch_larger_than_a_file_rolls_where_the_file_fills(
        impl: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Nine entries per file, entry 0 unused: a batch of 20 keys fills 8, 8 and 4, each new
    file named by the commit-log offset of its first key."""
    monkeypatch.setattr(index, "put_keys", impl.put_keys)
    idx = Index(tmp_path, slots=3, max_entries=9, io=FileIO())
    idx.load()
    entries = bytearray()
    for i in range(20):
        entries += KEY_ENTRY.pack(key_hash("T", f"k{i}"), 100 * i, 5)
    idx.ensure_room(1, 7, 1000)
    idx.put_entries(entries, 7, 1000)
    assert [p.name for p in sorted(tmp_path.iterdir())] == [
        f"{7:020d}", f"{807:020d}", f"{1607:020d}"]
    assert [f.count - 1 for f in idx.files] == [8, 8, 4]
    for i in range(20):
        assert idx.query("T", f"k{i}", 5, 0, 2**62) == [7 + 100 * i]
    assert (idx.files[0].begin_ts, idx.files[0].end_ts) == (1005, 1005)
    idx.close()


@pytest.mark.parametrize("impl", IMPLS, ids=[m.IMPLEMENTATION for m in IMPLS])
def test_key_entries_split_keys_on_spaces_and_hash_topic_and_key(impl: ModuleType) -> None:
    out = bytearray(b"x" * 24)
    impl = RECORD[impl]
    assert impl.key_entries(out, "T\u00e9", "  a b\u4e2d  a ", "u1", 42, 9) == 4
    got = [KEY_ENTRY.unpack_from(out, 24 * i) for i in range(1, 5)]
    assert got == [(key_hash("T\u00e9", k), 42, 9) for k in ("a", "b\u4e2d", "a", "u1")]
    assert impl.key_entries(out, "T", None, "", 1, 1) == 0 and len(out) == 5 * 24


@pytest.mark.parametrize("impl", IMPLS, ids=[m.IMPLEMENTATION for m in IMPLS])
def test_malformed_input_is_refused_before_writing(impl: ModuleType, tmp_path: Path) -> None:
    idx = Index(tmp_path, slots=3, max_entries=9, io=FileIO())
    idx.load()
    idx.ensure_room(1, 0, 1)
    f = idx.files[0]
    before = bytes(f.mm)
    with pytest.raises(ValueError):
        impl.put_keys(f, KEY_ENTRY.pack(-1, 0, 0), 0, 0, 0)
    with pytest.raises(ValueError):
        impl.put_keys(f, KEY_ENTRY.pack(1, 0, 0), 2, 0, 0)
    assert bytes(f.mm) == before and f.count == 1
    idx.close()


@needs_compiled
def test_the_environment_selects_the_implementation() -> None:
    import subprocess
    import sys
    code = "import ferrymq.store.index as i; print(i.IMPLEMENTATION)"
    for env, expected in (("", "cython"), ("1", "python")):
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                             check=True, env={**__import__("os").environ,
                                              "FERRYMQ_NO_EXTENSIONS": env}).stdout.strip()
        assert out == expected


def test_store_queries_find_every_key_of_batches_and_of_a_slave(tmp_path: Path) -> None:
    """Through the store: keys put in batches (several per message) are found by query, on
    the store itself, after a restart that recovers without a checkpoint, and on a slave that
    applied the store's log."""
    from store_util import msg, small_config

    from ferrymq.store import MessageStore

    store = MessageStore(small_config(tmp_path / "m", index_max_entries=64, index_hash_slots=7))
    store.start()
    slave = MessageStore(small_config(tmp_path / "s", index_max_entries=64, index_hash_slots=7))
    slave.start()
    try:
        expected: dict[tuple[str, str], list[int]] = {}
        uniq: dict[tuple[str, str], int] = {}
        counter = itertools.count()
        for b in range(30):
            batch = [msg("T" if i % 3 else "U", keys=f"k{b} s{n % 7}", uniq=f"u{n}")
                     for i in range(5) for n in [next(counter)]]
            res = store.put_messages(batch)
            assert res.ok
            for m, a in zip(batch, res.messages, strict=True):
                assert isinstance(m.properties, dict)
                for k in m.properties["KEYS"].split(" "):
                    expected.setdefault((m.topic, k), []).append(a.phys_offset)
                uniq[(m.topic, m.properties["UNIQ_KEY"])] = a.phys_offset
        pos = 0
        while (span := store.replica.read_span(pos, 4096)) is not None:
            slave.replica.append_replicated(span)
            pos = span.next_pos
        # Recovery with neither index nor checkpoint re-indexes the whole log.
        store.shutdown()
        shutil.rmtree(tmp_path / "m" / "index")
        (tmp_path / "m" / "checkpoint").unlink()
        (tmp_path / "m" / "abort").touch()
        store = MessageStore(small_config(tmp_path / "m", index_max_entries=64,
                                          index_hash_slots=7))
        store.start()
        assert store.recovered_abnormally
        for s in (store, slave):
            for (topic, key), phys in expected.items():
                assert s.reads.query_by_key(topic, key, 1000) == sorted(phys), (topic, key)
            for (topic, key), at in uniq.items():
                assert s.reads.query_by_uniq_key(topic, key) == [at], (topic, key)
            assert len(s.index.files) > 1  # the tiny files rolled
    finally:
        store.shutdown()
        slave.shutdown()


# --- a pull's walk over consume-queue entries ------------------------------------------------

def _general_walk(raw: bytes, max_nums: int, max_bytes: int, min_phys: int
                  ) -> tuple[int, int, list[list[int]]] | None:
    """What reads.py's general loop takes from unfiltered entries, written out plainly: the
    reference both implementations of scan_run must match."""
    from ferrymq.common.record.layout import CQ_ENTRY

    taken: list[tuple[int, int]] = []
    for phys, size, _tag in CQ_ENTRY.iter_unpack(raw):
        if taken and (len(taken) >= max_nums or sum(s for _, s in taken) + size > max_bytes):
            break
        if phys < min_phys:
            return None
        taken.append((phys, size))
    runs: list[list[int]] = []
    for phys, size in taken:
        if runs and runs[-1][1] == phys:
            runs[-1][1] += size
        else:
            runs.append([phys, phys + size])
    return len(taken), sum(s for _, s in taken), runs


_entries = st.lists(st.tuples(st.integers(0, 3), st.integers(1, 300), st.integers(-5, 5)),
                    min_size=1, max_size=40)


@pytest.mark.parametrize("impl", IMPLS, ids=[m.IMPLEMENTATION for m in IMPLS])
@settings(max_examples=300, deadline=None)
@given(entries=_entries, start=st.integers(0, 10_000), max_nums=st.integers(1, 50),
       max_bytes=st.integers(1, 5000), min_phys=st.integers(0, 12_000))
def test_scan_run_takes_what_the_general_walk_takes(
    impl: ModuleType, entries: list[tuple[int, int, int]], start: int, max_nums: int,
    max_bytes: int, min_phys: int,
) -> None:
    from ferrymq.common.record.layout import CQ_ENTRY

    # Records mostly back to back (gap 0), sometimes with another queue's records between.
    raw = bytearray()
    phys = start
    for gap, size, tag in entries:
        phys += gap * 97
        raw += CQ_ENTRY.pack(phys, size, tag)
        phys += size
    got = impl.scan_run(bytes(raw), max_nums, max_bytes, min_phys)
    assert got == _general_walk(bytes(raw), max_nums, max_bytes, min_phys)
    assert impl.scan_run(bytes(raw[:-1]), max_nums, max_bytes, min_phys) is None  # torn
    assert impl.scan_run(b"", max_nums, max_bytes, min_phys) is None


@pytest.mark.parametrize("impl", IMPLS, ids=[m.IMPLEMENTATION for m in IMPLS])
@pytest.mark.parametrize("bad", [(1200, 0), (1200, -50), ((1 << 63) - 100, 200)],
                         ids=["size-0", "size-negative", "end-past-int64"])
def test_scan_run_leaves_damaged_entries_to_the_general_walk(
    impl: ModuleType, bad: tuple[int, int]
) -> None:
    from ferrymq.common.record.layout import CQ_ENTRY

    # A consume queue carries no checksum. An entry whose size is not positive starts its
    # record at or past its run's end (the read guard's test of whole runs would miss it); one
    # whose end passes int64 wrapped in the compiled walk (a run ending below its start) while
    # the Python twin kept the exact sum. The general walk, which checks records, takes both.
    raw = CQ_ENTRY.pack(1000, 200, 0) + CQ_ENTRY.pack(*bad, 0)
    assert impl.scan_run(raw, 2, 1 << 20, 0) is None
    # Not taken (max_nums), the entry is not looked at: the first alone is one run.
    assert impl.scan_run(raw, 1, 1 << 20, 0) == (1, 200, [[1000, 1200]])
    # An end at int64's maximum still fits: both twins take it, with the same run.
    last = (1 << 63) - 1 - 300
    fits = CQ_ENTRY.pack(1000, 200, 0) + CQ_ENTRY.pack(last, 300, 0)
    assert impl.scan_run(fits, 2, 1 << 20, 0) == (2, 500, [[1000, 1200], [last, last + 300]])


_top = (1 << 63) - 1  # phys + size near it: the compiled walk's int64 arithmetic
_wild = st.lists(st.tuples(st.integers(-(1 << 63), _top) | st.integers(0, 5000)
                           | st.integers(_top - (1 << 31), _top),
                           st.integers(-(1 << 31), (1 << 31) - 1) | st.integers(0, 300),
                           st.integers(-(1 << 63), (1 << 63) - 1)), max_size=6)


@pytest.mark.skipif(C is None, reason="the compiled index is not built in this tree")
@settings(max_examples=500, deadline=None)
@given(entries=_wild, max_nums=st.integers(1, 1 << 40), max_bytes=st.integers(0, 1 << 40),
       min_phys=st.integers(0, (1 << 63) - 1) | st.integers(0, 5000))
def test_scan_run_twins_agree_on_any_entries(entries: list[tuple[int, int, int]], max_nums: int,
                                             max_bytes: int, min_phys: int) -> None:
    # Any bytes a damaged consume queue may hold: the two walks give the same answer.
    from ferrymq.common.record.layout import CQ_ENTRY

    raw = b"".join(CQ_ENTRY.pack(*e) for e in entries)
    assert C.scan_run(raw, max_nums, max_bytes, min_phys) == PY.scan_run(
        raw, max_nums, max_bytes, min_phys)
