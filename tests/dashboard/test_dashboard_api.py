"""The dashboard's JSON endpoints (what its page and buttons call) against a real server and a
real `ferrymq dashboard` process: cluster, topics, topic create, groups with sampled lag,
consumer connections, message lookup with trace, and the DLQ re-drive."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from dash_util import DashClient, cli_json, get_json, http_error, post_json, start_dashboard

from conftest import Standalone, start_standalone
from ferrymq import AdminClient, ConsumeFromWhere, ConsumeStatus, Message, Producer, PushConsumer
from ferrymq.common.message import MessageQueue
from ferrymq.embedded.process import ServerProcess
from waits import wait_until


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Standalone]:
    srv = start_standalone(tmp_path_factory.mktemp("dash") / "store")
    try:
        yield srv
    finally:
        srv.stop()


@pytest.fixture(scope="module")
def dash(server: Standalone, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    proc = start_dashboard(server.namesrv, tmp_path_factory.mktemp("dashlog"), "--lag-interval", "0.2")
    try:
        yield proc.ready["dashboard"]
    finally:
        proc.stop()


def send(server: Standalone, topic: str, bodies: list[str], keys: str | None = None) -> list[Any]:
    with Producer("dash-test-producer", server.namesrv) as producer:
        return [producer.send(Message(topic, b.encode(), keys=keys)) for b in bodies]


def test_the_ready_line_gives_the_address_and_the_page_and_assets_are_served(dash: str) -> None:
    import urllib.request

    with urllib.request.urlopen(f"http://{dash}/", timeout=10) as resp:
        page = resp.read().decode()
        assert resp.headers["Content-Type"].startswith("text/html")
    assert '<script src="/static/app.js">' in page
    for asset, ctype in (("app.js", "text/javascript"), ("app.css", "text/css")):
        with urllib.request.urlopen(f"http://{dash}/static/{asset}", timeout=10) as resp:
            assert resp.headers["Content-Type"].startswith(ctype)
            assert len(resp.read()) > 1000
    assert http_error(dash, "/static/nothing.js")[0] == 404


def test_cluster_lists_each_broker_as_cluster_list_does(server: Standalone, dash: str) -> None:
    data = get_json(dash, "/api/cluster")
    cli = cli_json(server.namesrv, "cluster", "list")
    assert data["namesrv"] == server.namesrv
    assert [(b["broker"], b["addr"], b["role"], b["broker_role"]) for b in data["brokers"]] == [
        (b["broker"], b["addr"], b["role"], b["broker_role"]) for b in cli
    ]
    (broker,) = data["brokers"]
    assert broker["addr"] == server.broker and broker["role"] == "MASTER"
    assert broker["replication"]["in_sync_slaves"] == []


def test_a_topic_created_through_the_endpoint_is_listed_with_its_queue_offsets(
    server: Standalone, dash: str
) -> None:
    made = post_json(dash, "/api/topics", {"name": "dash-made", "queues": 3})
    assert made == {"topic": "dash-made", "queues": 3, "brokers": ["broker-a"]}
    send(server, "dash-made", ["a", "b", "c", "d"])
    listed = get_json(dash, "/api/topics?q=dash-made")
    assert listed["total"] == 1
    (row,) = listed["topics"]
    assert (row["name"], row["kind"], row["type"], row["queues"], row["messages"]) == (
        "dash-made", "normal", "NORMAL", 3, 4)
    detail = get_json(dash, "/api/topic?name=dash-made")
    cli = cli_json(server.namesrv, "topic", "status", "dash-made")
    assert detail["queues"] == cli and detail["message_type"] == "NORMAL"
    post_json(dash, "/api/topics", {"name": "dash-delay", "queues": 1, "message_type": "DELAY"})
    assert get_json(dash, "/api/topic?name=dash-delay")["message_type"] == "DELAY"
    assert sum(q["max_offset"] for q in detail["queues"]) == 4
    assert detail["queue_datas"] == [{"broker": "broker-a", "read_queues": 3, "write_queues": 3, "perm": 6}]
    latest = get_json(dash, "/api/topic/messages?name=dash-made&limit=10")["messages"]
    assert sorted(m["body"] for m in latest) == ["a", "b", "c", "d"]
    stamps = [m["store_timestamp"] for m in latest]
    assert stamps == sorted(stamps, reverse=True)  # newest first
    two = get_json(dash, "/api/topic/messages?name=dash-made&limit=2")["messages"]
    assert [m["msg_id"] for m in two] == [m["msg_id"] for m in latest[:2]]


def test_topic_list_pages_and_filters_on_the_server(dash: str) -> None:
    for i in range(7):
        post_json(dash, "/api/topics", {"name": f"dash-page-{i}", "queues": 1})
    first = get_json(dash, "/api/topics?q=dash-page&limit=3&stats=0")
    assert (first["total"], first["offset"], first["limit"]) == (7, 0, 3)
    assert [t["name"] for t in first["topics"]] == ["dash-page-0", "dash-page-1", "dash-page-2"]
    last = get_json(dash, "/api/topics?q=DASH-PAGE&limit=3&offset=6")
    assert [t["name"] for t in last["topics"]] == ["dash-page-6"]
    system = get_json(dash, "/api/topics?kind=system&stats=0")
    assert {"TBW102", "SCHEDULE_TOPIC_XXXX"} <= {t["name"] for t in system["topics"]}
    assert all(t["kind"] == "system" for t in system["topics"])


def test_bad_requests_get_a_status_and_an_error_object(dash: str) -> None:
    status, err = http_error(dash, "/api/topics", b"name=x", content_type="application/x-www-form-urlencoded")
    assert status == 415  # a cross-site form cannot create topics
    status, err = http_error(dash, "/api/topics", {"name": "bad name!"})
    assert status == 400 and "bad name!" in err["message"]
    status, err = http_error(dash, "/api/topics", {"name": "dash-q0", "queues": 0})
    assert status == 400
    assert http_error(dash, "/api/topic")[0] == 400
    assert http_error(dash, "/api/nothing")[0] == 404
    status, err = http_error(dash, "/api/topic?name=dash-no-such-topic")
    assert (status, err["type"]) == (404, "NoRouteError")
    status, err = http_error(dash, "/api/message?id=xyz")
    assert status == 400 and "not a message id" in err["message"]
    status, err = http_error(dash, "/api/dlq/resend", {"group": "g"})
    assert status == 400


def test_without_login_writes_still_need_the_page_token_and_its_origin(server: Standalone, dash: str) -> None:
    client = DashClient(dash)
    status, session = client.get("/api/session")
    assert status == 200 and session["login"] is False and session["user"] is None
    create = {"name": "dash-open-csrf", "queues": 1}
    status, body = client.post("/api/topics", create)  # no token
    assert (status, body["error"]["type"]) == (403, "CsrfTokenRefused")
    client.csrf = session["csrf"]
    for headers in ({"Origin": "http://evil.example"}, {"Origin": None, "Sec-Fetch-Site": "cross-site"},
                    {"Origin": None, "Referer": "http://evil.example/"}):
        status, body = client.post("/api/topics", create, headers)
        assert (status, body["error"]["type"]) == (403, "CrossSiteRefused"), headers
    with AdminClient(server.namesrv) as admin:
        assert "dash-open-csrf" not in admin.topic_list()
    status, body = client.post("/api/topics", create)
    assert status == 200 and body["topic"] == "dash-open-csrf"
    # No login to be had, nor a login page.
    status, body = client.post("/api/login", {"access_key": "someone", "secret_key": "something"})
    assert (status, body["error"]["type"]) == (404, "NoLogin")
    assert client.request("GET", "/login")[0] == 303


def test_a_host_name_pointed_at_loopback_by_another_site_is_refused(dash: str) -> None:
    """DNS rebinding: a site whose name resolves to 127.0.0.1 would be the page's own origin."""
    port = dash.rsplit(":", 1)[1]
    client = DashClient(dash)
    for host in (f"evil.example:{port}", "evil.example"):
        status, body = client.get("/api/topics?stats=0", {"Host": host})
        assert (status, body["error"]["type"]) == (403, "HostRefused"), host
        assert client.get("/", {"Host": host})[0] == 403
    for host in (f"localhost:{port}", f"127.0.0.1:{port}", dash):
        assert client.get("/api/topics?stats=0", {"Host": host})[0] == 200, host


