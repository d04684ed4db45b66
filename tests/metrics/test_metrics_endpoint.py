"""The Prometheus endpoint of a real `ferrymq standalone`: produce and consume with the clients,
scrape /metrics over HTTP, parse it with prometheus-client's parser and check the figures."""

from __future__ import annotations

import http.client
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from conftest import start_standalone
from ferrymq import (
    AdminClient,
    ConsumeFromWhere,
    ConsumeOrderlyStatus,
    ConsumeStatus,
    LitePullConsumer,
    Message,
    MessageExt,
    Producer,
    PushConsumer,
)
from ferrymq.common.message import MessageQueue
from waits import wait_until

# Client intervals shortened so the test runs in seconds; behaviour is unchanged.
FAST_CONSUMER: dict[str, Any] = dict(rebalance_interval=0.3, persist_interval=0.2, route_refresh_interval=0.3,
                                     heartbeat_interval=1.0, pull_suspend_timeout=1.0, pull_delay_on_error=0.2,
                                     shutdown_timeout=20.0)
FAST_PRODUCER: dict[str, Any] = dict(route_refresh_interval=0.3, heartbeat_interval=1.0)

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def get(addr: str, path: str = "/metrics", method: str = "GET") -> tuple[int, str, str]:
    host, port = addr.rsplit(":", 1)
    conn = http.client.HTTPConnection(host, int(port), timeout=10)
    try:
        conn.request(method, path)
        resp = conn.getresponse()
        return resp.status, resp.getheader("Content-Type") or "", resp.read().decode()
    finally:
        conn.close()


def scrape(addr: str) -> Samples:
    status, _, text = get(addr)
    assert status == 200
    return {(s.name, frozenset(s.labels.items())): s.value
            for fam in text_string_to_metric_families(text) for s in fam.samples}


def value(samples: Samples, name: str, **labels: str) -> float:
    """The one sample of `name` whose labels include `labels`; 0 when there is none."""
    found = [v for (n, ls), v in samples.items() if n == name and set(labels.items()) <= ls]
    assert len(found) <= 1, f"{name} {labels} matches {len(found)} samples"
    return found[0] if found else 0.0


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """One server for the module: the tests use their own topics and groups, and compare
    broker-wide figures as differences."""
    s = start_standalone(tmp_path_factory.mktemp("metrics") / "store", "--metrics-port", "0")
    try:
        yield s
    finally:
        s.stop()


def _fill(namesrv: str, topic: str, per_queue: int, queues: int) -> None:
    with Producer("p-metrics", namesrv, **FAST_PRODUCER) as producer:
        for q in range(queues):
            for i in range(per_queue):
                producer.send_to_queue(Message(topic, f"{q}-{i}".encode()), MessageQueue(topic, "broker-a", q))


def test_ready_line_and_http(server: Any) -> None:
    assert server.metrics.startswith("127.0.0.1:")
    status, ctype, text = get(server.metrics)
    assert status == 200 and ctype.startswith("text/plain; version=0.0.4")
    assert "# TYPE rocketmq_broker_tps gauge" in text
    assert "process_cpu_seconds_total" in text  # the process's own figures ride along
    assert get(server.metrics, "/nope")[0] == 404
    assert get(server.metrics, "/metrics", "POST")[0] == 405
    head = get(server.metrics, "/metrics", "HEAD")
    assert head[0] == 200 and head[2] == ""


