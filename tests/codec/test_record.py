"""The record codec, run against every implementation (pure Python and compiled): round trips,
the store's encode-then-patch against the one-record encoder, lazy views, and cross-checks that
both implementations give the same bytes, objects and errors for the same input."""

from __future__ import annotations

import ast
import itertools
import os
import pickle
import string
import subprocess
import sys
import zlib
from array import array
from types import ModuleType
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from record_impls import OTHERS, PARAMS, PY, C

from ferrymq.common.message import MessageBatchItem, MessageExt
from ferrymq.common.props import PropertyError, properties_to_string, string_to_properties
from ferrymq.common.record import MARK_TIMER, MARK_TRANSACTION, MessageDecodeError, RecordEncodeError, pack_host
from ferrymq.common.record.layout import CQ_ENTRY, KEY_ENTRY, offset_msg_id
from ferrymq.store.encoder import Encoder, encode, place
from ferrymq.store.index_layout import key_hash
from ferrymq.store.model import StoreMessage

topics = st.text(alphabet=string.ascii_letters + string.digits + "%|_-", min_size=1, max_size=40)
prop_text = st.text(
    alphabet=st.characters(blacklist_characters="\x01\x02", blacklist_categories=("Cs",)),
    min_size=0, max_size=20,
)
prop_names = prop_text.filter(bool)
props = st.dictionaries(prop_names, prop_text, max_size=6)
# Keys as clients send them: several separated by spaces (runs of them too), any characters.
key_text = st.text(alphabet=st.sampled_from(" ab#\u00e9\u4e2d\U0001f600"), max_size=12)
keyed_props = st.builds(lambda p, k: {**p, **k}, props, st.fixed_dictionaries(
    {}, optional={"KEYS": key_text, "UNIQ_KEY": key_text}))
i32 = st.integers(-(2**31), 2**31 - 1)
i64 = st.integers(-(2**63), 2**63 - 1)
ports = st.integers(0, 65535)
v4 = st.ip_addresses(v=4).map(str)
hosts = st.one_of(v4, st.ip_addresses(v=6).map(str))

params = pytest.mark.parametrize("impl", PARAMS)


def fields(m: MessageExt) -> tuple[Any, ...]:
    return (m.topic, m.body, m.properties, m.flag, m.queue_id, m.queue_offset, m.commit_log_offset,
            m.sys_flag, m.born_timestamp, m.born_host, m.store_timestamp, m.store_host,
            m.reconsume_times, m.prepared_transaction_offset, m.body_crc, m.store_size, m.msg_id,
            m.offset_msg_id, m.broker)


def outcome(fn: Any, *args: Any, **kw: Any) -> Any:
    """What a call gives, or the type and fields of what it raises."""
    try:
        return ("ok", fn(*args, **kw))
    except MessageDecodeError as exc:
        return ("MessageDecodeError", exc.position, exc.reason)
    except (RecordEncodeError, PropertyError, ValueError) as exc:
        return (type(exc).__name__, str(exc))


def records_outcome(impl: ModuleType, buf: bytes) -> Any:
    got = outcome(impl.decode_records, buf, broker="b")
    if got[0] == "ok":
        return ("ok", [fields(m) for m in got[1]])
    return got


@params
@given(topic=topics, qid=i32, flag=i32, body=st.binary(max_size=2000), properties=props,
       born_ts=i64, store_ts=i64, born=hosts, born_port=ports, store=hosts, store_port=ports,
       reconsume=i32, prepared=i64, qo=i64, phys=st.integers(0, 2**62))
@settings(max_examples=150, deadline=None)
def test_encode_decode_round_trip(impl: ModuleType, topic: str, qid: int, flag: int, body: bytes,
                                  properties: dict[str, str], born_ts: int, store_ts: int,
                                  born: str, born_port: int, store: str, store_port: int,
                                  reconsume: int, prepared: int, qo: int, phys: int) -> None:
    store_raw = pack_host(store, store_port)
    raw = impl.encode_record(
        topic=topic.encode(), queue_id=qid, flag=flag, body=body,
        properties=properties_to_string(properties).encode(), sys_flag=0,
        born_timestamp=born_ts, born_host=pack_host(born, born_port), store_timestamp=store_ts,
        store_host=store_raw, reconsume_times=reconsume,
        prepared_transaction_offset=prepared, queue_offset=qo, physical_offset=phys)
    m = impl.decode_record(raw, check_crc=True)
    assert (m.topic, m.queue_id, m.flag, m.body) == (topic, qid, flag, body)
    assert m.properties == properties
    assert (m.born_timestamp, m.store_timestamp) == (born_ts, store_ts)
    assert (m.queue_offset, m.commit_log_offset, m.store_size) == (qo, phys, len(raw))
    assert (m.reconsume_times, m.prepared_transaction_offset) == (reconsume, prepared)
    assert m.born_host.rsplit(":", 1)[1] == str(born_port)
    assert m.store_host.rsplit(":", 1)[1] == str(store_port)
    assert m.offset_msg_id == offset_msg_id(store_raw, phys)
    assert m.msg_id == properties.get("UNIQ_KEY") or m.offset_msg_id
    for other in OTHERS[impl]:
        assert other.encode_record(
            topic=topic.encode(), queue_id=qid, flag=flag, body=body,
            properties=properties_to_string(properties).encode(), sys_flag=0,
            born_timestamp=born_ts, born_host=pack_host(born, born_port),
            store_timestamp=store_ts, store_host=store_raw, reconsume_times=reconsume,
            prepared_transaction_offset=prepared, queue_offset=qo, physical_offset=phys) == raw
        assert fields(other.decode_record(raw, check_crc=True)) == fields(m)


