"""The header codec's two implementations (pure Python and compiled) give the same bytes, the
same commands and the same errors for the same input: round trips of any command, headers as
other peers write them (numbers, booleans, nulls, escapes, odd spacing, duplicate keys), and
damaged or random bytes."""

from __future__ import annotations

import json
from types import ModuleType
from typing import Any

import pytest
from command_strategies import commands
from hypothesis import given, settings
from hypothesis import strategies as st

from ferrymq.common.codes import LanguageCode, SerializeType
from ferrymq.remoting import FrameError, RemotingCommand
from ferrymq.remoting import _header_py as PY

try:
    from ferrymq.remoting import _cheader as C  # type: ignore[attr-defined]
except ImportError:
    C = None

needs_c = pytest.mark.skipif(C is None, reason="the compiled header codec is not built in this "
                                               "tree (make venv builds it)")

any_text = st.text(max_size=30)


def outcome(fn: Any, *args: Any) -> Any:
    try:
        return ("ok", fn(*args))
    except FrameError as exc:
        return ("FrameError", exc.reason, exc.recoverable)
    except UnicodeEncodeError:
        return ("UnicodeEncodeError",)
    except Exception as exc:  # any other type is a difference the test must show
        return (type(exc).__name__, str(exc))


def same(fn_name: str, *args: Any) -> Any:
    assert C is not None
    got = outcome(getattr(PY, fn_name), *args)
    assert outcome(getattr(C, fn_name), *args) == got
    return got


@needs_c
@given(commands)
@settings(max_examples=300)
def test_encodings_are_identical_and_decode_alike(cmd: RemotingCommand) -> None:
    json_header = same("encode_json_header", cmd)
    if json_header[0] == "ok":
        got = same("decode_json_header", json_header[1])
        assert got[0] == "ok" and got[1].ext_fields == cmd.ext_fields
    binary = same("encode_binary_header", cmd)
    if binary[0] == "ok":
        assert same("decode_binary_header", binary[1])[0] == "ok"


scalars = (st.none() | st.booleans() | st.integers(-(2**70), 2**70) | any_text
           | st.floats(allow_nan=False, allow_infinity=False))
values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=3)
                      | st.dictionaries(any_text, inner, max_size=3), max_leaves=6)
headers = st.fixed_dictionaries(
    {"code": st.integers(-5, 400) | scalars},
    optional={
        "opaque": st.integers(-(2**31), 2**31) | scalars,
        "flag": st.integers(0, 3) | scalars,
        "version": st.integers(0, 500) | scalars,
        "language": st.sampled_from(["JAVA", "NODE_JS", "GO", "nope", 3, None, True, 1.5]),
        "remark": scalars,
        "extFields": st.none() | st.dictionaries(any_text, scalars, max_size=6) | values,
        "serializeTypeCurrentRPC": st.just("JSON") | scalars,
        "other": values,
    },
)


@needs_c
@given(header=headers, ascii_only=st.booleans(), indent=st.sampled_from([None, 0, 2]),
       dup=st.booleans())
@settings(max_examples=400)
def test_json_headers_as_peers_write_them_decode_alike(header: dict[str, Any], ascii_only: bool,
                                                      indent: int | None, dup: bool) -> None:
    text = json.dumps(header, ensure_ascii=ascii_only, indent=indent)
    if dup and "extFields" in header and isinstance(header["extFields"], dict):
        # A key twice: json keeps the first position and the last value.
        text = text.rstrip("}").rstrip() + ', "code": 7, "extFields": {"a": "1", "a": null}}'
    raw = text.encode("utf-8", "surrogatepass")
    same("decode_json_header", raw)
    same("decode_json_header", memoryview(raw))


@needs_c
@given(data=st.binary(max_size=200))
def test_random_bytes_fail_alike(data: bytes) -> None:
    same("decode_json_header", data)
    same("decode_binary_header", data)


@needs_c
@given(cmd=commands, cut=st.integers(0, 60), at=st.integers(0, 10_000), byte=st.integers(0, 255))
@settings(max_examples=400)
def test_damaged_headers_fail_alike(cmd: RemotingCommand, cut: int, at: int, byte: int) -> None:
    for fn, enc in (("decode_json_header", PY.encode_json_header),
                    ("decode_binary_header", PY.encode_binary_header)):
        try:
            good = bytearray(enc(cmd))
        except UnicodeEncodeError:
            continue
        bad = good[: max(0, len(good) - cut)]
        if bad:
            bad[at % len(bad)] = byte
        same(fn, bytes(bad))


@needs_c
@pytest.mark.parametrize("raw", [
    b'{"code":1,"extFields":{"p":"UNIQ_KEY\\u0001x\\u0002TAGS\\u0001\\u00e9\\u20ac\\u0002"}}',
    b'{"code":1,"remark":"a\\"b\\\\c\\/d\\b\\f\\n\\r\\t"}',
    b'{"code":1,"remark":"\\ud83d\\ude00 pair"}',
    b'{"code":1,"remark":"\\udc00 lone"}',
    b' \t{ "code" : 1 , "opaque" : -0 , "flag" : 1 } \n',
    b'{"code":01}',
    b'{"code":1.0}',
    b'{"code":1e2}',
    b'{"code":123456789012345678901234}',
    b'{"code":1,"extFields":{"a":1,"b":true,"c":false,"d":null,"e":1.5,"f":[1],"g":{"x":1}}}',
    b'{"code":1,"extFields":{"a":"1","a":"2"}}',
    b'{"code":1,"extFields":""}',
    b'{"code":1,"language":true}',
    b'{"code":1,"language":null,"remark":null,"extFields":null}',
    b'{"code":1,"remark":"raw\x01control"}',
    b'{"code":1,"remark":"bad \xff utf8"}',
    b'{"code":1,"remark":"\xed\xa0\x80 encoded surrogate"}',
    b'\xef\xbb\xbf{"code":1}',
    b'{"code":1}x',
    b'{"code":1,}',
    b'{}',
    b'',
])
def test_edge_headers_decode_alike(raw: bytes) -> None:
    same("decode_json_header", raw)


@pytest.mark.parametrize("impl", [PY, pytest.param(C, marks=needs_c)], ids=["python", "cython"])
def test_commands_round_trip_in_both_serializations(impl: ModuleType) -> None:
    cmd = RemotingCommand(code=310, opaque=7, flag=1, remark="é\n", ext_fields={"k": "v\x01w"},
                          language=int(LanguageCode.PYTHON), version=9)
    assert impl.decode_json_header(impl.encode_json_header(cmd)) == cmd
    cmd.serialize_type = SerializeType.ROCKETMQ
    assert impl.decode_binary_header(impl.encode_binary_header(cmd)) == cmd