def test_group_lag_is_sampled_into_a_history_the_chart_reads(server: Standalone, dash: str) -> None:
    post_json(dash, "/api/topics", {"name": "dash-lag", "queues": 1})
    send(server, "dash-lag", [f"m{i}" for i in range(5)])
    mq = MessageQueue("dash-lag", "broker-a", 0)
    with AdminClient(server.namesrv) as admin:
        admin.update_consumer_offset("dash-lag-group", mq, 1)
        listed = wait_until(
            lambda: [g for g in get_json(dash, "/api/groups?q=dash-lag")["groups"] if g["lag"] == 4],
            timeout=20, what="the group sampled with lag 4",
        )
        assert listed[0]["name"] == "dash-lag-group"
        admin.update_consumer_offset("dash-lag-group", mq, 5)
        history = wait_until(
            lambda: (lambda h: h if h and h[-1]["lag"] == 0 else None)(
                get_json(dash, "/api/group?name=dash-lag-group")["history"]),
            timeout=20, what="a sample with lag 0",
        )
    lags = [s["lag"] for s in history]
    assert 4 in lags and lags[-1] == 0
    assert [s["t"] for s in history] == sorted(s["t"] for s in history)
    group = get_json(dash, "/api/group?name=dash-lag-group")
    assert group["lag"] == 0
    assert [(p["topic"], p["broker_offset"], p["consumer_offset"]) for p in group["progress"]] == [("dash-lag", 5, 5)]