@params
@given(properties=props)
def test_properties_round_trip(impl: ModuleType, properties: dict[str, str]) -> None:
    raw = impl.properties_encode(properties)
    assert raw == properties_to_string(properties).encode()
    assert impl.properties_decode(raw) == properties == string_to_properties(raw.decode())
    assert impl.properties_scan(raw) == tuple(properties.get(k) for k in
                                              ("TAGS", "KEYS", "UNIQ_KEY", "DELAY"))


@params
@given(raw=st.binary(max_size=80) | st.lists(st.sampled_from(
    [b"\x01", b"\x02", b"TAGS", b"KEYS", b"UNIQ_KEY", b"DELAY", b"a", b"\xff", b"\xc3\xa9"]),
    max_size=20).map(b"".join))
def test_lenient_property_decoding_agrees(impl: ModuleType, raw: bytes) -> None:
    expected = string_to_properties(raw.decode("utf-8", "replace"))
    assert impl.properties_decode(raw) == expected
    assert impl.properties_scan(raw) == tuple(expected.get(k) for k in
                                              ("TAGS", "KEYS", "UNIQ_KEY", "DELAY"))


@params
def test_separator_in_a_property_is_refused(impl: ModuleType) -> None:
    for bad in ({"a\x01": "v"}, {"a": "v\x02"}, {"a": "ok", "b\x02c": "v"}):
        with pytest.raises(PropertyError):
            impl.properties_encode(bad)


@params
@given(st.lists(st.tuples(i32, st.binary(max_size=300), props), max_size=8))
def test_batch_round_trip(impl: ModuleType, items: list[tuple[int, bytes, dict[str, str]]]) -> None:
    batch = [MessageBatchItem(flag, body, p) for flag, body, p in items]
    raw = impl.encode_batch(batch)
    split = impl.split_batch(raw)
    assert [(f, b, impl.properties_decode(p)) for f, b, p in split] == items
    for other in OTHERS[impl]:
        assert other.encode_batch(batch) == raw
        assert other.split_batch(raw) == split


@params
@given(st.binary(max_size=120))
def test_malformed_batches_fail_alike(impl: ModuleType, data: bytes) -> None:
    got = outcome(impl.split_batch, data)
    assert got[0] in ("ok", "MessageDecodeError")
    for other in OTHERS[impl]:
        assert outcome(other.split_batch, data) == got


messages = st.builds(
    StoreMessage, topic=topics, queue_id=st.integers(0, 7), body=st.binary(max_size=1500),
    properties=keyed_props | keyed_props.map(lambda p: properties_to_string(p).encode()),
    flag=i32, sys_flag=st.sampled_from([0, 1, 0x2]), born_timestamp=i64,
    born_host=st.tuples(hosts, ports), reconsume_times=st.integers(0, 16),
    prepared_transaction_offset=i64,
)


@given(msgs=st.lists(messages, min_size=1, max_size=10), pos=st.integers(0, 2**40),
       store_ts=st.integers(0, 2**41), store=hosts)
