"""The `ferrymq` client commands as a user runs them: real processes, real broker, the JSON
shapes other tools rely on, and exit codes."""

from __future__ import annotations

import base64
import json
import subprocess
import sys
from typing import Any

import pytest
from cli_util import ferrymq, json_error, json_out

from ferrymq import (
    AdminClient,
    ConsumeFromWhere,
    ConsumeStatus,
    Message,
    Producer,
    PushConsumer,
    SendError,
    SendStatus,
)
from waits import wait_until

# The tests here each use their own topics and groups: one server serves the module.
pytestmark = pytest.mark.shared_standalone


def test_topic_send_consume_and_progress_print_the_documented_json(standalone: Any) -> None:
    assert json_out(standalone, "topic", "create", "cli-t", "--queues", "2")["brokers"] == [
        "broker-a"
    ]
    assert "cli-t" in json_out(standalone, "topic", "list")

    sent = json_out(standalone, "send", "cli-t", "hello", "--tags", "TagA", "--keys", "k1")
    assert set(sent) == {"status", "msg_id", "offset_msg_id", "queue_id", "queue_offset"}
    assert sent["status"] == "SEND_OK"
    binary = subprocess.run(
        [
            sys.executable,
            "-m",
            "ferrymq",
            "send",
            "cli-t",
            "-",
            "--json",
            "--namesrv",
            standalone.namesrv,
        ],
        input=b"\xff\xfe\x00",
        capture_output=True,
        timeout=60,
        check=True,
    )
    assert json.loads(binary.stdout)["status"] == "SEND_OK"

    status = json_out(standalone, "topic", "status", "cli-t")
    # The documented fields; rows may gain others, never lose these.
    assert all(set(r) >= {"broker", "last_update", "max_offset", "min_offset", "queue_id"} for r in status)
    assert sum(r["max_offset"] for r in status) == 2

    out = ferrymq(
        standalone,
        "consume",
        "cli-t",
        "--group",
        "cli-g",
        "--from",
        "first",
        "--count",
        "2",
        "--timeout",
        "30",
        "--json",
    ).stdout
    lines = [json.loads(line) for line in out.splitlines()]
    assert len(lines) == 2
    text = next(m for m in lines if not m.get("body_b64"))
    raw = next(m for m in lines if m.get("body_b64"))
    assert set(text) == {
        "msg_id",
        "topic",
        "queue_id",
        "queue_offset",
        "keys",
        "tags",
        "body",
        "reconsume_times",
    }
    assert (text["body"], text["tags"], text["keys"], text["msg_id"]) == (
        "hello",
        "TagA",
        "k1",
        sent["msg_id"],
    )
    assert base64.b64decode(raw["body"]) == b"\xff\xfe\x00"

    progress = json_out(standalone, "group", "progress", "cli-g")
    rows = [r for r in progress if r["topic"] == "cli-t"]
    # Rows gain fields, never lose them (read_from, the master's or a slave's answer; RocketMQ's
    # lastTimestamp, the store time of the last message consumed, 0 when none).
    documented = {"broker", "broker_offset", "consumer_offset", "lag", "queue_id", "topic", "read_from",
                  "last_timestamp"}
    assert all(documented <= set(r) for r in rows), rows
    assert {r["read_from"] for r in rows} == {"master"}
    assert sum(r["consumer_offset"] for r in rows) == 2 and sum(r["lag"] for r in rows) == 0
    assert all(r["last_timestamp"] > 0 for r in rows if r["consumer_offset"] > 0), rows

    # It committed what it printed: the same group has nothing more to show.
    again = ferrymq(
        standalone,
        "consume",
        "cli-t",
        "--group",
        "cli-g",
        "--count",
        "1",
        "--timeout",
        "1.5",
        check=False,
    )
    assert again.returncode == 1 and "received 0 of 1" in again.stderr

    reset = json_out(standalone, "group", "reset-offset", "cli-g", "--topic", "cli-t", "--to-start")
    assert sum(o["offset"] for o in reset["offsets"]) == 0
    assert (
        sum(
            r["lag"]
            for r in json_out(standalone, "group", "progress", "cli-g")
            if r["topic"] == "cli-t"
        )
        == 2
    )

    shown = json_out(standalone, "msg", "show", sent["offset_msg_id"])
    assert shown["body"] == "hello" and shown["msg_id"] == sent["msg_id"]
    by_uniq = json_out(standalone, "msg", "show", sent["msg_id"], "--topic", "cli-t")
    assert by_uniq["offset_msg_id"] == sent["offset_msg_id"]
    found = json_out(standalone, "msg", "find", "--topic", "cli-t", "--key", "k1")
    assert [m["msg_id"] for m in found] == [sent["msg_id"]]