def test_group_shows_its_online_consumers(server: Standalone, dash: str) -> None:
    post_json(dash, "/api/topics", {"name": "dash-conn", "queues": 2})
    consumer = PushConsumer("dash-conn-group", server.namesrv, rebalance_interval=0.3)
    consumer.subscribe("dash-conn", "TagA || TagB")
    consumer.register_listener(lambda msgs, ctx: ConsumeStatus.CONSUME_SUCCESS)
    with consumer:
        group = wait_until(
            lambda: (lambda g: g if g["connections"]["connections"] else None)(
                get_json(dash, "/api/group?name=dash-conn-group")),
            what="the consumer online",
        )
        (conn,) = group["connections"]["connections"]
        assert conn["client_addr"].startswith("127.0.0.1:") and conn["language"]
        assert group["connections"]["subscriptions"]["dash-conn"] == "TagA || TagB"
        assert group["connections"]["consume_type"] == "CONSUME_PASSIVELY"
        listed = get_json(dash, "/api/groups?q=dash-conn")["groups"]
        assert [g["name"] for g in listed] == ["dash-conn-group"]
        assert (listed[0]["consumers"], listed[0]["message_model"], listed[0]["consume_tps"]) == (1, "CLUSTERING", 0)
    offline = get_json(dash, "/api/groups?q=dash-conn")["groups"][0]
    assert (offline["consumers"], offline["message_model"]) == (0, None)


def test_message_lookup_by_id_and_key_with_its_trace(server: Standalone, dash: str) -> None:
    post_json(dash, "/api/topics", {"name": "dash-msg", "queues": 1})
    (sent,) = send(server, "dash-msg", ["look at me"], keys="order-42")
    got: list[str] = []
    consumer = PushConsumer("dash-msg-group", server.namesrv, consume_from_where=ConsumeFromWhere.FIRST_OFFSET,
                            rebalance_interval=0.3, pull_suspend_timeout=1.0)
    consumer.subscribe("dash-msg")
    consumer.register_listener(lambda msgs, ctx: (got.extend(m.msg_id for m in msgs), ConsumeStatus.CONSUME_SUCCESS)[1])
    with consumer:
        wait_until(lambda: got == [sent.msg_id], what="the message consumed")
        # Recorded once its offset is committed (the broker writes its trace every few ms).
        wait_until(lambda: any((e["kind"], e["group"]) == ("consumed", "dash-msg-group")
                               for e in get_json(dash, f"/api/message?id={sent.msg_id}")["trace"]["events"][1:]),
                   what="the consumed event")
    found = get_json(dash, f"/api/message?id={sent.msg_id}")
    msg, trace = found["message"], found["trace"]
    assert (msg["msg_id"], msg["topic"], msg["keys"]) == (sent.msg_id, "dash-msg", "order-42")
    assert msg["body"] == "look at me"
    assert msg["offset_msg_id"] == sent.offset_msg_id
    assert trace["recorded"] and trace["trace_enable"] == {"broker-a": True}
    kinds = [(e["kind"], e.get("group")) for e in trace["events"]]
    assert kinds[:2] == [("sent", None), ("stored", "")], kinds
    assert ("delivered", "dash-msg-group") in kinds and ("consumed", "dash-msg-group") in kinds
    assert [e["t"] for e in trace["events"]] == sorted(e["t"] for e in trace["events"])
    assert [(t["group"], t["consumed"]) for t in trace["tracks"]] == [("dash-msg-group", True)]
    cli = cli_json(server.namesrv, "msg", "trace", sent.msg_id)
    assert [t["group"] for t in cli["tracks"]] == [t["group"] for t in trace["tracks"]]
    by_offset_id = get_json(dash, f"/api/message?id={sent.offset_msg_id}")
    assert by_offset_id["message"]["msg_id"] == sent.msg_id
    by_key = get_json(dash, "/api/messages?topic=dash-msg&key=order-42")
    assert [m["msg_id"] for m in by_key["messages"]] == [sent.msg_id]