@settings(max_examples=150, deadline=None)
def test_store_encoder_matches_codec(msgs: list[StoreMessage], pos: int, store_ts: int,
                                     store: str) -> None:
    enc = Encoder((store, 10911), 1 << 22, (1000, 5000))
    out = encode(enc, msgs)
    place(enc, out, pos, store_ts, lambda q: 100 + q[1])
    decoded = PY.decode_records(bytes(out.data), decompress=False)
    assert len(decoded) == len(msgs) == len(out.appended)
    seen: dict[tuple[str, int], int] = {}
    for m, d, a in zip(msgs, decoded, out.appended, strict=True):
        key = (m.topic, m.queue_id)
        expected_qo = seen.get(key, 100 + m.queue_id)
        seen[key] = expected_qo + 1
        expected_props = (m.properties if isinstance(m.properties, dict)
                          else string_to_properties(m.properties.decode()))
        assert (d.topic, d.queue_id, d.body, d.properties) == (m.topic, m.queue_id, m.body,
                                                                expected_props)
        assert (d.flag, d.born_timestamp, d.reconsume_times) == (m.flag, m.born_timestamp,
                                                                  m.reconsume_times)
        assert d.sys_flag & 0x3 == m.sys_flag & 0x3
        assert d.prepared_transaction_offset == m.prepared_transaction_offset
        assert (d.commit_log_offset, d.queue_offset, d.store_timestamp) == (
            a.phys_offset, expected_qo, store_ts)
        assert a.queue_offset == expected_qo and a.size == d.store_size
        assert d.offset_msg_id == a.offset_msg_id
        # the CRC the store wrote is the one the codec checks
        PY.decode_record(bytes(out.data), a.phys_offset - pos, check_crc=True, decompress=False)
    # One key-index entry per key (KEYS split on spaces, then UNIQ_KEY), hashed as the index
    # hashes a query, at the record's offset within the batch.
    expected_keys = bytearray()
    for m, a in zip(msgs, out.appended, strict=True):
        mp = (m.properties if isinstance(m.properties, dict)
              else string_to_properties(m.properties.decode()))
        names = [k for k in mp.get("KEYS", "").split(" ") if k]
        if mp.get("UNIQ_KEY"):
            names.append(mp["UNIQ_KEY"])
        for k in names:
            expected_keys += KEY_ENTRY.pack(key_hash(m.topic, k), a.phys_offset - pos, 0)
    assert out.keys == expected_keys and out.nkeys == len(expected_keys) // KEY_ENTRY.size


@params
@given(msgs=st.lists(messages, min_size=1, max_size=6), pos=st.integers(0, 2**40),
       moved=st.integers(0, 2**40), store_ts=st.integers(0, 2**41), store=hosts)
@settings(max_examples=80, deadline=None)
def test_patching_for_another_position_equals_encoding_there(
        impl: ModuleType, msgs: list[StoreMessage], pos: int, moved: int, store_ts: int,
        store: str) -> None:
    """A segment roll-over re-patches the same bytes: the result must be what a fresh encode
    for the new position gives, in both implementations."""
    enc = Encoder((store, 10911), 1 << 22, (1000, 5000))
    args = (pack_host(store, 10911), 1 << 22, enc.topic_raw, lambda h: pack_host(*h),
            lambda t: len(t), "SCHEDULE_TOPIC_XXXX")
    data, sizes, tags, _keys, _delays = impl.encode_messages(msgs, *args)
    impl.place_messages(data, msgs, sizes, tags, pos, store_ts, lambda q: 7, "P", tuple)
    entries, appended = impl.place_messages(data, msgs, sizes, tags, moved, store_ts,
                                            lambda q: 7, "P", tuple)
    fresh, *_ = impl.encode_messages(msgs, *args)
    fresh_entries, fresh_appended = impl.place_messages(fresh, msgs, sizes, tags, moved, store_ts,
                                                        lambda q: 7, "P", tuple)
    assert (data, entries, appended) == (fresh, fresh_entries, fresh_appended)
    for other in OTHERS[impl]:
        odata, osizes, otags, okeys, odelays = other.encode_messages(msgs, *args)
        assert (osizes, otags, okeys, odelays) == (sizes, tags, _keys, _delays)
        assert other.place_messages(odata, msgs, sizes, tags, moved, store_ts, lambda q: 7, "P",
                                    tuple) == (entries, appended)
        assert odata == data


@params
def test_encoder_refuses_what_the_store_cannot_write(impl: ModuleType) -> None:
    args = (pack_host("127.0.0.1", 1), 200, str.encode, lambda h: pack_host(*h), len, "S")
    big = StoreMessage("t", 0, b"x" * 200)
    bad_props = StoreMessage("t", 0, b"", {"a": "b\x01"})
    huge_props = StoreMessage("t", 0, b"", b"a\x01" + b"v" * 40000 + b"\x02")
    for msg in (big, bad_props, huge_props):
        got = outcome(impl.encode_messages, [msg], *args)
        assert got[0] == "RecordEncodeError"
        for other in OTHERS[impl]:
            assert outcome(other.encode_messages, [msg], *args) == got


def _sample_records() -> bytes:
    out = []
    for i, (born, store) in enumerate([("127.0.0.1", "10.0.0.1"), ("::1", "127.0.0.1"),
                                       ("127.0.0.1", "fe80::1")]):
        out.append(PY.encode_record(
            topic=b"T", queue_id=i, flag=0, body=b"body%d" % i,
            properties=b"UNIQ_KEY\x01id%d\x02TAGS\x01a\x02" % i if i != 1 else b"",
            sys_flag=0, born_timestamp=5, born_host=pack_host(born, 9), store_timestamp=6,
            store_host=pack_host(store, 10911), queue_offset=i, physical_offset=100 * i))
    return b"".join(out)