def dead_letter(standalone: Any, group: str, topic: str, count: int) -> list[dict[str, Any]]:
    """Run a consumer of `group` that fails everything (no retries) until `dlq list` shows
    `count` entries; returns them."""
    failing = PushConsumer(
        group,
        standalone.namesrv,
        max_reconsume_times=0,
        consume_from_where=ConsumeFromWhere.FIRST_OFFSET,
        rebalance_interval=0.3,
        route_refresh_interval=0.3,
        pull_suspend_timeout=1.0,
    )
    failing.subscribe(topic)
    failing.register_listener(lambda msgs, ctx: ConsumeStatus.RECONSUME_LATER)
    with failing:
        listed: list[dict[str, Any]] = wait_until(
            lambda: (lambda rows: rows if len(rows) == count else None)(
                json_out(standalone, "dlq", "list", group)
            ),
            what=f"{count} DLQ entries",
        )
    return listed


def test_dlq_list_and_resend_drive_messages_back_once(standalone: Any) -> None:
    ferrymq(standalone, "topic", "create", "cli-dlq", "--queues", "1")
    sent = json_out(standalone, "send", "cli-dlq", "poison")
    listed = dead_letter(standalone, "cli-dg", "cli-dlq", 1)
    entry = listed[0]
    assert set(entry) == {
        "msg_id",
        "original_msg_id",
        "original_topic",
        "reconsume_times",
        "store_timestamp",
        "body_preview",
    }
    assert (entry["msg_id"], entry["original_topic"], entry["body_preview"]) == (
        sent["msg_id"],
        "cli-dlq",
        "poison",
    )

    resent = json_out(standalone, "dlq", "resend", "cli-dg", "--all")
    assert [m["msg_id"] for m in resent["resent"]] == [sent["msg_id"]]
    assert json_out(standalone, "dlq", "list", "cli-dg") == []  # not resent twice
    assert json_out(standalone, "dlq", "resend", "cli-dg", "--all")["resent"] == []

    got: list[Any] = []
    healthy = PushConsumer(
        "cli-dg",
        standalone.namesrv,
        rebalance_interval=0.3,
        route_refresh_interval=0.3,
        pull_suspend_timeout=1.0,
    )
    healthy.subscribe("cli-dlq")
    healthy.register_listener(lambda msgs, ctx: got.extend(msgs) or ConsumeStatus.CONSUME_SUCCESS)
    with healthy:
        wait_until(lambda: got, what="the re-driven message")
    (m,) = got
    assert (m.body, m.topic, m.reconsume_times, m.msg_id) == (
        b"poison",
        "cli-dlq",
        0,
        sent["msg_id"],
    )