def dead_letter(server: Standalone, group: str, topic: str, count: int, dash: str) -> list[dict[str, Any]]:
    """Fail every message of `topic` in `group` (no retries) until the DLQ shows `count`."""
    failing = PushConsumer(group, server.namesrv, max_reconsume_times=0,
                           consume_from_where=ConsumeFromWhere.FIRST_OFFSET, rebalance_interval=0.3,
                           route_refresh_interval=0.3, pull_suspend_timeout=1.0)
    failing.subscribe(topic)
    failing.register_listener(lambda msgs, ctx: ConsumeStatus.RECONSUME_LATER)
    with failing:
        listed: list[dict[str, Any]] = wait_until(
            lambda: (lambda rows: rows if len(rows) == count else None)(
                get_json(dash, f"/api/dlq?group={group}")["messages"]),
            timeout=30, what=f"{count} DLQ entries",
        )
    return listed


def test_dlq_is_listed_and_re_driven_once_with_the_cli_s_bookkeeping(server: Standalone, dash: str) -> None:
    post_json(dash, "/api/topics", {"name": "dash-dlq", "queues": 1})
    sent = send(server, "dash-dlq", ["poison-1", "poison-2", "poison-3"])
    listed = dead_letter(server, "dash-dlq-group", "dash-dlq", 3, dash)
    assert sorted(e["original_msg_id"] for e in listed) == sorted(s.msg_id for s in sent)
    assert {e["original_topic"] for e in listed} == {"dash-dlq"}
    one = post_json(dash, "/api/dlq/resend", {"group": "dash-dlq-group", "msg_ids": [listed[-1]["msg_id"]]})
    assert [r["msg_id"] for r in one["resent"]] == [listed[-1]["msg_id"]]
    assert one["retry_topic"] == "%RETRY%dash-dlq-group"
    left = get_json(dash, "/api/dlq?group=dash-dlq-group")["messages"]
    assert [e["msg_id"] for e in left] == [e["msg_id"] for e in listed[:-1]]
    # The command sees the same progress: nothing is sent twice by either.
    by_cli = cli_json(server.namesrv, "dlq", "list", "dash-dlq-group")
    assert [e["msg_id"] for e in by_cli] == [e["msg_id"] for e in left]
    status, err = http_error(dash, "/api/dlq/resend", {"group": "dash-dlq-group", "msg_ids": [listed[-1]["msg_id"]]})
    assert status == 400 and "not pending" in err["message"]
    rest = post_json(dash, "/api/dlq/resend", {"group": "dash-dlq-group", "all": True})
    assert len(rest["resent"]) == 2
    assert get_json(dash, "/api/dlq?group=dash-dlq-group")["messages"] == []
    # The recorded trace of a message tells its whole story.
    events = get_json(dash, f"/api/message?id={sent[0].msg_id}")["trace"]["events"]
    story = [e["kind"] for e in events]
    for kind in ("stored", "delivered", "dead_lettered", "dlq_stored", "redriven"):
        assert kind in story, story
    assert story.index("dead_lettered") < story.index("redriven")
    dead = next(e for e in events if e["kind"] == "dead_lettered")
    assert dead["group"] == "dash-dlq-group" and dead["text"].startswith("dead-lettered by dash-dlq-group")
    # Re-driven messages reach the group again through its retry topic.
    got: list[str] = []
    healthy = PushConsumer("dash-dlq-group", server.namesrv, consume_from_where=ConsumeFromWhere.FIRST_OFFSET,
                           rebalance_interval=0.3, pull_suspend_timeout=1.0)
    healthy.subscribe("dash-dlq")

    def listener(msgs: list[Any], ctx: Any) -> ConsumeStatus:
        got.extend(m.body.decode() for m in msgs)
        return ConsumeStatus.CONSUME_SUCCESS

    healthy.register_listener(listener)
    with healthy:
        wait_until(lambda: {"poison-1", "poison-2", "poison-3"} <= set(got), timeout=30,
                   what="re-driven messages consumed")


def test_the_dashboard_process_stops_cleanly_on_sigterm(server: Standalone, tmp_path: Path) -> None:
    proc: ServerProcess = start_dashboard(server.namesrv, tmp_path)
    assert get_json(proc.ready["dashboard"], "/api/overview")["namesrv"] == server.namesrv
    assert proc.stop(timeout=15) == 0


def test_an_unreachable_cluster_is_reported_not_fatal(tmp_path: Path) -> None:
    import socket

    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        dead = f"127.0.0.1:{s.getsockname()[1]}"
    proc = start_dashboard(dead, tmp_path, "--lag-interval", "0.2")
    try:
        addr = proc.ready["dashboard"]
        status, err = http_error(addr, "/api/cluster")
        assert status == 502 and err["message"], err
        sampler = wait_until(lambda: (lambda s: s if s["last_error"] else None)(
            get_json(addr, "/api/overview")["sampler"]), what="the sampler's failure")
        assert sampler["rounds"] == 0
    finally:
        assert proc.stop(timeout=15) == 0