@params
@given(data=st.binary(max_size=300), cut=st.integers(0, 400), flip=st.integers(0, 400),
       byte=st.integers(0, 255))
@settings(max_examples=300, deadline=None)
def test_malformed_pull_bodies_fail_alike(impl: ModuleType, data: bytes, cut: int, flip: int,
                                          byte: int) -> None:
    for buf in (data, _damaged(_sample_records(), cut, flip, byte)):
        got = records_outcome(impl, buf)
        assert got[0] in ("ok", "MessageDecodeError")
        for other in OTHERS[impl]:
            assert records_outcome(other, buf) == got


def _damaged(buf: bytes, cut: int, flip: int, byte: int) -> bytes:
    b = bytearray(buf[: len(buf) - cut % 64])
    if b:
        b[flip % len(b)] = byte
    return bytes(b)


@params
def test_views_decode_lazily_and_pickle_as_plain_messages(impl: ModuleType) -> None:
    msgs = impl.decode_records(_sample_records(), broker="b")
    assert [m.msg_id for m in msgs] == ["id0", msgs[1].offset_msg_id, "id2"]
    assert msgs[1].born_host == "::1:9" and msgs[2].store_host == "fe80::1:10911"
    assert msgs[0].tags == "a" and msgs[1].properties == {}
    msgs[0].properties["X"] = "y"
    assert msgs[0].properties["X"] == "y"
    copy = pickle.loads(pickle.dumps(msgs[0]))
    assert type(copy) is MessageExt and fields(copy) == fields(msgs[0])


@pytest.mark.parametrize("env", ["", "1"])
def test_the_environment_selects_the_implementation(env: str) -> None:
    """FERRYMQ_NO_EXTENSIONS=1 gives pure Python; otherwise the compiled codec when built."""
    code = "import ferrymq.common.record as r; print(r.IMPLEMENTATION)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={**os.environ, "FERRYMQ_NO_EXTENSIONS": env}).stdout.strip()
    assert out == ("python" if env or C is None else "cython")


def _to_messages(impl: ModuleType, buf: bytes, value: str = "Cluster") -> Any:
    return outcome(impl.batch_to_messages, buf, StoreMessage, "T", 3, 8, 5, "1.2.3.4:5", 2,
                   "CLUSTER", value)


@params
@given(entries=st.lists(st.tuples(i32, st.binary(max_size=200), st.lists(st.sampled_from(
    [b"TAGS\x01a", b"UNIQ_KEY\x01u", b"CLUSTER\x01old", b"DELAY\x013", b"x\x01DELAY", b"k\x01",
     b"noseparator", b"\xff\x01\xfe", b"TRAN_MSG\x01true", b"xTRAN_MSG\x01true", b"TIMER_DELAY_SEC\x013",
     b"a\x01TIMER_", b"TIMER_"]), max_size=4), st.booleans()), max_size=6))
@settings(max_examples=200, deadline=None)
def test_batch_to_messages_keeps_property_bytes_and_adds_the_cluster(
        impl: ModuleType, entries: list[tuple[int, bytes, list[bytes], bool]]) -> None:
    # Entries written by hand: property bytes as any producer might send them.
    fixed = bytearray()
    for flag, b, items, closed in entries:
        raw = b"\x02".join(items) + (b"\x02" if closed and items else b"")
        fixed += (20 + len(b) + 2 + len(raw)).to_bytes(4, "big") + bytes(8)
        fixed += flag.to_bytes(4, "big", signed=True) + len(b).to_bytes(4, "big") + b
        fixed += len(raw).to_bytes(2, "big") + raw
    got = _to_messages(impl, bytes(fixed))
    delayed = any(any(i.startswith(b"DELAY\x01") for i in items) for _, _, items, _ in entries)
    if delayed:
        assert got == ("RecordEncodeError", "a batch cannot carry delayed messages")
    else:
        msgs, marks = got[1]
        # A property named TRAN_MSG, an item that starts with TIMER_: the batch's marks.
        items = [i for _, _, its, _ in entries for i in its]
        assert marks == ((MARK_TRANSACTION if any(i.startswith(b"TRAN_MSG\x01") for i in items) else 0)
                         | (MARK_TIMER if any(i.startswith(b"TIMER_") for i in items) else 0))
        assert len(msgs) == len(entries)
        for m, (flag, b, _items, _closed) in zip(msgs, entries, strict=True):
            assert (m.topic, m.queue_id, m.body, m.flag, m.sys_flag, m.born_timestamp,
                    m.born_host, m.reconsume_times) == ("T", 3, b, flag, 8, 5, "1.2.3.4:5", 2)
            assert PY.properties_decode(m.properties)["CLUSTER"] == "Cluster"
    for other in OTHERS[impl]:
        assert _to_messages(other, bytes(fixed)) == got
    # check_batch finds what batch_to_messages does, building nothing.
    checked = outcome(impl.check_batch, bytes(fixed))
    assert checked == (got if got[0] != "ok" else ("ok", (len(got[1][0]), got[1][1])))