def test_put_get_and_lag_per_queue(server: Any) -> None:
    admin = AdminClient(server.namesrv)
    admin.create_topic("mt", 2)
    before = scrape(server.metrics)
    _fill(server.namesrv, "mt", 5, 2)
    q0 = MessageQueue("mt", "broker-a", 0)
    consumer = LitePullConsumer("g-mt", server.namesrv, auto_commit=False,
                                consume_from_where=ConsumeFromWhere.FIRST_OFFSET, **FAST_CONSUMER)
    consumer.assign([q0])  # queue 1 stays unconsumed: its five messages are the lag
    got: list[MessageExt] = []
    with consumer:
        wait_until(lambda: got.extend(consumer.poll(0.2)) or len(got) >= 5, timeout=20, what="5 polled")
        consumer.commit()
    assert len(got) == 5
    after = scrape(server.metrics)

    def grew(name: str, **labels: str) -> float:
        return value(after, name, **labels) - value(before, name, **labels)

    assert grew("rocketmq_messages_in_total", topic="mt") == 10
    assert grew("rocketmq_throughput_in_total", topic="mt") > 10 * len(b"0-0")
    assert value(after, "rocketmq_producer_offset", topic="mt") == 10
    assert value(after, "rocketmq_producer_tps", topic="mt") > 0
    assert grew("rocketmq_brokeruntime_msg_put_total_today_now") == 10
    assert grew("ferrymq_send_latency_seconds_count") >= 10
    # rocketmq-exporter's put time distribution is the same histogram in RocketMQ's ranges.
    pmdt = sum(v for (n, _), v in after.items() if n.startswith("rocketmq_brokeruntime_pmdt_"))
    assert pmdt == value(after, "ferrymq_send_latency_seconds_count")
    stored_bytes = sum(v for (n, _), v in after.items() if n == "rocketmq_throughput_in_total")
    assert value(after, "rocketmq_brokeruntime_put_message_size_total") == stored_bytes
    max_offset = value(after, "ferrymq_store_commitlog_max_offset")
    assert value(after, "rocketmq_brokeruntime_commitlog_maxoffset") == max_offset > 0
    assert grew("ferrymq_send_latency_seconds_sum") > 0
    # Delivered per topic and group.
    assert value(after, "rocketmq_messages_out_total", topic="mt", consumer_group="g-mt") == 5
    assert value(after, "rocketmq_consumer_tps", topic="mt", group="g-mt") > 0
    assert grew("ferrymq_pull_latency_seconds_count") >= 1
    # Lag: queue 0 consumed and committed, queue 1 not touched.
    assert value(after, "ferrymq_group_queue_diff", topic="mt", group="g-mt", queueid="0") == 0
    assert value(after, "ferrymq_group_queue_diff", topic="mt", group="g-mt", queueid="1") == 5
    assert value(after, "ferrymq_group_queue_latency_ms", topic="mt", group="g-mt", queueid="0") == 0
    assert value(after, "rocketmq_group_diff", topic="mt", group="g-mt") == 5
    assert value(after, "rocketmq_consumer_offset", topic="mt", group="g-mt") == 5
    # The oldest unconsumed message (queue 1's first) was stored before the scrape.
    assert value(after, "rocketmq_group_get_latency_by_storetime", topic="mt", group="g-mt") > 0
    # Store: every byte stored is counted; the flush thread fsyncs within its interval.
    assert value(after, "ferrymq_store_commitlog_bytes") >= value(after, "rocketmq_throughput_in_total", topic="mt")
    assert 0 < value(after, "ferrymq_store_disk_used_ratio") <= 1
    wait_until(lambda: value(scrape(server.metrics), "ferrymq_flush_latency_seconds_count") > 0,
               what="a commit-log fsync in the flush histogram")
    # The name server's side, served by the same endpoint in standalone.
    assert value(after, "ferrymq_namesrv_brokers", broker="broker-a") == 1
    assert value(after, "ferrymq_namesrv_topics") >= 1
    assert value(after, "ferrymq_broker_role", role="ASYNC_MASTER") == 1


def test_retry_and_dead_letter_counts(server: Any) -> None:
    admin = AdminClient(server.namesrv)
    admin.create_topic("mt-fail", 1)
    attempts: list[int] = []

    def listener(msgs: list[MessageExt], ctx: Any) -> ConsumeStatus:
        attempts.extend(m.reconsume_times for m in msgs)
        return ConsumeStatus.RECONSUME_LATER

    consumer = PushConsumer("g-fail", server.namesrv, consume_from_where=ConsumeFromWhere.FIRST_OFFSET,
                            max_reconsume_times=2, **FAST_CONSUMER)
    consumer.subscribe("mt-fail")
    consumer.register_listener(listener)
    consumer.start()
    try:
        with Producer("p-fail", server.namesrv, **FAST_PRODUCER) as producer:
            producer.send(Message("mt-fail", b"always fails"))

        def dead_lettered() -> Samples | None:
            s = scrape(server.metrics)
            return s if value(s, "rocketmq_send_to_dlq_messages_total", topic="mt-fail") >= 1 else None

        samples = wait_until(dead_lettered, timeout=30, what="the message in the dead-letter queue")
        # The client's own figures, asked of it at the scrape (its running info's statusTable).
        def failures_reported() -> Samples | None:
            s = scrape(server.metrics)
            return s if _group_sum(s, "rocketmq_client_consume_fail_msg_count", "g-fail") >= 3 else None

        client = wait_until(failures_reported, timeout=30,
                            what="the client's three failures in rocketmq_client_consume_fail_msg_count")
    finally:
        consumer.shutdown()
    client_ids = {dict(ls)["clientId"] for (n, ls) in client if n == "rocketmq_client_consume_rt"
                  and dict(ls)["group"] == "g-fail"}
    assert len(client_ids) == 1 and "@" in client_ids.pop()
    assert _group_sum(client, "rocketmq_client_consume_fail_msg_tps", "g-fail") > 0
    assert _group_sum(client, "rocketmq_client_consumer_pull_tps", "g-fail") > 0
    assert _group_sum(client, "rocketmq_client_consume_ok_msg_tps", "g-fail") == 0
    # Every query of the shipped Grafana dashboard names a family this broker exports.
    exported = {n for (n, _) in client} | {n for (n, _) in samples}
    queried = dashboard_metrics()
    assert {"rocketmq_client_consume_ok_msg_tps", "rocketmq_group_diff", "rocketmq_broker_tps"} <= queried
    assert queried - exported == set()
    # Two failures sent it back for retry, the third dead-lettered it; all counted against the
    # topic it was sent to.
    assert attempts[:3] == [0, 1, 2]
    assert value(samples, "ferrymq_send_back_messages_total", topic="mt-fail", group="g-fail") == 2
    assert value(samples, "rocketmq_send_to_dlq_messages_total", topic="mt-fail", consumer_group="g-fail") == 1
    assert value(samples, "rocketmq_topic_dlq_offset", group="g-fail") == 1
    assert value(samples, "rocketmq_topic_retry_offset", topic="%RETRY%g-fail") == 2
    assert value(samples, "rocketmq_messages_in_total", topic="%DLQ%g-fail") == 1


