"""Property tests: the stored-message codec round-trips, and records written by the store's
encoder decode with the shared codec to exactly what was put."""

from __future__ import annotations

import string

from hypothesis import given, settings
from hypothesis import strategies as st

from ferrymq.common.codec import (
    decode_batch,
    decode_record,
    decode_records,
    encode_batch,
    encode_record,
    pack_host,
)
from ferrymq.common.message import MessageBatchItem
from ferrymq.common.props import properties_to_string, string_to_properties
from ferrymq.store.encoder import Encoder, encode
from ferrymq.store.model import StoreMessage

topics = st.text(alphabet=string.ascii_letters + string.digits + "%|_-", min_size=1, max_size=40)
prop_text = st.text(
    alphabet=st.characters(blacklist_characters="\x01\x02", blacklist_categories=("Cs",)),
    min_size=0, max_size=20,
)
prop_names = prop_text.filter(bool)
props = st.dictionaries(prop_names, prop_text, max_size=6)
i32 = st.integers(-(2**31), 2**31 - 1)
i64 = st.integers(-(2**63), 2**63 - 1)
ports = st.integers(0, 65535)
v4 = st.ip_addresses(v=4).map(str)
hosts = st.one_of(v4, st.ip_addresses(v=6).map(str))


@given(topic=topics, qid=i32, flag=i32, body=st.binary(max_size=2000), properties=props,
       born_ts=i64, store_ts=i64, born=hosts, born_port=ports, store=hosts, store_port=ports,
       reconsume=i32, prepared=i64, qo=i64, phys=st.integers(0, 2**62))
@settings(max_examples=200, deadline=None)
def test_encode_decode_round_trip(topic: str, qid: int, flag: int, body: bytes,
                                  properties: dict[str, str], born_ts: int, store_ts: int,
                                  born: str, born_port: int, store: str, store_port: int,
                                  reconsume: int, prepared: int, qo: int, phys: int) -> None:
    raw = encode_record(
        topic=topic.encode(), queue_id=qid, flag=flag, body=body,
        properties=properties_to_string(properties).encode(), sys_flag=0,
        born_timestamp=born_ts, born_host=pack_host(born, born_port), store_timestamp=store_ts,
        store_host=pack_host(store, store_port), reconsume_times=reconsume,
        prepared_transaction_offset=prepared, queue_offset=qo, physical_offset=phys)
    m = decode_record(raw, check_crc=True)
    assert (m.topic, m.queue_id, m.flag, m.body) == (topic, qid, flag, body)
    assert m.properties == properties
    assert (m.born_timestamp, m.store_timestamp) == (born_ts, store_ts)
    assert (m.queue_offset, m.commit_log_offset, m.store_size) == (qo, phys, len(raw))
    assert (m.reconsume_times, m.prepared_transaction_offset) == (reconsume, prepared)
    assert m.born_host.rsplit(":", 1)[1] == str(born_port)


@given(properties=props)
def test_properties_round_trip(properties: dict[str, str]) -> None:
    assert string_to_properties(properties_to_string(properties)) == properties


@given(st.lists(st.tuples(i32, st.binary(max_size=300), props), max_size=8))
def test_batch_round_trip(items: list[tuple[int, bytes, dict[str, str]]]) -> None:
    batch = [MessageBatchItem(flag, body, p) for flag, body, p in items]
    decoded = decode_batch(encode_batch(batch))
    assert [(b.flag, b.body, b.properties) for b in decoded] == items


messages = st.builds(
    StoreMessage, topic=topics, queue_id=st.integers(0, 7), body=st.binary(max_size=1500),
    properties=props, flag=i32, sys_flag=st.sampled_from([0, 1, 0x2]),
    born_timestamp=i64, born_host=st.tuples(hosts, ports),
    reconsume_times=st.integers(0, 16), prepared_transaction_offset=i64,
)


@given(msgs=st.lists(messages, min_size=1, max_size=10), pos=st.integers(0, 2**40),
       store_ts=st.integers(0, 2**41), store=hosts)
@settings(max_examples=150, deadline=None)
def test_store_encoder_matches_codec(msgs: list[StoreMessage], pos: int, store_ts: int,
                                     store: str) -> None:
    enc = Encoder((store, 10911), 1 << 22, (1000, 5000))
    out = encode(enc, msgs, pos, store_ts, lambda q: 100 + q[1])
    decoded = decode_records(out.data, decompress=False)
    assert len(decoded) == len(msgs) == len(out.appended)
    seen: dict[tuple[str, int], int] = {}
    for m, d, a in zip(msgs, decoded, out.appended, strict=True):
        key = (m.topic, m.queue_id)
        expected_qo = seen.get(key, 100 + m.queue_id)
        seen[key] = expected_qo + 1
        assert (d.topic, d.queue_id, d.body, d.properties) == (m.topic, m.queue_id, m.body,
                                                                m.properties)
        assert (d.flag, d.born_timestamp, d.reconsume_times) == (m.flag, m.born_timestamp,
                                                                  m.reconsume_times)
        assert d.sys_flag & 0x3 == m.sys_flag & 0x3
        assert d.prepared_transaction_offset == m.prepared_transaction_offset
        assert (d.commit_log_offset, d.queue_offset, d.store_timestamp) == (
            a.phys_offset, expected_qo, store_ts)
        assert a.queue_offset == expected_qo and a.size == d.store_size
        assert d.offset_msg_id == a.offset_msg_id
        # the CRC the store wrote is the one the codec checks
        decode_record(out.data, a.phys_offset - pos, check_crc=True, decompress=False)
