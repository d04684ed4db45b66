"""The replication stream's frames: whatever is encoded comes out of the incremental reader
unchanged however the bytes are cut into reads, and malformed input raises HaProtocolError."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ferrymq.ha.protocol import (
    Beat,
    Data,
    Frame,
    FrameReader,
    HaProtocolError,
    Hello,
    Meta,
    Welcome,
    encode_beat,
    encode_data_head,
    encode_hello,
    encode_meta,
    encode_report,
    encode_welcome,
)

offsets = st.integers(0, 1 << 62)
epochs = st.lists(st.tuples(st.integers(0, 1 << 31), offsets), max_size=4)
names = st.text(max_size=20)


def _data(pos: int, extra: int, records: bytes) -> Data:
    return Data(pos, pos + len(records) + extra, records)


frames = st.one_of(
    st.builds(Hello, names, st.integers(0, 1 << 31), names, offsets, epochs),
    offsets,
    st.builds(Welcome, offsets, epochs, names, offsets),
    st.builds(_data, st.integers(0, 1 << 40), st.integers(0, 8), st.binary(max_size=3000)),
    st.builds(Beat, offsets, st.integers(0, 1 << 40)),
    st.just(Meta()),
)


def encode(frame: Frame) -> bytes:
    if isinstance(frame, Hello):
        return encode_hello(frame)
    if isinstance(frame, Welcome):
        return encode_welcome(frame)
    if isinstance(frame, Data):
        return encode_data_head(frame.pos, frame.next_pos, len(frame.records)) + frame.records
    if isinstance(frame, Beat):
        return encode_beat(frame)
    if isinstance(frame, Meta):
        return encode_meta()
    return encode_report(frame)


@settings(max_examples=300, deadline=None)
@given(st.lists(frames, max_size=12), st.lists(st.integers(1, 4000), max_size=30))
def test_frames_survive_any_cut_into_reads(sent: list[Frame], cuts: list[int]) -> None:
    stream = b"".join(encode(f) for f in sent)
    reader = FrameReader()
    got: list[Frame] = []
    o = 0
    for size in cuts:
        got += reader.feed(stream[o:o + size])
        o += size
    got += reader.feed(stream[o:])
    assert got == sent
    assert all(type(g.records) is bytes for g in got if isinstance(g, Data))
    assert reader.feed(b"") == []  # nothing left over


def test_a_frame_fed_a_byte_at_a_time_comes_out_once_whole() -> None:
    frame = Data(100, 110, b"0123456789")
    stream = encode(frame) + encode_report(7)
    reader = FrameReader()
    got = [f for i in range(len(stream)) for f in reader.feed(stream[i:i + 1])]
    assert got == [frame, 7]


@pytest.mark.parametrize("raw, reason", [
    (struct.pack(">IB", 0, 2), "frame length 0"),
    (struct.pack(">IB", 65 << 20, 17), "frame length"),
    (struct.pack(">IB", 9, 99) + bytes(8), "unknown frame type 99"),
    (struct.pack(">IB", 5, 2) + bytes(4), "REPORT payload of 4 bytes"),
    (struct.pack(">IB", 9, 17) + bytes(8), "DATA payload shorter than its positions"),
    (struct.pack(">IB", 17, 17) + struct.pack(">QQ", 100, 50), "DATA next position inside its records"),
    (struct.pack(">IB", 2, 19) + b"x", "META carries no payload"),
    (struct.pack(">IB", 4, 1) + b"{x}", "payload is not JSON"),
    (struct.pack(">IB", 3, 16) + b"[]", "payload is not a JSON object"),
])
def test_malformed_frames_are_refused_with_the_reason(raw: bytes, reason: str) -> None:
    # The good frame before the bad one is delivered by the read that carries it alone.
    reader = FrameReader()
    assert reader.feed(encode_report(1)) == [1]
    with pytest.raises(HaProtocolError, match=reason):
        reader.feed(raw)


def test_a_frame_longer_than_the_readers_limit_is_refused_before_it_arrives() -> None:
    reader = FrameReader(max_frame=1000)
    with pytest.raises(HaProtocolError, match="limit 1000"):
        reader.feed(struct.pack(">IB", 1001, 17))


def test_a_reader_that_refused_a_frame_takes_new_bytes_without_a_buffer_error() -> None:
    # A frame cut by its read waits in the buffer; the bad frame decoded from it must not
    # leave a view of the buffer behind (kept alive by the error's traceback).
    reader = FrameReader()
    bad = struct.pack(">IB", 9, 17) + bytes(8)
    assert reader.feed(bad[:3]) == []
    with pytest.raises(HaProtocolError) as refused:
        reader.feed(bad[3:])
    assert refused.value.__traceback__ is not None  # the error, traceback and all, is kept
    assert reader.feed(encode_report(7)) == [7]