def test_failures_exit_1_with_a_message_and_bad_usage_exits_2(standalone: Any) -> None:
    missing = ferrymq(standalone, "msg", "show", "0A0A0A0A00002A9F0000000000000000", check=False)
    assert missing.returncode == 1 and missing.stderr.startswith("ferrymq:")
    no_topic = ferrymq(standalone, "topic", "status", "nope", check=False)
    assert no_topic.returncode == 1 and "no route" in no_topic.stderr
    bad_name = ferrymq(standalone, "send", "bad topic!", "x", check=False)
    assert bad_name.returncode == 1 and "invalid topic name" in bad_name.stderr
    usage = ferrymq(standalone, "group", "reset-offset", "g", "--topic", "t", check=False)
    assert usage.returncode == 2
    unreachable = subprocess.run(
        [sys.executable, "-m", "ferrymq", "topic", "list", "--namesrv", "127.0.0.1:1"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert unreachable.returncode == 1 and "cannot reach" in unreachable.stderr


def test_namesrv_defaults_to_the_environment(standalone: Any) -> None:
    out = ferrymq(standalone, "topic", "list", "--json")  # FERRYMQ_NAMESRV only
    assert isinstance(json.loads(out.stdout), list)


def test_dlq_resend_by_id_is_not_sent_again_by_all(standalone: Any) -> None:
    ferrymq(standalone, "topic", "create", "cli-dlq2", "--queues", "1")
    first = json_out(standalone, "send", "cli-dlq2", "older")
    second = json_out(standalone, "send", "cli-dlq2", "newer")
    listed = dead_letter(standalone, "cli-dg2", "cli-dlq2", 2)
    by_time = [e["msg_id"] for e in sorted(listed, key=lambda e: e["store_timestamp"])]
    assert set(by_time) == {first["msg_id"], second["msg_id"]}
    newest = by_time[-1]  # behind the other one in the DLQ queue

    one = json_out(standalone, "dlq", "resend", "cli-dg2", "--msg-id", newest)
    assert [m["msg_id"] for m in one["resent"]] == [newest] and one["held_back"] == 0
    assert [e["msg_id"] for e in json_out(standalone, "dlq", "list", "cli-dg2")] == by_time[:1]
    rest = json_out(standalone, "dlq", "resend", "cli-dg2", "--all")
    assert [m["msg_id"] for m in rest["resent"]] == by_time[:1]  # not the one sent by id
    assert json_out(standalone, "dlq", "list", "cli-dg2") == []
    assert json_out(standalone, "dlq", "resend", "cli-dg2", "--all")["resent"] == []


def test_topic_message_types_are_created_shown_and_checked_on_send(standalone: Any) -> None:
    """RocketMQ 5's message.type: --type sets it, --order is FIFO, MIXED needs the broker's
    enable_mixed_message_type, and a typed topic refuses a remoting send of another type
    with RocketMQ's proxy answer (an untyped topic is not checked over remoting)."""
    created = json_out(standalone, "topic", "create", "cli-delay", "--queues", "1", "--type", "DELAY")
    assert created["message_type"] == "DELAY"
    ferrymq(standalone, "topic", "create", "cli-fifo", "--queues", "1", "--order")
    mixed = json_error(standalone, "topic", "create", "cli-mixed", "--type", "MIXED")
    assert "MIXED message type is not supported." in mixed["message"]
    assert {r["message_type"] for r in json_out(standalone, "topic", "status", "cli-delay")} == {"DELAY"}
    with AdminClient(standalone.namesrv) as admin:
        admin.create_topic("cli-plain", 1)
        assert admin.topic_message_types("cli-fifo") == {"broker-a": "FIFO"}
        assert admin.topic_message_types("cli-plain") == {"broker-a": "NORMAL"}
    producer = Producer("cli-types-pg", standalone.namesrv)
    producer.start()
    try:
        assert producer.send(_delayed("cli-delay")).status is SendStatus.SEND_OK
        with pytest.raises(SendError) as refused:
            producer.send(Message("cli-delay", b"now"))
        assert "the expected type is DELAY, but actual type is NORMAL" in str(refused.value)
        # An ordered 4.x send names its queue and carries no sharding key: FIFO takes it.
        assert producer.send(Message("cli-fifo", b"in order")).status is SendStatus.SEND_OK
        with pytest.raises(SendError):
            producer.send(_delayed("cli-fifo"))
        assert producer.send(_delayed("cli-plain")).status is SendStatus.SEND_OK
    finally:
        producer.shutdown()


def _delayed(topic: str) -> Message:
    msg = Message(topic, b"later")
    msg.delay_level = 1
    return msg