@params
@given(st.binary(max_size=120))
def test_batch_to_messages_fails_on_malformed_bodies_like_split_batch(impl: ModuleType,
                                                                     data: bytes) -> None:
    got = _to_messages(impl, data)
    split = outcome(impl.split_batch, data)
    if split[0] != "ok":
        assert got == split
    checked = outcome(impl.check_batch, data)
    assert checked == (got if got[0] != "ok" else ("ok", (len(got[1][0]), got[1][1])))
    for other in OTHERS[impl]:
        assert _to_messages(other, data) == got
    assert _to_messages(impl, data, "bad\x01value")[0] == "PropertyError"


@params
@given(data=st.binary(max_size=300), cut=st.integers(0, 400), flip=st.integers(0, 400),
       byte=st.integers(0, 255))
@settings(max_examples=300, deadline=None)
def test_record_starts_agree_and_match_the_records(impl: ModuleType, data: bytes, cut: int, flip: int,
                                                   byte: int) -> None:
    good = _sample_records()
    starts = impl.record_starts(good)
    assert array("i", starts).tolist() == [0, *itertools.accumulate(
        m.store_size for m in impl.decode_records(good))][:-1]
    for buf in (data, _damaged(good, cut, flip, byte)):
        got = outcome(impl.record_starts, buf)
        assert got[0] in ("ok", "MessageDecodeError")
        for other in OTHERS[impl]:
            assert outcome(other.record_starts, buf) == got


@params
def test_place_interleaved_queues(impl: ModuleType) -> None:
    """A batch whose messages go back and forth between queues (the timer's deliveries):
    every queue's offsets continue where its last message left them, its entries in order."""
    msgs = [StoreMessage("T" if q < 3 else "U", q % 3, b"x" * q, {"UNIQ_KEY": f"u{i}"})
            for i, q in enumerate([0, 1, 0, 0, 1, 2, 4, 0])]
    args = (pack_host("127.0.0.1", 1), 1 << 20, str.encode, lambda h: pack_host(*h), len, "S")
    data, sizes, tags, _keys, _delays = impl.encode_messages(msgs, *args)
    entries, appended = impl.place_messages(data, msgs, sizes, tags, 500, 9,
                                            lambda q: 10 * (q[1] + 1), "AB", tuple)
    assert [a[2] for a in appended] == [10, 20, 11, 12, 21, 30, 20, 13]
    phys = list(itertools.accumulate(sizes, initial=500))
    assert [a[0] for a in appended] == phys[:-1]
    assert [a[4] for a in appended] == [f"AB{p:016X}" for p in phys[:-1]]
    from ferrymq.common.record.layout import CQ_ENTRY
    assert entries == {
        q: b"".join(CQ_ENTRY.pack(phys[i], sizes[i], tags[i]) for i, m in enumerate(msgs)
                    if (m.topic, m.queue_id) == q)
        for q in [("T", 0), ("T", 1), ("T", 2), ("U", 1)]}
    assert list(entries) == [("T", 0), ("T", 1), ("T", 2), ("U", 1)]
    for other in OTHERS[impl]:
        odata = impl.encode_messages(msgs, *args)[0]
        assert other.place_messages(odata, msgs, sizes, tags, 500, 9, lambda q: 10 * (q[1] + 1),
                                    "AB", tuple) == (entries, appended)
        assert odata == data
    # A prefix that is not ASCII (the store's is hex) gives the same ids.
    odata = impl.encode_messages(msgs, *args)[0]
    assert [a[4] for a in impl.place_messages(odata, msgs, sizes, tags, 500, 9, lambda q: 0,
                                              "\u00e9\u4e2d", tuple)[1]] == [
        f"\u00e9\u4e2d{p:016X}" for p in phys[:-1]]


@params
@given(cut=st.integers(0, 400), flip=st.integers(0, 400), byte=st.integers(0, 255),
       at=st.integers(0, 400), pos=st.sampled_from([0, 100, 200, 7]))
