"""Micro-benchmark of the compiled codecs (record and remoting header): each compiled function
(ours) beside its pure-Python twin (the peer, FERRYMQ_NO_EXTENSIONS=1) on the same input in the
same run. Messages are what a client sends: 1 KiB bodies with UNIQ_KEY, TAGS and WAIT
properties, 32 per batch.

A compiled function is kept only where this table shows it pays."""

from __future__ import annotations

import importlib
import os
import statistics
import time
from collections.abc import Callable
from types import ModuleType
from typing import Any

from ferrymq.common.codes import SerializeType
from ferrymq.common.message import MessageBatchItem
from ferrymq.common.record import _py
from ferrymq.remoting import RemotingCommand, _header_py
from ferrymq.store.encoder import Encoder, _born_host_bytes_of, tag_code
from ferrymq.store.model import AppendedMessage, StoreMessage

RUNS = 3
BATCH = 32
BODY = 1024
PROPS = {"UNIQ_KEY": "7F0000010D4418B4AAC2000000000001", "TAGS": "TagA", "WAIT": "true"}


def _compiled(name: str) -> ModuleType | None:
    try:
        return importlib.import_module(name)
    except ImportError:
        return None


def _header_cases(impl: ModuleType) -> list[tuple[str, Callable[[], Any], int]]:
    """A SEND_MESSAGE_V2 request header as ferrymq's producer writes it."""
    ext = {"a": "ProducerGroup", "b": "BenchTopic", "c": "TBW102", "d": "4", "e": "0", "f": "0",
           "g": "1700000000000", "h": "0", "i": _py.properties_encode(PROPS).decode(), "j": "0",
           "k": "false", "m": "false"}
    cmd = RemotingCommand.request(310, ext_fields=ext)
    json_header = impl.encode_json_header(cmd)
    binary_cmd = RemotingCommand.request(310, ext_fields=ext)
    binary_cmd.serialize_type = SerializeType.ROCKETMQ
    binary_header = impl.encode_binary_header(binary_cmd)
    return [
        ("JSON header encode (request)", lambda: impl.encode_json_header(cmd), 1),
        ("JSON header decode (request)", lambda: impl.decode_json_header(json_header), 1),
        ("binary header encode (request)", lambda: impl.encode_binary_header(binary_cmd), 1),
        ("binary header decode (request)", lambda: impl.decode_binary_header(binary_header), 1),
    ]


def _rate(fn: Callable[[], Any], items_per_call: int, seconds: float) -> float:
    calls = 0
    start = time.perf_counter()
    deadline = start + seconds
    while True:
        for _ in range(20):
            fn()
        calls += 20
        now = time.perf_counter()
        if now >= deadline:
            return calls * items_per_call / (now - start)


def _cases(impl: ModuleType) -> list[tuple[str, Callable[[], Any], int]]:
    body = os.urandom(BODY)
    enc = Encoder(("127.0.0.1", 10911), 4 << 20, (1000,))
    args = (enc.store_host_raw, enc.max_message_size, enc.topic_raw, _born_host_bytes_of,
            tag_code, "SCHEDULE_TOPIC_XXXX")
    as_map = [StoreMessage("BenchTopic", 0, body, dict(PROPS), born_host=("127.0.0.1", 5))
              for _ in range(BATCH)]
    raw_props = _py.properties_encode(PROPS) + b"CLUSTER\x01DefaultCluster\x02"
    as_bytes = [StoreMessage("BenchTopic", 0, body, raw_props, born_host=("127.0.0.1", 5))
                for _ in range(BATCH)]

    def store_batch(msgs: list[StoreMessage]) -> Callable[[], Any]:
        def run() -> Any:
            data, sizes, tags, _keys, _delays = impl.encode_messages(msgs, *args)
            return impl.place_messages(data, msgs, sizes, tags, 4096, 1_700_000_000_000,
                                       lambda q: 0, enc.msg_id_prefix, AppendedMessage)
        return run

    data, sizes, tags, _, _ = _py.encode_messages(as_map, *args)
    _py.place_messages(data, as_map, sizes, tags, 0, 1, lambda q: 0, "P", AppendedMessage)
    pull_body = bytes(data)

    def pull_and_read_ids() -> Any:
        return [(m.msg_id, m.tags) for m in impl.decode_records(pull_body, broker="b")]

    items = [MessageBatchItem(0, body, dict(PROPS)) for _ in range(BATCH)]
    batch_body = _py.encode_batch(items)
    return [
        ("store batch encode + patch (+CRC, CQ entries), property map", store_batch(as_map), BATCH),
        ("store batch encode + patch, property bytes as received", store_batch(as_bytes), BATCH),
        ("pull body decode (lazy views)", lambda: impl.decode_records(pull_body, broker="b"), BATCH),
        ("pull body decode + msg_id + tags", pull_and_read_ids, BATCH),
        ("SEND_BATCH body encode (client)", lambda: impl.encode_batch(items), BATCH),
        ("SEND_BATCH body split (broker)", lambda: impl.split_batch(batch_body), BATCH),
        ("SEND_BATCH body to store messages, CLUSTER added (broker)",
         lambda: impl.batch_to_messages(batch_body, StoreMessage, "BenchTopic", 0, 0, 1,
                                        "127.0.0.1:5", 0, "CLUSTER", "DefaultCluster"), BATCH),
        ("properties encode", lambda: impl.properties_encode(PROPS), 1),
        ("properties decode", lambda: impl.properties_decode(raw_props), 1),
        ("properties scan (TAGS, KEYS, UNIQ_KEY, DELAY)", lambda: impl.properties_scan(raw_props), 1),
    ]


def run(quick: bool) -> list[dict[str, Any]]:
    seconds = 0.3 if quick else 1.0
    record_c = _compiled("ferrymq.common.record._crecord")
    header_c = _compiled("ferrymq.remoting._cheader")
    py_cases = _cases(_py) + _header_cases(_header_py)
    c_cases: list[Any] = ((_cases(record_c) if record_c is not None else [None] * len(_cases(_py)))
                          + (_header_cases(header_c) if header_c is not None else [None] * 4))
    rows = []
    for py_case, c_case in zip(py_cases, c_cases, strict=True):
        name, py_fn, n = py_case
        py_runs = [_rate(py_fn, n, seconds) for _ in range(RUNS)]
        c_runs = [_rate(c_case[1], n, seconds) for _ in range(RUNS)] if c_case else []
        rows.append({
            "workload": "codec", "measurement": name, "unit": "ops/s" if n == 1 else "msgs/s",
            "value": statistics.median(c_runs) if c_runs else float("nan"), "runs": c_runs,
            "peer_name": "pure Python (FERRYMQ_NO_EXTENSIONS=1)",
            "peer_value": statistics.median(py_runs), "peer_runs": py_runs,
        })
    return rows
