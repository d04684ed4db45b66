"""Damage at rest, end to end: a real standalone over real files that were damaged while it
was stopped, and a real PushConsumer. Every good message arrives, the damaged record is
reported once (segment file and offset), and the committed offset passes it."""

from __future__ import annotations

import json
import logging
import os
import struct
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from conftest import start_standalone, wait_until
from ferrymq import AdminClient, ConsumeFromWhere, ConsumeStatus, Message, MessageExt, Producer, PushConsumer
from ferrymq.common.message import MessageQueue
from ferrymq_cmd import run_ferrymq

TOPIC = "dmg"
N = 24
DAMAGED = 9
ENTRY = struct.Struct(">qiq")
FAST_CONSUMER: dict[str, Any] = dict(
    rebalance_interval=0.3, persist_interval=0.2, route_refresh_interval=0.3,
    heartbeat_interval=1.0, pull_suspend_timeout=1.0, pull_delay_on_error=0.2,
)
REPORT = "damaged commit-log record"


def _cli(server: Any, *args: str) -> Any:
    """`ferrymq ARGS --json` as an operator runs it; its JSON output."""
    proc = run_ferrymq(*args, "--json", env=dict(os.environ, FERRYMQ_NAMESRV=server.namesrv))
    assert proc.returncode == 0, (proc.stdout, proc.stderr)
    return json.loads(proc.stdout)


def _body(i: int) -> bytes:
    return f"body-{i:05d}-".encode() * 8


def _send_all(server: Any) -> None:
    """TOPIC with one queue, and the N messages sent to it one by one."""
    with AdminClient(server.namesrv) as admin:
        admin.create_topic(TOPIC, 1)
    with Producer("p-dmg", server.namesrv, route_refresh_interval=0.3) as producer:
        for i in range(N):
            producer.send(Message(TOPIC, _body(i)))


def _fill(store_dir: Path) -> list[tuple[int, int]]:
    """N messages on queue 0, then a clean stop. Returns the (phys, size) of each record, as
    the consume queue file holds them."""
    server = start_standalone(store_dir)
    try:
        _send_all(server)
    finally:
        assert server.stop() == 0
    cq = (store_dir / "consumequeue" / TOPIC / "0" / f"{0:020d}").read_bytes()
    entries = [(phys, size) for phys, size, _tag in ENTRY.iter_unpack(cq)]
    assert len(entries) == N
    return entries


def _segment(store_dir: Path) -> Path:
    (seg,) = sorted((store_dir / "commitlog").iterdir())
    return seg


def _flip(path: Path, at: int) -> None:
    with path.open("r+b") as fh:
        fh.seek(at)
        byte = fh.read(1)
        fh.seek(at)
        fh.write(bytes([byte[0] ^ 0x41]))


def _recording_consumer(server: Any, group: str) -> tuple[PushConsumer, list[bytes]]:
    """A PushConsumer of TOPIC from the first offset (not started) and the bodies it gets."""
    got: list[bytes] = []
    lock = threading.Lock()

    def listener(msgs: list[MessageExt], ctx: Any) -> ConsumeStatus:
        with lock:
            got.extend(m.body for m in msgs)
        return ConsumeStatus.CONSUME_SUCCESS

    consumer = PushConsumer(group, server.namesrv,
                            consume_from_where=ConsumeFromWhere.FIRST_OFFSET, **FAST_CONSUMER)
    consumer.subscribe(TOPIC)
    consumer.register_listener(listener)
    return consumer, got


def _consume_all(store_dir: Path, expect: set[bytes], end_offset: int, *extra: str,
                 operator: Callable[[Any, list[bytes]], None] | None = None,
                 ) -> tuple[list[bytes], list[str]]:
    """Start the server again (with `extra` flags) and a PushConsumer from the first offset;
    `operator` runs once the consumer started; then wait until every expected body arrived
    and the committed offset reached `end_offset`."""
    server = start_standalone(store_dir, *extra)
    consumer, got = _recording_consumer(server, "g-dmg")
    try:
        with AdminClient(server.namesrv) as admin:
            consumer.start()
            mq = MessageQueue(TOPIC, admin.message_queues(TOPIC)[0].broker_name, 0)
            if operator is not None:
                operator(server, got)
            wait_until(lambda: expect <= set(got), timeout=30, message="every good message")
            wait_until(lambda: admin.query_consumer_offset("g-dmg", mq) == end_offset,
                       timeout=30, message=f"committed offset {end_offset}")
    finally:
        consumer.shutdown()
        server.stop()
    return got, list(server.log_lines)