@settings(max_examples=300, deadline=None)
def test_record_info_checks_and_reads_records_alike(impl: ModuleType, cut: int, flip: int,
                                                     byte: int, at: int, pos: int) -> None:
    """What recovery and a slave read from each record: the same answers from both
    implementations (info or reason) on whole, damaged and misaligned records; on whole ones,
    what the decoder reads."""
    whole = _sample_records()
    starts = list(itertools.accumulate(
        (m.store_size for m in PY.decode_records(whole)), initial=0))[:-1]
    for buf, o, p in [(whole, s, 100 * i) for i, s in enumerate(starts)] + [
            (whole, starts[1], pos), (_damaged(whole, cut, flip, byte), at % len(whole), pos)]:
        got = outcome(impl.record_info, buf, o, p, len(buf), tuple)
        for other in OTHERS[impl]:
            assert outcome(other.record_info, buf, o, p, len(buf), tuple) == got
        if buf is whole and o in starts and p == 100 * starts.index(o):
            m = PY.decode_record(buf, o)
            assert got == ("ok", (p, m.store_size, m.topic, m.queue_id, m.queue_offset,
                                  m.store_timestamp, m.tags or None, m.properties.get("KEYS"),
                                  m.properties.get("UNIQ_KEY"), None))
        else:
            assert got[0] == "ok" or isinstance(got[1], str)


@params
@given(cut=st.integers(0, 400), flip=st.integers(0, 400), byte=st.integers(0, 255),
       at=st.integers(0, 400), pos=st.sampled_from([0, 100, 200, 7]), size=st.integers(-3, 400),
       lo=st.integers(-1, 250), span=st.integers(0, 300), entry=st.integers(0, 2),
       queue_id=st.integers(-1, 3), topic=st.sampled_from([b"", b"T", b"U", b"TT"]),
       crc=st.booleans())
@settings(max_examples=300, deadline=None)
def test_read_checks_agree_alike_and_with_record_info(
        impl: ModuleType, cut: int, flip: int, byte: int, at: int, pos: int, size: int, lo: int,
        span: int, entry: int, queue_id: int, topic: bytes, crc: bool) -> None:
    """A read's check of the records consume-queue entries point at (record_unsound for one,
    first_unsound and first_unsound_entries for a pull's run): the same answer from both
    implementations on whole, damaged and misaligned records, wrong entries and entries of
    another queue. A record is sound exactly when record_info accepts it within the entry's
    size and its TOTALSIZE is that size; it belongs to the queue when record_info reads that
    queue's topic and id from it; without its CRC checked, a sound record stays sound. A run's
    first unsound entry is the one a check at a time finds, records in [lo, hi) checked in
    full and the others without their CRC."""
    whole = _sample_records()
    sizes = [m.store_size for m in PY.decode_records(whole)]
    starts = list(itertools.accumulate(sizes, initial=0))[:-1]
    for buf in (whole, _damaged(whole, cut, flip, byte)):
        checks = [(s, 100 * i, sizes[i]) for i, s in enumerate(starts)] + [(at % len(buf), pos, size)]
        for o, p, n in checks:
            got = outcome(impl.record_unsound, buf, o, p, n)
            owned = outcome(impl.record_unsound, buf, o, p, n, queue_id, topic, crc)
            for other in OTHERS[impl]:
                assert outcome(other.record_unsound, buf, o, p, n) == got
                assert outcome(other.record_unsound, buf, o, p, n, queue_id, topic, crc) == owned
            assert got[0] == "ok" and (got[1] is None or isinstance(got[1], str))
            assert owned[0] == "ok" and (owned[1] is None or isinstance(owned[1], str))
            fits = n >= 8 and o + n <= len(buf) and PY.I32.unpack_from(buf, o)[0] == n
            info = PY.record_info(buf, o, p, o + n, tuple) if fits else "no"
            assert (got[1] is None) == (not isinstance(info, str)), (got, info)
            if got[1] is None:
                assert not isinstance(info, str)
                mine = (queue_id < 0 or info[3] == queue_id) and (not topic or info[2] == topic.decode())
                assert (owned[1] is None) == mine, (owned, info, queue_id, topic)
            elif not crc and got[1] == "body CRC mismatch":
                assert owned[1] is None or "QUEUEID" in owned[1] or "topic" in owned[1]
        # A pull's run: the entries as stored, one of them possibly wrong (its size or place).
        picked = [(i, 100 * i, sizes[i]) for i in range(len(sizes))]
        if size != sizes[entry]:
            picked[entry] = (entry, pos if size % 2 else 100 * entry, size)
        hi = lo + span
        expect = next((i for i, (_q, ph, n) in enumerate(picked) if n <= 0 or PY.record_unsound(
            buf, sum(x[2] for x in picked[:i]), ph, n, queue_id, topic, lo <= ph < hi)
            is not None), -1)
        assert impl.first_unsound(buf, picked, lo, hi, queue_id, topic) == expect
        raw = b"".join(CQ_ENTRY.pack(ph, n, 7) for _q, ph, n in picked)
        assert impl.first_unsound_entries(buf, raw + b"extra", len(picked), lo, hi, queue_id,
                                          topic) == expect
    assert impl.first_unsound(whole, [(i, 100 * i, n) for i, n in enumerate(sizes)], 0, 1 << 62) == -1
    # Each record is its own queue's (topic T, queue id i), and no other queue's.
    for i in range(len(sizes)):
        one = [(i, 100 * i, sizes[i])]
        assert impl.first_unsound(whole[starts[i]:], one, 0, 1 << 62, i, b"T") == -1
        assert impl.first_unsound(whole[starts[i]:], one, 0, 0, (i + 1) % 3, b"T") == 0
        assert impl.record_unsound(whole, starts[i], 100 * i, sizes[i], i, b"U") == (
            "the topic is not the consume queue's")