def test_an_orderly_consumers_dead_letter_is_counted(server: Any) -> None:
    # An orderly consumer retries locally and dead-letters by a send into %RETRY%<group>
    # (RocketMQ's way), not by CONSUMER_SEND_MSG_BACK: the count must not depend on the route.
    admin = AdminClient(server.namesrv)
    admin.create_topic("mt-ofail", 1)
    consumer = PushConsumer("g-ofail", server.namesrv, consume_from_where=ConsumeFromWhere.FIRST_OFFSET,
                            max_reconsume_times=1,
                            **{**FAST_CONSUMER, "suspend_current_queue_time": 0.1})
    consumer.subscribe("mt-ofail")
    consumer.register_listener(lambda msgs, ctx: ConsumeOrderlyStatus.SUSPEND_CURRENT_QUEUE_A_MOMENT,
                               orderly=True)
    consumer.start()
    try:
        with Producer("p-ofail", server.namesrv, **FAST_PRODUCER) as producer:
            producer.send(Message("mt-ofail", b"always fails"))

        def dead_lettered() -> Samples | None:
            s = scrape(server.metrics)
            return s if value(s, "rocketmq_topic_dlq_offset", group="g-ofail") >= 1 else None

        samples = wait_until(dead_lettered, timeout=30, what="the message in the dead-letter queue")
    finally:
        consumer.shutdown()
    assert value(samples, "rocketmq_send_to_dlq_messages_total", topic="mt-ofail", consumer_group="g-ofail") == 1
    admin.close()


def test_pop_deliveries_count_per_group(server: Any) -> None:
    from ferrymq import SimpleConsumer

    AdminClient(server.namesrv).create_topic("mt-pop", 2)
    _fill(server.namesrv, "mt-pop", 3, 2)
    consumer = SimpleConsumer("g-pop", namesrv=server.namesrv, await_duration=1)
    consumer.subscribe("mt-pop")
    received = []
    with consumer:
        def all_received() -> bool:
            for view in consumer.receive(max_messages=16, invisible_duration=30):
                received.append(view)
                consumer.ack(view)
            return len(received) >= 6

        wait_until(all_received, timeout=30, what="6 popped")
    samples = scrape(server.metrics)
    assert value(samples, "rocketmq_messages_out_total", topic="mt-pop", consumer_group="g-pop") == 6
    assert value(samples, "rocketmq_throughput_out_total", topic="mt-pop", consumer_group="g-pop") > 6 * 3


def _group_sum(samples: Samples, name: str, group: str) -> float:
    return sum(v for (n, ls), v in samples.items() if n == name and ("group", group) in ls)


DASHBOARD = Path(__file__).resolve().parents[2] / "docs" / "grafana-dashboard.json"
# PromQL words that are not metric names: aggregations, functions (followed by "("), keywords.
_PROMQL_WORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "bool", "and", "or",
                 "unless", "offset"}


def promql_metrics(expr: str) -> set[str]:
    """The metric names one PromQL expression reads (label_values(m, l) included)."""
    text = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)   # label values
    text = re.sub(r"\{[^}]*\}", "", text)                # matchers
    text = re.sub(r"\[[^\]]*\]", "", text)              # ranges
    text = re.sub(r"\b(?:by|without|on|ignoring)\s*\([^)]*\)", "", text)
    names = set()
    for m in re.finditer(r"[A-Za-z_:][A-Za-z0-9_:]*", text):
        word, rest = m.group(0), text[m.end():].lstrip()
        if rest.startswith("(") or word in _PROMQL_WORDS or re.fullmatch(r"\d+[smhdwy]", word):
            continue
        names.add(word)
    label_values = re.fullmatch(r"label_values\(\s*([A-Za-z_:][A-Za-z0-9_:]*)\s*,.*\)", expr.strip())
    if label_values:
        return {label_values.group(1)}
    return names


def dashboard_metrics() -> set[str]:
    board = json.loads(DASHBOARD.read_text())
    exprs = [t["expr"] for p in board["panels"] for t in p.get("targets", [])]
    exprs += [v["definition"] for v in board["templating"]["list"] if v["type"] == "query"]
    assert len(exprs) >= 20
    names: set[str] = set()
    for expr in exprs:
        found = promql_metrics(expr)
        assert found, f"no metric in {expr!r}"
        names |= found
    return names