def test_flipped_body_byte_is_skipped_reported_once_and_passed(tmp_path: Path) -> None:
    store_dir = tmp_path / "store"
    entries = _fill(store_dir)
    seg = _segment(store_dir)
    phys, _size = entries[DAMAGED]
    body_at = seg.read_bytes().index(_body(DAMAGED), phys)
    _flip(seg, body_at + 3)
    good = {_body(i) for i in range(N) if i != DAMAGED}
    got, lines = _consume_all(store_dir, good, N)
    assert set(got) == good  # the damaged body was never handed over, altered or not
    reports = [ln for ln in lines if REPORT in ln]
    assert len(reports) == 1, reports
    assert str(seg) in reports[0] and f"offset {phys}" in reports[0]


def test_flipped_length_byte_does_not_stall_the_queue(tmp_path: Path) -> None:
    store_dir = tmp_path / "store"
    entries = _fill(store_dir)
    seg = _segment(store_dir)
    phys, _size = entries[DAMAGED]
    _flip(seg, phys + 3)  # the low byte of TOTALSIZE
    good = {_body(i) for i in range(N) if i != DAMAGED}
    got, lines = _consume_all(store_dir, good, N)
    assert set(got) == good
    reports = [ln for ln in lines if REPORT in ln]
    assert len(reports) == 1, reports
    assert f"offset {phys}" in reports[0]


def test_tail_cut_after_a_clean_stop_is_recovered(tmp_path: Path) -> None:
    store_dir = tmp_path / "store"
    entries = _fill(store_dir)
    seg = _segment(store_dir)
    cut_at = entries[N - 4][0] + 10  # inside the fourth record from the end
    with seg.open("r+b") as fh:
        fh.truncate(cut_at)
    good = {_body(i) for i in range(N - 4)}
    got, lines = _consume_all(store_dir, good, N - 4)
    assert set(got) == good
    assert any("tail was cut" in ln for ln in lines), lines[-20:]


def test_stop_policy_holds_the_queue_until_an_operator_skips_the_range(tmp_path: Path) -> None:
    store_dir = tmp_path / "store"
    entries = _fill(store_dir)
    seg = _segment(store_dir)
    phys, size = entries[DAMAGED]
    _flip(seg, seg.read_bytes().index(_body(DAMAGED), phys) + 1)
    config = tmp_path / "broker.toml"
    config.write_text('on_corrupt_record = "stop"\n')
    before = {_body(i) for i in range(DAMAGED)}
    seen: dict[str, Any] = {}

    def operator(server: Any, got: list[bytes]) -> None:
        wait_until(lambda: before <= set(got), timeout=30, message="messages before the damage")
        damage = wait_until(lambda: [r for r in _cli(server, "store", "damage")["records"]
                                     if r["topic"]], timeout=30, message="the damage reported")
        seen["damage"] = damage
        seen["held"] = set(got)
        seen["skip"] = _cli(server, "store", "skip", TOPIC, "0", str(DAMAGED), str(DAMAGED + 1))
        seen["after_skip"] = _cli(server, "store", "damage")["skipped"]

    good = {_body(i) for i in range(N) if i != DAMAGED}
    got, _lines = _consume_all(store_dir, good, N, "--config", str(config), operator=operator)
    assert set(got) == good
    assert seen["held"] == before  # nothing past the damage before the skip
    (rec,) = seen["damage"]
    assert (rec["topic"], rec["queue_id"], rec["queue_offset"]) == (TOPIC, 0, DAMAGED)
    assert (rec["phys_offset"], rec["size"], rec["segment"]) == (phys, size, str(seg))
    assert seen["skip"]["brokers"] and seen["skip"]["from"] == DAMAGED
    assert [(s["topic"], s["queue_id"], s["from_offset"], s["to_offset"])
            for s in seen["after_skip"]] == [(TOPIC, 0, DAMAGED, DAMAGED + 1)]


def test_the_client_drops_a_body_damaged_after_the_broker_wrote_it(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """A record this run wrote is trusted by the broker's reads (the scrub checks it at the
    next start); damaged on disk meanwhile, it reaches the client, whose CRC check drops it."""
    caplog.set_level(logging.ERROR, logger="ferrymq.client")
    server = start_standalone(tmp_path / "store")
    consumer, got = _recording_consumer(server, "g-crc")
    try:
        _send_all(server)
        with AdminClient(server.namesrv) as admin:
            seg = _segment(tmp_path / "store")
            _flip(seg, seg.read_bytes().index(_body(DAMAGED)) + 4)
            consumer.start()
            mq = MessageQueue(TOPIC, admin.message_queues(TOPIC)[0].broker_name, 0)
            good = {_body(i) for i in range(N) if i != DAMAGED}
            wait_until(lambda: good <= set(got), timeout=30, message="every good message")
            wait_until(lambda: admin.query_consumer_offset("g-crc", mq) == N, timeout=30,
                       message=f"committed offset {N}")
    finally:
        consumer.shutdown()
        server.stop()
    assert set(got) == good
    errors = [r.getMessage() for r in caplog.records if "fails its body CRC" in r.getMessage()]
    assert len(errors) == 1 and f"queue offset {DAMAGED}" in errors[0], errors
