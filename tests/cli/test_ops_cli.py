"""Operations commands and how the CLI reports failures, through the real `ferrymq` command
against a real standalone server."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from cli_util import ferrymq, json_error, json_out

from conftest import start_standalone
from ferrymq import ConsumeFromWhere, ConsumeStatus, PushConsumer, __version__
from ferrymq.common.ids import decode_uniq_id
from waits import wait_until

# The tests here each use their own topics and groups: one server serves the module.
pytestmark = pytest.mark.shared_standalone


def test_version() -> None:
    import subprocess
    import sys

    out = subprocess.run(
        [sys.executable, "-m", "ferrymq", "--version"], capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0 and out.stdout.strip() == f"ferrymq {__version__}"


def test_msg_show_finds_a_unique_id_without_topic_and_an_offset_id(standalone: Any) -> None:
    ferrymq(standalone, "topic", "create", "ops-show", "--queues", "2")
    ferrymq(standalone, "topic", "create", "ops-other", "--queues", "1")
    ferrymq(standalone, "send", "ops-other", "noise")
    sent = json_out(standalone, "send", "ops-show", "hello", "--keys", "k1")
    decode_uniq_id(sent["msg_id"])  # it is a unique id, 32 hex digits like an offset id

    by_uniq = json_out(standalone, "msg", "show", sent["msg_id"])  # no --topic
    assert (by_uniq["topic"], by_uniq["body"], by_uniq["offset_msg_id"]) == (
        "ops-show",
        "hello",
        sent["offset_msg_id"],
    )
    by_offset = json_out(standalone, "msg", "show", sent["offset_msg_id"])
    assert by_offset["msg_id"] == sent["msg_id"]

    unknown = sent["msg_id"][:-4] + "FFFF"
    err = json_error(standalone, "msg", "show", unknown)
    assert err["type"] == "MessageNotFoundError" and unknown in err["message"]
    assert "port" not in err["message"]  # no garbage port dialled
    err = json_error(standalone, "msg", "show", "not-an-id")
    assert err["type"] == "MessageIdError"


def test_dlq_resend_refuses_msg_id_together_with_all(standalone: Any) -> None:
    both = ferrymq(standalone, "dlq", "resend", "g", "--msg-id", "X", "--all", check=False)
    assert both.returncode == 2
    assert "--all: not allowed with argument --msg-id" in both.stderr
    err = json_error(standalone, "dlq", "resend", "g", "--msg-id", "X", "--all", exit_code=2)
    assert err["type"] == "UsageError" and "not allowed" in err["message"]
    neither = ferrymq(standalone, "dlq", "resend", "g", check=False)
    assert neither.returncode == 2 and "one of the arguments" in neither.stderr


def test_tables_keep_ids_whole_at_80_columns(standalone: Any) -> None:
    ferrymq(standalone, "topic", "create", "ops-wide", "--queues", "1")
    sent = json_out(
        standalone, "send", "ops-wide", "a body long enough to need folding " * 3, "--keys", "wk"
    )
    out = ferrymq(
        standalone, "msg", "find", "--topic", "ops-wide", "--key", "wk", env={"COLUMNS": "80"}
    ).stdout
    assert sent["msg_id"] in out and sent["offset_msg_id"] in out
    get = ferrymq(standalone, "msg", "get", "ops-wide", "0", "0", env={"COLUMNS": "80"}).stdout
    assert sent["msg_id"] in get and sent["offset_msg_id"] in get


@pytest.fixture
def small_broker(tmp_path: Path) -> Any:
    conf = tmp_path / "broker.toml"
    conf.write_text("max_message_size = 1024\n")
    server = start_standalone(tmp_path / "store", "--config", str(conf))
    try:
        yield server
    finally:
        server.stop()


def test_errors_name_the_operation_and_code_on_one_line_and_json_keeps_the_exit_code(
    small_broker: Any,
) -> None:
    ferrymq(small_broker, "topic", "create", "ops-big", "--queues", "1")
    body = "x" * 2000  # passes the client's 4 MiB check, over the broker's 1 KiB
    table = ferrymq(small_broker, "send", "ops-big", body, check=False)
    assert table.returncode == 1
    line = table.stderr.strip()
    assert "\n" not in line, table.stderr
    assert line.startswith("ferrymq: send to topic ops-big failed: MESSAGE_ILLEGAL"), line
    assert "request 310" not in line and "code 13" not in line

    err = json_error(small_broker, "send", "ops-big", body, exit_code=1)
    assert err["type"] == "SendError"
    assert (err["code"], err["code_name"], err["topic"]) == (13, "MESSAGE_ILLEGAL", "ops-big")
    assert err["retriable"] is False and err["message"] == line.removeprefix("ferrymq: ")

    missing = json_error(small_broker, "topic", "status", "ops-nope")
    assert missing["type"] == "NoRouteError" and "no route" in missing["message"]


@pytest.mark.own_standalone  # it reads the broker's message counters
def test_cluster_list_and_broker_status(standalone: Any) -> None:
    ferrymq(standalone, "topic", "create", "ops-stat", "--queues", "1")
    for i in range(3):
        ferrymq(standalone, "send", "ops-stat", f"m{i}")
    json_out(standalone, "msg", "get", "ops-stat", "0", "0", "--count", "3")
    (row,) = json_out(standalone, "cluster", "list")
    assert (row["runtime"]["msgPutTotalTodayNow"], row["runtime"]["msgGetTotalTodayNow"]) == (
        "3",
        "3",
    )
    assert len(row["runtime"]["putTps"].split()) == 3
    assert {k: row[k] for k in ("cluster", "broker", "broker_id", "role", "addr", "error")} == {
        "cluster": "DefaultCluster",
        "broker": "broker-a",
        "broker_id": 0,
        "role": "MASTER",
        "addr": standalone.broker,
        "error": None,
    }
    assert int(row["runtime"]["bootTimestamp"]) > 0
    assert "commitLogMaxOffset" in row["runtime"]
    table = ferrymq(standalone, "cluster", "list").stdout
    assert standalone.broker in table and "DefaultCluster" in table

    status = json_out(standalone, "broker", "status", "broker-a")
    assert status["addr"] == standalone.broker and status["runtime"]["topicCount"].isdigit()
    assert json_out(standalone, "broker", "status", standalone.broker)["broker"] == "broker-a"
    err = json_error(standalone, "broker", "status", "broker-z")
    assert "broker-z" in err["message"]


def test_a_broker_name_not_registered_is_said_so_with_the_known_names(standalone: Any) -> None:
    for command in (("broker", "status"), ("broker", "config", "get")):
        err = json_error(standalone, *command, "nosuch")
        assert err["type"] == "UnknownBrokerError", err
        assert (err["broker_name"], err["known_brokers"], err["retriable"]) == ("nosuch", ["broker-a"], False)
        assert "no route for topic" not in err["message"], err
        assert "no broker named 'nosuch' is registered" in err["message"] and "broker-a" in err["message"]
    line = ferrymq(standalone, "broker", "status", "nosuch", check=False).stderr.strip()
    assert line == (f"ferrymq: no broker named 'nosuch' is registered with name server {standalone.namesrv} "
                    "(registered: broker-a)"), line


def test_group_connections_lists_online_consumers(standalone: Any) -> None:
    ferrymq(standalone, "topic", "create", "ops-conn", "--queues", "1")
    assert json_out(standalone, "group", "connections", "ops-cg")["connections"] == []
    consumer = PushConsumer("ops-cg", standalone.namesrv, rebalance_interval=0.3)
    consumer.subscribe("ops-conn", "TagA || TagB")
    consumer.register_listener(lambda msgs, ctx: ConsumeStatus.CONSUME_SUCCESS)
    with consumer:
        conns = wait_until(
            lambda: json_out(standalone, "group", "connections", "ops-cg")["connections"],
            timeout=30,
            what="the consumer's heartbeat",
        )
        doc = json_out(standalone, "group", "connections", "ops-cg")
    assert [c["client_id"] for c in conns] == [consumer.client_id]
    assert conns[0]["language"] == "PYTHON"
    assert doc["subscriptions"]["ops-conn"] == "TagA || TagB"
    assert doc["message_model"] == "CLUSTERING"
    table = ferrymq(standalone, "group", "connections", "ops-cg").stdout
    assert "no consumer of group ops-cg is online" in table


def test_topic_perm_update_and_delete(standalone: Any) -> None:
    ferrymq(standalone, "topic", "create", "ops-perm", "--queues", "2")
    assert json_out(standalone, "send", "ops-perm", "before")["status"] == "SEND_OK"

    done = json_out(standalone, "topic", "update", "ops-perm", "--perm", "r")
    assert (done["perm"], done["perm_name"], done["brokers"]) == (4, "r", ["broker-a"])
    refused = json_error(standalone, "send", "ops-perm", "after")
    assert refused["type"] in ("SendError", "NoRouteError"), refused
    # Still readable: the message sent before is there.
    (queue,) = [q for q in json_out(standalone, "topic", "status", "ops-perm") if q["max_offset"]]
    (got,) = json_out(standalone, "msg", "get", "ops-perm", str(queue["queue_id"]), "0")
    assert got["body"] == "before"
    json_out(standalone, "topic", "update", "ops-perm", "--perm", "rw")
    assert json_out(standalone, "send", "ops-perm", "again")["status"] == "SEND_OK"
    bad = ferrymq(standalone, "topic", "update", "ops-perm", "--perm", "x", check=False)
    assert bad.returncode == 2

    deleted = json_out(standalone, "topic", "delete", "ops-perm")
    assert deleted == {"topic": "ops-perm", "deleted": True, "brokers": ["broker-a"]}
    assert "ops-perm" not in json_out(standalone, "topic", "list")
    assert json_error(standalone, "topic", "status", "ops-perm")["type"] == "NoRouteError"
    assert "system topic" in json_error(standalone, "topic", "delete", "TBW102")["message"]


def test_msg_get_reads_by_queue_and_offset(standalone: Any) -> None:
    ferrymq(standalone, "topic", "create", "ops-get", "--queues", "1")
    sent = [json_out(standalone, "send", "ops-get", f"m{i}", "--tags", "T") for i in range(3)]
    one = json_out(standalone, "msg", "get", "ops-get", "0", "1")
    assert [m["body"] for m in one] == ["m1"] and one[0]["msg_id"] == sent[1]["msg_id"]
    two = json_out(standalone, "msg", "get", "ops-get", "0", "1", "--count", "5")
    assert [m["queue_offset"] for m in two] == [1, 2]
    err = json_error(standalone, "msg", "get", "ops-get", "0", "9")
    assert err["type"] == "MessageNotFoundError" and "offsets 0 to 2" in err["message"]
    assert "no readable queue 7" in json_error(standalone, "msg", "get", "ops-get", "7", "0")[
        "message"
    ]
    # Nothing was committed: no group appears.
    assert json_out(standalone, "group", "progress", "ferrymq-cli") == []


def test_reset_offset_refuses_a_group_that_does_not_exist(standalone: Any) -> None:
    ferrymq(standalone, "topic", "create", "ops-reset", "--queues", "1")
    ferrymq(standalone, "send", "ops-reset", "m")
    err = json_error(standalone, "group", "reset-offset", "ops-typo", "--topic", "ops-reset",
                     "--to-start")
    assert (err["type"], err["code_name"]) == ("GroupNotExistError", "SUBSCRIPTION_GROUP_NOT_EXIST")
    assert "ops-typo" in err["message"]
    table = ferrymq(standalone, "group", "reset-offset", "ops-typo", "--topic", "ops-reset",
                    "--to-start", check=False)
    assert table.returncode == 1 and "does not exist" in table.stderr
    assert json_out(standalone, "group", "progress", "ops-typo") == []  # not created
    # A group that consumed the topic is reset as before.
    json_out(standalone, "consume", "ops-reset", "--group", "ops-real", "--from", "first",
             "--count", "1", "--timeout", "30")
    reset = json_out(standalone, "group", "reset-offset", "ops-real", "--topic", "ops-reset",
                     "--to-start")
    assert [o["offset"] for o in reset["offsets"]] == [0]


@pytest.mark.own_standalone  # it changes the broker's configuration
def test_broker_config_get_and_runtime_update(standalone: Any) -> None:
    config = json_out(standalone, "broker", "config", "get", "broker-a")
    assert config["brokerName"] == "broker-a" and config["autoCreateTopicEnable"] == "true"
    only = json_out(standalone, "broker", "config", "get", "broker-a", "maxReconsumeTimes")
    assert only == {"maxReconsumeTimes": "16"}

    done = json_out(standalone, "broker", "config", "update", "autoCreateTopicEnable=false",
                    "maxReconsumeTimes=3")
    assert done["brokers"] == [standalone.broker]
    assert json_out(standalone, "broker", "config", "get", standalone.broker,
                    "autoCreateTopicEnable", "maxReconsumeTimes") == {
        "autoCreateTopicEnable": "false",
        "maxReconsumeTimes": "3",
    }
    # It takes effect at once: a send to an unknown topic no longer creates it.
    assert json_error(standalone, "send", "ops-never-created", "x")["type"] in (
        "SendError",
        "NoRouteError",
    )

    refused = json_error(standalone, "broker", "config", "update", "listenPort=1",
                         "--broker", "broker-a")
    assert refused["code_name"] == "NO_PERMISSION"
    assert "listenPort" in refused["message"] and "cannot change while the broker runs" in (
        refused["message"]
    )
    unknown = json_error(standalone, "broker", "config", "update", "noSuchKey=1")
    assert "unknown key" in unknown["message"]
    usage = ferrymq(standalone, "broker", "config", "update", "oops", check=False)
    assert usage.returncode == 2 and "KEY=VALUE" in usage.stderr
    assert json_out(standalone, "broker", "config", "get", "broker-a", "listenPort") != {
        "listenPort": "1"
    }


def test_msg_trace_shows_copies_and_which_groups_consumed_it(standalone: Any) -> None:
    ferrymq(standalone, "topic", "create", "ops-trace", "--queues", "1")
    sent = json_out(standalone, "send", "ops-trace", "traced", "--tags", "TagA")
    json_out(standalone, "consume", "ops-trace", "--group", "tr-cli", "--from", "first",
             "--count", "1", "--timeout", "30")

    def track_of(group: str) -> Any:
        doc = json_out(standalone, "msg", "trace", sent["msg_id"])
        return next((t for t in doc["tracks"] if t["group"] == group), None)

    got: list[Any] = []
    consumer = PushConsumer("tr-push", standalone.namesrv, rebalance_interval=0.3,
                            consume_from_where=ConsumeFromWhere.FIRST_OFFSET)
    consumer.subscribe("ops-trace", "TagA || TagB")
    consumer.register_listener(lambda msgs, ctx: got.extend(msgs) or ConsumeStatus.CONSUME_SUCCESS)
    with consumer:
        wait_until(lambda: got, timeout=30, what="the push consumer to get the message")
        track = wait_until(
            lambda: (lambda t: t if t and t["track"] == "CONSUMED" else None)(track_of("tr-push")),
            timeout=30,
            what="tr-push's offset to pass the message",
        )
        assert track["consumed"] and track["queue_offset"] == sent["queue_offset"]
        doc = json_out(standalone, "msg", "trace", sent["msg_id"], "--topic", "ops-trace")
    assert [c["topic"] for c in doc["copies"]] == ["ops-trace"]
    assert doc["copies"][0]["offset_msg_id"] == sent["offset_msg_id"]
    cli = next(t for t in doc["tracks"] if t["group"] == "tr-cli")
    assert (cli["track"], cli["consumed"]) == ("NOT_ONLINE", True)
    table = ferrymq(standalone, "msg", "trace", sent["offset_msg_id"]).stdout
    assert "tr-cli" in table and "NOT_ONLINE" in table and sent["offset_msg_id"] in table
