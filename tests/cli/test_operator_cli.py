"""Operator commands against two real brokers (broker-a in a standalone process with the name
server, broker-b a `ferrymq broker` process): topic route/clusters/create --broker, taking a
broker out of writes and back, the name server's KV config and configuration, the send round
trip. The commands run in this process (cli_util.ferrymq_at) against the real servers."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from cli_util import ferrymq_at, json_at

from conftest import start_standalone
from ferrymq import Message, Producer
from ferrymq.client.admin import AdminClient
from ferrymq.embedded.process import ServerProcess
from waits import wait_until


@pytest.fixture(scope="module")
def two_brokers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SimpleNamespace]:
    base = tmp_path_factory.mktemp("operator")
    server = start_standalone(base / "a", "--grpc-port", "-1")
    conf = base / "broker-b.toml"
    conf.write_text("max_reconsume_times = 16\n", encoding="utf-8")
    ready: dict[str, str] = {}

    def argv() -> list[str]:
        # A restart keeps the ports the first start was given.
        return ["broker", "--namesrv", server.namesrv, "--broker-name", "broker-b", "--config", str(conf),
                "--store-dir", str(base / "b"), "--broker-port", ready.get("broker", "127.0.0.1:0").rsplit(":")[1],
                "--ha-port", "0", "--grpc-port", "-1"]

    broker_b = ServerProcess("broker-b", argv, base / "broker-b.log", "broker")
    ready.update(broker_b.start())
    try:
        with AdminClient(server.namesrv) as admin:
            wait_until(lambda: set(admin.brokers()) == {"broker-a", "broker-b"}, what="both brokers registered")
        yield SimpleNamespace(namesrv=server.namesrv, broker_b=broker_b, conf=conf)
    finally:
        broker_b.stop()
        server.stop()


def test_topic_route_clusters_and_create_on_one_broker_or_cluster(two_brokers: Any) -> None:
    ns = two_brokers.namesrv
    created = json_at(ns, "topic", "create", "op-one", "--queues", "2", "--broker", "broker-b")
    assert created["brokers"] == ["broker-b"]
    route = json_at(ns, "topic", "route", "op-one")
    assert [(q["brokerName"], q["perm"], q["writeQueueNums"]) for q in route["queueDatas"]] == [("broker-b", 6, 2)]
    assert [b["brokerName"] for b in route["brokerDatas"]] == ["broker-b"]
    assert json_at(ns, "topic", "clusters", "op-one") == {"topic": "op-one", "clusters": ["DefaultCluster"]}

    both = json_at(ns, "topic", "create", "op-all", "--cluster", "DefaultCluster")
    assert both["brokers"] == ["broker-a", "broker-b"]
    code, out, _ = ferrymq_at(ns, "topic", "route", "op-all")
    assert code == 0 and "broker-a" in out and "broker-b" in out and "rw (6)" in out

    err = json_at(ns, "topic", "create", "op-none", "--broker", "nosuch", exit_code=1)["error"]
    assert err["type"] == "UnknownBrokerError" and err["known_brokers"] == ["broker-a", "broker-b"]
    # An unknown cluster is named as such (it said "no broker is registered", with two there).
    err = json_at(ns, "topic", "create", "op-none", "--cluster", "NoCluster", exit_code=1)["error"]
    assert (err["type"], err["cluster_name"], err["known_clusters"]) == (
        "UnknownClusterError", "NoCluster", ["DefaultCluster"])
    assert "no cluster named 'NoCluster'" in err["message"]
    err = json_at(ns, "topic", "route", "op-missing", exit_code=1)["error"]
    assert err["type"] == "NoRouteError" and "op-missing" in err["message"]


def test_a_broker_out_of_writes_loses_the_producers_sends_until_it_gets_them_back(two_brokers: Any) -> None:
    ns = two_brokers.namesrv
    json_at(ns, "topic", "create", "op-perm", "--queues", "2")
    producer = Producer("op-perm-p", ns, route_refresh_interval=0.1)
    producer.start()
    try:
        def brokers_of_sends(n: int = 8) -> set[str]:
            return {producer.send(Message("op-perm", b"x")).broker for _ in range(n)}

        assert brokers_of_sends() == {"broker-a", "broker-b"}
        wiped = json_at(ns, "broker", "wipe-write-perm", "broker-a")
        # broker-a serves TBW102, the schedule and timer topics, SELF_TEST_TOPIC and op-perm
        assert wiped["broker"] == "broker-a" and wiped["writable"] is False
        assert wiped["namesrvs"][ns] >= 2
        route = json_at(ns, "topic", "route", "op-perm")
        assert {q["brokerName"]: q["perm"] for q in route["queueDatas"]} == {"broker-a": 4, "broker-b": 6}
        wait_until(lambda: brokers_of_sends() == {"broker-b"}, what="sends to leave broker-a")
        # A topic of broker-a alone has nowhere to go; the send says what gives writes back.
        json_at(ns, "topic", "create", "op-perm-a", "--broker", "broker-a")
        refused = json_at(ns, "send", "op-perm-a", "x", exit_code=1)["error"]["message"]
        assert "no queue of the topic is writable on broker-a" in refused, refused
        assert "ferrymq broker add-write-perm" in refused and "--perm rw" in refused, refused

        back = json_at(ns, "broker", "add-write-perm", "broker-a")
        assert back["writable"] is True
        wait_until(lambda: "broker-a" in brokers_of_sends(), what="sends to come back to broker-a")
        err = json_at(ns, "broker", "wipe-write-perm", "broker-z", exit_code=1)["error"]
        assert err["type"] == "UnknownBrokerError"
    finally:
        producer.shutdown()


def test_namesrv_kv_config_and_configuration(two_brokers: Any) -> None:
    ns = two_brokers.namesrv
    json_at(ns, "topic", "create", "op-order", "--queues", "2", "--broker", "broker-a")
    put = json_at(ns, "namesrv", "kv", "put", "ORDER_TOPIC_CONFIG", "op-order", "broker-a:2")
    assert put["namesrvs"] == [ns]
    assert json_at(ns, "namesrv", "kv", "get", "ORDER_TOPIC_CONFIG", "op-order")["value"] == "broker-a:2"
    listed = json_at(ns, "namesrv", "kv", "get", "ORDER_TOPIC_CONFIG")
    assert listed == {"namespace": "ORDER_TOPIC_CONFIG", "table": {"op-order": "broker-a:2"}}
    # RocketMQ adds the order config to routes only with orderMessageEnable on.
    assert "orderTopicConf" not in json_at(ns, "topic", "route", "op-order")
    config = json_at(ns, "namesrv", "config", "get")[ns]
    assert config["orderMessageEnable"] == "false" and config["listenPort"] == ns.rsplit(":")[1]
    json_at(ns, "namesrv", "config", "update", "orderMessageEnable=true")
    code, out, _ = ferrymq_at(ns, "namesrv", "config", "update", "orderMessageEnable=true")
    assert code == 0 and "in memory only" in out, out
    assert json_at(ns, "topic", "route", "op-order")["orderTopicConf"] == "broker-a:2"
    assert json_at(ns, "namesrv", "config", "get", "orderMessageEnable") == {
        ns: {"orderMessageEnable": "true"}}
    refused = json_at(ns, "namesrv", "config", "update", "listenPort=1", exit_code=1)["error"]
    assert refused["code_name"] == "INVALID_PARAMETER" and "listenPort" in refused["message"]

    json_at(ns, "namesrv", "kv", "delete", "ORDER_TOPIC_CONFIG", "op-order")
    missing = json_at(ns, "namesrv", "kv", "get", "ORDER_TOPIC_CONFIG", "op-order", exit_code=1)
    assert missing["error"]["type"] == "NotFound"
    assert "orderTopicConf" not in json_at(ns, "topic", "route", "op-order")


def test_send_rt_and_clean_unused_reach_every_broker(two_brokers: Any) -> None:
    ns = two_brokers.namesrv
    rows = json_at(ns, "cluster", "send-rt", "--count", "2")
    assert [(r["broker"], r["queue_id"], r["ok"]) for r in rows] == [
        ("broker-a", 0, True), ("broker-a", 0, True), ("broker-b", 0, True), ("broker-b", 0, True)]
    assert all(r["rt_ms"] > 0 and r["error"] is None for r in rows)
    code, out, _ = ferrymq_at(ns, "cluster", "send-rt", "--count", "1")
    assert code == 0 and "SELF_TEST_TOPIC" in out and "broker-b: avg" in out
    # Nothing to clean on masters (tests/broker/test_clean_unused.py makes a slave's orphan).
    cleaned = json_at(ns, "topic", "clean-unused", "--cluster", "DefaultCluster")
    assert [(c["broker"], c["broker_id"], c["topics"]) for c in cleaned] == [("broker-a", 0, []), ("broker-b", 0, [])]
    assert [c["broker"] for c in json_at(ns, "topic", "clean-unused", "--broker", "broker-b")] == ["broker-b"]


def test_kv_config_survives_a_restart_in_its_file(tmp_path: Path) -> None:
    from ferrymq.namesrv.kvconfig import KvConfig

    path = tmp_path / "kvConfig.json"
    kv = KvConfig(path)
    kv.put("ORDER_TOPIC_CONFIG", "t", "broker-a:4")
    kv.put("NS", "k", "v")
    assert kv.delete("NS", "k") and not kv.delete("NS", "k")
    again = KvConfig(path)
    assert again.get("ORDER_TOPIC_CONFIG", "t") == "broker-a:4" and again.namespace("NS") == {}
    assert KvConfig(None).get("ORDER_TOPIC_CONFIG", "t") is None


def test_broker_config_update_is_written_back_and_kept_by_a_restart(two_brokers: Any) -> None:
    """Last in the module: it restarts broker-b."""
    ns, conf = two_brokers.namesrv, two_brokers.conf
    updated = json_at(ns, "broker", "config", "update", "maxReconsumeTimes=5", "rejectTransactionMessage=true",
                              "transactionTimeOut=9000", "slaveReadEnable=true", "--broker", "broker-b")
    assert updated["updated"]["rejectTransactionMessage"] == "true" and updated["not_persisted"] == []
    # broker-a (a standalone without --config) takes it too, until it restarts: said at once.
    both = json_at(ns, "broker", "config", "update", "longPollingEnable=true")
    [unkept] = both["not_persisted"]
    assert unkept in both["brokers"] and len(both["brokers"]) == 2
    code, out, _ = ferrymq_at(ns, "broker", "config", "update", "longPollingEnable=true")
    assert code == 0 and f"not kept across a restart on {unkept}: started without --config" in out
    text = conf.read_text(encoding="utf-8")
    assert "max_reconsume_times = 5\n" in text and "16" not in text  # its own line, changed in place
    assert "rejectTransactionMessage" not in text and "reject_transaction_message = true\n" in text
    assert "transaction_timeout_ms = 9000\n" in text and "slave_read_enable = true\n" in text
    refused = json_at(ns, "broker", "config", "update", "listenPort=1", "--broker", "broker-b",
                              exit_code=1)["error"]
    assert refused["code_name"] == "NO_PERMISSION" and "listenPort" in refused["message"]
    assert conf.read_text(encoding="utf-8") == text

    two_brokers.broker_b.restart()
    keys = ("maxReconsumeTimes", "rejectTransactionMessage", "transactionTimeoutMs", "slaveReadEnable")

    def config_after_restart() -> Any:
        code, out, _ = ferrymq_at(ns, "broker", "config", "get", "broker-b", *keys, "--json")
        return code == 0 and json.loads(out)

    kept = wait_until(config_after_restart, what="broker-b back with its configuration")
    assert kept == {"maxReconsumeTimes": "5", "rejectTransactionMessage": "true",
                    "transactionTimeoutMs": "9000", "slaveReadEnable": "true"}
