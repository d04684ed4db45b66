"""The Spark source's three decoders of pulled records give the same rows: the compiled column
decoder (`_ccolumns`), its pure-Python twin (Arrow kernels) and the exact record-by-record
codec. Generated records cover what the fast decoders take and what they must hand to the exact
path (lenient or duplicate properties, bad UTF-8, no UNIQ_KEY, compressed bodies, IPv6 hosts);
broken responses fail the same way whichever decoder is in use."""

from __future__ import annotations

import zlib
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

pa = pytest.importorskip("pyarrow")
pytest.importorskip("pyspark")

from ferrymq.common.props import properties_to_string  # noqa: E402
from ferrymq.common.record import decode_records, encode_record, pack_host  # noqa: E402
from ferrymq.spark import decode  # noqa: E402
from ferrymq.spark.schema import ARROW_SCHEMA  # noqa: E402

try:
    from ferrymq.spark import _ccolumns  # type: ignore[attr-defined]
except ImportError:
    _ccolumns = None
COMPILED = _ccolumns is not None

# Both fast decoders, whatever FERRYMQ_NO_EXTENSIONS says: each is checked against the exact
# path. The compiled one is built by `make venv` (an install that cannot build it fails).
FAST = [
    pytest.param(True, id="cython") if COMPILED else pytest.param(
        True, id="cython", marks=pytest.mark.skip(
            reason="the compiled decoder is not built in this tree (make venv builds it)")),
    pytest.param(False, id="arrow-kernels"),
]


def record(i: int, *, body: bytes = b"", props: bytes | dict[str, str] | None = None,
           compress: bool = False, v6: bool = False, topic: bytes = b"orders",
           reconsume: int = 0) -> bytes:
    if props is None:
        props = {"UNIQ_KEY": f"{i:032X}", "KEYS": f"k{i}"}
        if i % 2:
            props["TAGS"] = f"t{i}"
    raw_props = props if isinstance(props, bytes) else properties_to_string(props).encode()
    sys_flag = 0
    if compress:
        body, sys_flag = zlib.compress(body), 1
    host = pack_host("::1", 1) if v6 else pack_host("127.0.0.1", 5555)
    return encode_record(
        topic=topic, queue_id=i % 5, flag=0, body=body, properties=raw_props, sys_flag=sys_flag,
        born_timestamp=1_700_000_000_000 + i, born_host=host,
        store_timestamp=1_700_000_000_500 + i, store_host=pack_host("127.0.0.1", 10911),
        reconsume_times=reconsume, queue_offset=100 + i, physical_offset=1000 * i,
    )


def exact(buf: bytes) -> pa.RecordBatch:
    return decode.messages_to_batch(decode_records(buf, broker="broker-a"), "broker-a")


def fast(buf: bytes, use_compiled: bool) -> pa.RecordBatch | None:
    return decode.fast_batch(buf, "broker-a", _ccolumns if use_compiled else None)


def via(buf: bytes, use_compiled: bool) -> pa.RecordBatch:
    got = fast(buf, use_compiled)
    return got if got is not None else exact(buf)


def outcome(fn: Any, *args: Any) -> tuple[str, Any]:
    try:
        return ("ok", fn(*args))
    except ValueError as exc:
        return (type(exc).__name__, str(exc))


def same(a: tuple[str, Any], b: tuple[str, Any]) -> bool:
    # Batches compare with equals: a flipped timestamp byte can make a row no datetime holds.
    if a[0] == b[0] == "ok":
        return bool(a[1].equals(b[1]))
    return a == b


@pytest.mark.parametrize("use_compiled", FAST)
@pytest.mark.parametrize("n", [1, 2, 9, 1024, 5000])
def test_common_records_take_the_fast_path_and_equal_the_exact_codec(
    use_compiled: bool, n: int
) -> None:
    # Bodies of every length from 0 (legal on the wire), keys on every record, tags on half.
    buf = b"".join(record(i, body=bytes([i % 251]) * (i % 300), reconsume=i % 3)
                   for i in range(n))
    batch = fast(buf, use_compiled)
    assert batch is not None, "a response of common records must not need the exact path"
    assert batch.schema.equals(ARROW_SCHEMA)
    batch.validate(full=True)
    assert batch.equals(exact(buf))
    last = batch.slice(n - 1, 1).to_pylist()[0]
    assert last["msg_id"] == f"{n - 1:032X}" and last["queue_offset"] == 100 + n - 1
    assert last["tags"] == (f"t{n - 1}" if (n - 1) % 2 else None)


# Property text as third-party clients may send it: strict pairs, and every way of not being.
_names = st.sampled_from(["UNIQ_KEY", "KEYS", "TAGS", "WAIT", "a", "é", "中文", ""])
_values = st.text(alphabet=st.sampled_from("ab \u00e9\u4e2d\U0001f600"), max_size=6)
_strict = st.lists(st.tuples(_names.filter(bool), _values), max_size=5).map(
    lambda pairs: "".join(f"{k}\x01{v}\x02" for k, v in pairs).encode())
_lenient = st.lists(st.tuples(_names, _values, st.sampled_from(["\x01", "\x02", ""]),
                              st.sampled_from(["\x02", "\x01", ""])), max_size=4).map(
    lambda items: "".join(f"{k}{a}{v}{b}" for k, v, a, b in items).encode())
_bad_utf8 = st.builds(lambda v: b"UNIQ_KEY\x01" + v + b"\x02", st.binary(max_size=4))
_props = st.one_of(_strict, _strict.map(lambda p: b"UNIQ_KEY\x01X\x02" + p), _lenient,
                   _bad_utf8)
