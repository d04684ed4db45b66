"""The frame codec: round trips in both serializations, and what ali-ons actually sends."""

from __future__ import annotations

import json
import struct

import pytest
from command_strategies import commands
from hypothesis import given
from hypothesis import strategies as st

from ferrymq.common.codes import LanguageCode, SerializeType
from ferrymq.remoting import FrameError, FrameSplitter, FrameTooLargeError, RemotingCommand
from ferrymq.remoting.codec import decode_frame, encode_frame


def _normal(cmd: RemotingCommand) -> RemotingCommand:
    # The binary header cannot tell an empty remark from none.
    if cmd.serialize_type == SerializeType.ROCKETMQ and cmd.remark == "":
        cmd.remark = None
    return cmd


@given(commands)
def test_every_command_survives_encode_then_decode(cmd: RemotingCommand) -> None:
    frame = encode_frame(cmd)
    (length,) = struct.unpack_from(">i", frame)
    assert length == len(frame) - 4
    assert decode_frame(frame[4:]) == _normal(cmd)


@given(commands)
def test_a_body_view_decodes_alike_without_copying_the_body(cmd: RemotingCommand) -> None:
    frame = bytearray(encode_frame(cmd)[4:])
    got = decode_frame(frame, body_view=True)
    if cmd.body:
        # The body is the frame's own bytes: a change to the frame shows through it.
        assert isinstance(got.body, memoryview) and got.body.obj is frame
        frame[-1] ^= 0xFF
        assert got.body[-1] == frame[-1]
        frame[-1] ^= 0xFF
        got.body = bytes(got.body)
    assert got == _normal(cmd)


@given(st.lists(commands, min_size=1, max_size=6), st.integers(1, 64))
def test_splitter_reassembles_frames_from_any_chunking(cmds: list[RemotingCommand], chunk: int) -> None:
    stream = b"".join(encode_frame(c) for c in cmds)
    splitter = FrameSplitter()
    frames: list[bytes] = []
    for i in range(0, len(stream), chunk):
        frames.extend(splitter.feed(stream[i : i + chunk]))
    assert [decode_frame(f) for f in frames] == [_normal(c) for c in cmds]
    assert splitter.buffered == 0


@given(st.binary(max_size=200))
def test_garbage_frames_raise_frame_error_and_nothing_else(data: bytes) -> None:
    try:
        decode_frame(data)
    except FrameError:
        pass


def test_ali_ons_style_header_with_unquoted_numbers_booleans_and_nulls() -> None:
    header = json.dumps({
        "code": 11, "language": "JAVA", "version": 121, "opaque": 9, "flag": 0,
        "extFields": {"queueId": 3, "commitOffset": -1, "unitMode": False, "subscription": None,
                      "ratio": 2.0, "topic": "T"},
    }).encode()
    frame = struct.pack(">i", len(header)) + header
    cmd = decode_frame(frame)
    assert cmd.ext_fields == {"queueId": "3", "commitOffset": "-1", "unitMode": "false",
                              "ratio": "2", "topic": "T"}
    assert cmd.language == LanguageCode.JAVA and cmd.version == 121 and cmd.opaque == 9
    assert cmd.body is None


def test_responses_to_json_requests_are_json_with_zero_top_byte() -> None:
    req = RemotingCommand.request(34, ext_fields={"a": "1"})
    resp = RemotingCommand.make_response_to(req, 0, remark="ok")
    frame = encode_frame(resp)
    (word,) = struct.unpack_from(">i", frame, 4)
    assert word >> 24 == 0
    header = json.loads(frame[8 : 8 + word])
    assert header["opaque"] == req.opaque and header["flag"] == 1 and header["code"] == 0


def test_binary_request_gets_binary_response() -> None:
    req = RemotingCommand.request(34)
    req.serialize_type = SerializeType.ROCKETMQ
    resp = RemotingCommand.make_response_to(req, 0)
    (word,) = struct.unpack_from(">i", encode_frame(resp), 4)
    assert word >> 24 == SerializeType.ROCKETMQ


@pytest.mark.parametrize("length", [0, 3, -1, 17 * 1024 * 1024])
def test_splitter_refuses_impossible_lengths(length: int) -> None:
    splitter = FrameSplitter(16 * 1024 * 1024)
    with pytest.raises(FrameError) as info:
        splitter.feed(struct.pack(">i", length) + b"xxxx")
    assert not info.value.recoverable
    if length > 4:
        assert isinstance(info.value, FrameTooLargeError) and info.value.size == length


@pytest.mark.parametrize("header, reason", [
    (b"{not json", "does not parse"),
    (b"[1,2]", "not an object"),
    (b'{"opaque":1}', "code"),
    (b'{"code":"x"}', "code"),
    (b'{"code":1,"extFields":[1]}', "extFields"),
])
def test_malformed_json_headers_name_the_problem(header: bytes, reason: str) -> None:
    with pytest.raises(FrameError, match=reason) as info:
        decode_frame(struct.pack(">i", len(header)) + header)
    assert info.value.recoverable


def test_header_length_beyond_frame_is_rejected() -> None:
    with pytest.raises(FrameError, match="exceeds the frame"):
        decode_frame(struct.pack(">i", 500) + b"{}")


@pytest.mark.parametrize("header", [
    b"[" * 100_000,
    b'{"code":1,"extFields":{"k":' + b"[" * 100_000 + b"]" * 100_000 + b"}}",
])
def test_deeply_nested_json_is_a_frame_error(header: bytes) -> None:
    with pytest.raises(FrameError) as err:
        decode_frame(struct.pack(">i", len(header)) + header)
    assert err.value.recoverable
