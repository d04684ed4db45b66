"""The offset journal's lines: written with the C JSON encoder, byte for byte what jsonx writes,
and read back as the same record."""

from __future__ import annotations

import zlib

from hypothesis import given
from hypothesis import strategies as st

from ferrymq.broker.offset_journal import JournalRecord, decode_record, encode_record
from ferrymq.common import jsonx

_ints = st.integers(min_value=-(2**63), max_value=2**63 - 1)
records = st.builds(
    JournalRecord,
    seq=_ints,
    key=st.text(),
    queue_id=_ints,
    offset=_ints,
    acked=st.none() | st.lists(st.tuples(_ints, _ints), max_size=5).map(tuple),
)


def jsonx_line(rec: JournalRecord) -> bytes:
    acked = None if rec.acked is None else [[a, b] for a, b in rec.acked]
    body = jsonx.dumps_bytes([rec.seq, rec.key, rec.queue_id, rec.offset, acked])
    return b"%08x %s\n" % (zlib.crc32(body), body)


@given(records)
def test_line_is_jsonx_and_reads_back(rec: JournalRecord) -> None:
    line = encode_record(rec)
    assert line == jsonx_line(rec)
    assert decode_record(line) == rec


def test_unicode_and_control_characters_in_the_key() -> None:
    rec = JournalRecord(7, 'tópic@grüppe "q"\n\u2028\U0001f600', 3, 42, ((43, 45),))
    assert encode_record(rec) == jsonx_line(rec)
    assert decode_record(encode_record(rec)) == rec