_records = st.lists(
    st.builds(
        lambda i, body, props, compress, v6, topic: record(
            i, body=body, props=props, compress=compress, v6=v6, topic=topic),
        st.integers(0, 1000), st.binary(max_size=40), _props,
        st.booleans(), st.booleans(), st.sampled_from([b"t", b"%RETRY%g", b"\xc3\xa9t", b"\xff"]),
    ),
    min_size=1, max_size=6,
)


@pytest.mark.parametrize("use_compiled", FAST)
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(records=_records, common=st.integers(0, 3))
def test_any_records_decode_as_the_exact_codec(use_compiled: bool, records: list[bytes],
                                               common: int) -> None:
    buf = b"".join([record(1000 + i) for i in range(common)] + records)
    got = via(buf, use_compiled)
    assert got.schema.equals(ARROW_SCHEMA)
    assert got.to_pylist() == exact(buf).to_pylist()


@pytest.mark.parametrize("use_compiled", FAST)
@settings(max_examples=200, deadline=None)
@given(cut=st.integers(0, 400), flip=st.integers(0, 400), value=st.integers(0, 255))
def test_broken_responses_fail_as_the_exact_codec(use_compiled: bool, cut: int, flip: int,
                                                  value: int) -> None:
    good = b"".join(record(i, body=b"x" * i) for i in range(3))
    buf = bytearray(good[: len(good) - cut % len(good)])
    if buf:
        buf[flip % len(buf)] = value
    data = bytes(buf)
    if not data:
        return
    assert same(outcome(via, data, use_compiled), outcome(exact, data))


@pytest.mark.skipif(not COMPILED, reason="the compiled decoder is not built in this tree")
def test_the_compiled_decoder_refuses_what_it_does_not_take() -> None:
    # Each of these sends the whole response to the exact path (None), never to wrong rows.
    ok = record(0)
    for odd in (
        record(1, props=b"UNIQ_KEY\x01a\x02UNIQ_KEY\x01b\x02"),  # duplicate name: last wins
        record(1, props=b"UNIQ_KEY\x01a\x02\x01v\x02"),  # empty name: the exact path drops it
        record(1, props=b"UNIQ_KEY\x01a"),  # no final separator
        record(1, props=b"UNIQ_KEY\x01a\x01b\x02"),  # a value holding \x01
        record(1, props=b"KEYS\x01a\x02"),  # no UNIQ_KEY: the offset message id
        record(1, compress=True, body=b"zz"),
        record(1, v6=True),
    ):
        assert _ccolumns.columns(ok + odd) is None
    assert _ccolumns.columns(ok + ok[:-1]) is None  # truncated
    n, pairs, buffers = _ccolumns.columns(ok + ok)
    assert (n, pairs, len(buffers)) == (2, 4, 22)


@pytest.mark.parametrize("use_compiled", FAST)
def test_a_list_of_bodies_reads_as_their_concatenation(use_compiled: bool) -> None:
    bodies = [b"".join(record(i, body=b"y" * i) for i in range(lo, lo + k))
              for lo, k in ((0, 3), (3, 1), (4, 5))]
    got = decode.fast_batch(bodies, "broker-a", _ccolumns if use_compiled else None)
    assert got is not None and got.equals(exact(b"".join(bodies)))
    # One odd record in one body sends the whole list to the exact path, joined.
    odd = [*bodies[:2], bodies[2] + record(9, compress=True, body=b"zz")]
    assert fast(b"".join(odd), use_compiled) is None
    assert decode.decode_to_batch(odd, "broker-a").equals(exact(b"".join(odd)))
    assert decode.decode_to_batch([], "broker-a").num_rows == 0


@pytest.mark.parametrize("use_compiled", FAST)
@pytest.mark.parametrize("bodies", [[b""], [b"", b""]], ids=["one", "two"])
def test_bodies_that_hold_no_record_decode_to_no_rows(use_compiled: bool,
                                                      bodies: list[bytes]) -> None:
    # A list of empty bodies is not falsy, so it reaches the fast decoders: the Arrow kernels
    # raised ArrowInvalid (a ValueError) on zero records where the exact codec and the compiled
    # decoder give an empty batch.
    got = decode.fast_batch(bodies, "broker-a", _ccolumns if use_compiled else None)
    assert got is not None and got.num_rows == 0
    assert got.equals(exact(b""))
    assert decode.decode_to_batch(bodies, "broker-a").equals(exact(b""))  # the decoder in use
    # A response of records after an empty body reads as those records.
    ok = [*bodies, record(1)]
    assert decode.fast_batch(ok, "broker-a",
                             _ccolumns if use_compiled else None).equals(exact(record(1)))


@pytest.mark.parametrize("use_compiled", FAST)
@pytest.mark.parametrize("props", [
    b"UNIQ_KEY\x01a\x02\x01v\x02",  # an empty name after the UNIQ_KEY
    b"\x01v\x02UNIQ_KEY\x01a\x02KEYS\x01k\x02",  # first
    b"UNIQ_KEY\x01a\x02\x01\x02",  # an empty name and an empty value
], ids=["last", "first", "both-empty"])
def test_a_property_with_an_empty_name_is_dropped_as_the_exact_codec_drops_it(
    use_compiled: bool, props: bytes
) -> None:
    # The exact codec keeps only items with a name; the Arrow kernels put ("", value) into the
    # properties map. Strict in form (separators alternate), so only the empty name tells.
    buf = record(0) + record(1, props=props) + record(2)
    assert via(buf, use_compiled).equals(exact(buf))
    assert ("", "v") not in via(buf, use_compiled).column(8)[1].as_py()