@params
def test_read_checks_take_offsets_and_sizes_near_the_int64_limit_alike(impl: ModuleType) -> None:
    """Offsets and sizes whose sum passes 2**63 (any int64 a caller may pass; a consume-queue
    entry's size is an int32): the record there is cut short, as one past the buffer's end is,
    and a run stops at the first such entry, trusted or not. The compiled twin added them in C:
    the sum overflowed, passed the bounds check and the record was read out of bounds (a
    crash), or wrapped back into the buffer, where a later entry was checked against the wrong
    bytes and passed. Run in a child process, so that a crash fails here."""
    whole = _sample_records()
    n = PY.decode_records(whole)[0].store_size
    far = [(i, -1, 1 << 62) for i in range(4)]  # trusted entries (below lo)
    one = [(2**63 - 1, n), (2**63 - 50, 100), (2**63 - n, n), (1 << 62, 1 << 62), (n, 2**63 - n)]
    runs = [([*far[:1], (1, 0, 1 << 62)], 0, 1 << 62), ([(0, 0, n), *far, (4, 0, n)], 0, 1),
            ([(0, 0, n), (1, 0, 2**63 - 1)], 0, 1), ([(0, 0, n)], 0, 1)]
    code = ("import ast, sys, importlib\n"
            "m = importlib.import_module(sys.argv[1])\n"
            "buf, one, runs = ast.literal_eval(sys.argv[2])\n"
            "print(repr(([m.record_unsound(buf, o, 0, s) for o, s in one],\n"
            "            [m.first_unsound(buf, p, lo, hi) for p, lo, hi in runs])))\n")
    child = subprocess.run([sys.executable, "-c", code, impl.__name__, repr((whole, one, runs))],
                           capture_output=True, text=True)
    assert child.returncode == 0, child.stderr or f"exit status {child.returncode}"
    expect = (["record cut short"] * len(one), [0, 1, 1, -1])
    assert ast.literal_eval(child.stdout) == expect
    assert ([PY.record_unsound(whole, o, 0, s) for o, s in one],
            [PY.first_unsound(whole, p, lo, hi) for p, lo, hi in runs]) == expect


@params
def test_a_trusted_record_whose_topic_runs_into_its_last_byte_is_refused_alike(
        impl: ModuleType) -> None:
    """A record (and its TOTALSIZE) one byte short: the topic's length byte then points its
    properties' length past the record's end. The pure twin's quick check of a trusted record
    took the missing length for the -1 it compared against, and passed the record; the pull
    handed it out and the consumer's decoder refused the whole batch."""
    whole = bytearray(PY.encode_record(
        topic=b"abc", queue_id=0, flag=0, body=b"x", properties=b"", sys_flag=0,
        born_timestamp=1, born_host=pack_host("127.0.0.1", 1), store_timestamp=2,
        store_host=pack_host("127.0.0.1", 2), queue_offset=0, physical_offset=0))
    size = len(whole) - 1
    PY.I32.pack_into(whole, 0, size)
    buf = bytes(whole[:size])
    assert impl.record_unsound(buf, 0, 0, size, 0, b"abc", False) == "topic overruns the record"
    assert impl.first_unsound(buf, [(0, 0, size)], 0, 0, 0, b"abc") == 0
    assert impl.first_unsound_entries(buf, CQ_ENTRY.pack(0, size, 0), 1, 0, 0, 0, b"abc") == 0


@params
def test_read_checks_refuse_what_they_cannot_compare_alike(impl: ModuleType) -> None:
    """A topic longer than a record's one length byte can say, or more entries than the
    consume-queue bytes hold: a ValueError from both twins, not an answer about the record."""
    whole = _sample_records()
    n = PY.decode_records(whole)[0].store_size
    raw = CQ_ENTRY.pack(0, n, 0)
    calls = [(impl.record_unsound, whole, 0, 0, n, 0, b"T" * 256),
             (impl.first_unsound, whole, [(0, 0, n)], 0, 1, 0, b"T" * 256),
             (impl.first_unsound_entries, whole, raw, 1, 0, 1, 0, b"T" * 256),
             (impl.first_unsound_entries, whole, raw, 2, 0, 1),
             (impl.first_unsound_entries, whole, raw, -1, 0, 1)]
    for fn, *args in calls:
        got = outcome(fn, *args)
        assert got[0] == "ValueError"
        for other in OTHERS[impl]:
            assert outcome(getattr(other, fn.__name__), *args) == got
    assert impl.first_unsound_entries(whole, raw, 1, 0, 1, 0, b"T" * 255) == 0
    assert impl.first_unsound_entries(whole, raw, 1, 0, 1, 0, b"T") == -1


@params
@given(body=st.binary(max_size=30), flags=st.sampled_from([0x10, 0x20, 0x30]),
       tail=st.binary(max_size=40))
@settings(max_examples=200, deadline=None)
def test_ipv6_flags_on_a_record_too_short_for_its_hosts_fail_alike(
        impl: ModuleType, body: bytes, flags: int, tail: bytes) -> None:
    """A record whose SYSFLAG says IPv6 hosts (one flipped bit of a stored record) but whose
    size has no room for them: its BODY length field lies past the record's end. The pure
    codec read it there anyway and raised struct.error when the buffer ended with the record
    (a read of the last record of a pull failed the pull); the compiled one read it past the
    buffer. Both say the same, whatever follows the record."""
    raw = bytearray(PY.encode_record(
        topic=b"T", queue_id=0, flag=0, body=body, properties=b"", sys_flag=0,
        born_timestamp=5, born_host=pack_host("127.0.0.1", 9), store_timestamp=6,
        store_host=pack_host("10.0.0.1", 10911), queue_offset=0, physical_offset=0))
    raw[39] |= flags  # SYSFLAG's low byte
    n = len(raw)
    extra = 12 * bin(flags).count("1")

    def checks(m: ModuleType, buf: bytes) -> list[Any]:
        return [outcome(m.locate, buf, 0, n), outcome(m.record_unsound, buf, 0, 0, n),
                outcome(m.record_info, buf, 0, 0, n, tuple),
                outcome(m.first_unsound, buf, [(0, 0, n)], 0, 1),
                records_outcome(m, buf)]

    for buf in (bytes(raw), bytes(raw) + tail):
        got = checks(impl, buf)
        for other in OTHERS[impl]:
            assert checks(other, buf) == got
        if 88 + extra > n:  # the BODY length field is not inside the record
            reason = "hosts overrun the record"
            error = ("MessageDecodeError", 0, reason)
            assert got == [error, ("ok", reason), ("ok", reason), ("ok", 0), error]


@pytest.mark.skipif(C is None, reason="the compiled codec is not built in this tree")
@given(data=st.binary(max_size=700), skip=st.integers(0, 15), value=st.integers(0, 2**32 - 1),
       big=st.booleans())
@settings(max_examples=400, deadline=None)
def test_the_compiled_crc_is_zlibs(data: bytes, skip: int, value: int, big: bool) -> None:
    """Body CRCs are computed with carry-less multiplication where the CPU has it (64 bytes
    and more); the result must be zlib's for every length, start alignment and running
    value."""
    if big:
        data = data * 50
    view = memoryview(data)[min(skip, len(data)):]
    assert C.zlib_crc32(view, value) == zlib.crc32(view, value)
    assert C.zlib_crc32(view) == zlib.crc32(view)


class _PlainMessage:
    """StoreMessage's fields as ordinary attributes (no __slots__)."""

    def __init__(self, m: StoreMessage) -> None:
        for name in StoreMessage.__dataclass_fields__:
            setattr(self, name, getattr(m, name))


class _TopicByProperty(StoreMessage):
    __slots__ = ()

    @property  # type: ignore[misc]
    def topic(self) -> str:
        return "Renamed"

    @topic.setter
    def topic(self, value: str) -> None:
        pass


@params
def test_encoder_reads_messages_of_any_shape_alike(impl: ModuleType) -> None:
    """The compiled encoder reads a slots class's fields at their slots; other shapes (plain
    attributes, a property over a field, a slot never set) read as attributes."""
    args = (pack_host("127.0.0.1", 1), 1 << 20, str.encode, lambda h: pack_host(*h), len, "S")
    msgs = [StoreMessage("T", i, b"b%d" % i, {"KEYS": f"k{i}", "UNIQ_KEY": f"u{i}"}, flag=i,
                         sys_flag=0, born_timestamp=7 + i, reconsume_times=i,
                         prepared_transaction_offset=3 * i) for i in range(4)]
    want = impl.encode_messages(msgs, *args)
    mixed = [msgs[0], _PlainMessage(msgs[1]), msgs[2], _PlainMessage(msgs[3])]
    assert impl.encode_messages(mixed, *args) == want
    renamed = _TopicByProperty("T", 0, b"b0", {})
    got = impl.encode_messages([renamed], *args)
    assert PY.decode_records(bytes(got[0]))[0].topic == "Renamed"
    unset = StoreMessage.__new__(StoreMessage)
    with pytest.raises(AttributeError):
        impl.encode_messages([msgs[0], unset], *args)
