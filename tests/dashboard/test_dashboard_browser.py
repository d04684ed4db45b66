"""The dashboard's page in a real headless Chromium against a real server: the DOM after its
scripts ran holds the cluster's brokers, topics with offsets, groups with lag, a message's
trace and the DLQ, and its screenshots are real renderings (size, colours of the page)."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from dash_util import colours, dump_dom, get_json, png_pixels, post_json, screenshot, start_dashboard

from conftest import Standalone, start_standalone
from ferrymq import AdminClient, ConsumeFromWhere, ConsumeStatus, Message, Producer, PushConsumer
from ferrymq.aio import AdminClient as AsyncAdminClient
from ferrymq.common.message import MessageQueue
from ferrymq.embedded import start_cluster
from waits import wait_until

pytestmark = pytest.mark.browser

HEADER_RGB = bytes((0x1D, 0x23, 0x30))  # the page's header bar
LAG_LINE_RGB = bytes((0x24, 0x63, 0xEB))  # the lag chart's line
BANNER_RGB = bytes((0xFE, 0xF3, 0xC7))  # the open dashboard's banner
MANY_TOPICS = 1000


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Standalone]:
    srv = start_standalone(tmp_path_factory.mktemp("dash-browser") / "store")
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


def main_of(dom: str) -> str:
    match = re.search(r'<main id="main">(.*)</main>', dom, re.S)
    assert match, dom[:2000]
    return match.group(1)


def text_of(html: str) -> str:
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", html))


def assert_rendered(png: Path, size: tuple[int, int], *expected: bytes) -> None:
    width, height, rows = png_pixels(png)
    assert (width, height) == size
    bpp = len(rows[0]) // width
    seen = colours(rows, bpp)
    assert len(seen) > 20, f"{png.name}: only {len(seen)} colours: a blank page?"
    present = {r[x : x + 3] for r in rows for x in range(0, len(r), bpp)}
    for colour in expected:
        assert colour in present, f"{png.name}: no pixel of colour #{colour.hex()}"


def test_cluster_page_shows_the_broker_its_role_and_address(server: Standalone, dash: str, tmp_path: Path) -> None:
    body = main_of(dump_dom(f"http://{dash}/#/cluster", tmp_path))
    assert f'data-addr="{server.broker}"' in body
    text = text_of(body)
    assert "cluster DefaultCluster" in text
    assert re.search(rf"broker-a 0 ASYNC_MASTER {re.escape(server.broker)}", text), text
    png = screenshot(f"http://{dash}/#/cluster", tmp_path, "cluster.png")
    assert_rendered(png, (1280, 900), HEADER_RGB)


def test_without_login_the_page_says_that_anyone_can_act(dash: str, tmp_path: Path) -> None:
    dom = dump_dom(f"http://{dash}/#/cluster", tmp_path)
    banner = re.search(r'<div id="open-banner"([^>]*)>(.*?)</div>', dom, re.S)
    assert banner, dom[:2000]
    assert "hidden" not in banner.group(1)
    assert "anyone who can reach its port can create topics and re-drive dead letters" in banner.group(2)
    png = screenshot(f"http://{dash}/#/cluster", tmp_path, "open.png")
    assert_rendered(png, (1280, 900), HEADER_RGB, BANNER_RGB)


def test_topics_page_stays_usable_with_a_thousand_topics(server: Standalone, dash: str, tmp_path: Path) -> None:
    async def create_all() -> None:
        async with AsyncAdminClient(server.namesrv) as admin:
            sem = asyncio.Semaphore(32)

            async def one(i: int) -> None:
                async with sem:
                    await admin.create_topic(f"many-{i:04d}", 2)

            await asyncio.gather(*(one(i) for i in range(MANY_TOPICS)))

    asyncio.run(create_all())
    with AdminClient(server.namesrv) as admin:
        admin.create_topic("many-0998", 2, order=True)  # an order topic: RocketMQ 5's FIFO type
    with Producer("dash-browser-producer", server.namesrv) as producer:
        for _ in range(3):
            producer.send(Message("many-0999", b"x"))
    wait_until(lambda: get_json(dash, "/api/topics?q=many-&stats=0")["total"] == MANY_TOPICS,
               what="every topic routed")

    first = text_of(main_of(dump_dom(f"http://{dash}/#/topics?q=many-", tmp_path)))
    assert f"1–50 of {MANY_TOPICS}" in first
    assert "many-0000" in first and "many-0049" in first and "many-0050" not in first

    last = main_of(dump_dom(f"http://{dash}/#/topics?q=many-&offset=950", tmp_path))
    rows = re.findall(r'<tr data-topic="(many-\d{4})">(.*?)</tr>', last)
    assert [name for name, _ in rows] == [f"many-{i:04d}" for i in range(950, 1000)]
    cells = text_of(dict(rows)["many-0999"]).split()
    # name, kind, message type, queues, broker, messages, max offset
    assert cells[:7] == ["many-0999", "normal", "NORMAL", "2", "broker-a", "3", "3"], cells
    assert text_of(dict(rows)["many-0998"]).split()[:3] == ["many-0998", "normal", "FIFO"]
    page = main_of(dump_dom(f"http://{dash}/#/topic/many-0998", tmp_path))
    assert re.search(r'<dd id="topic-type">FIFO</dd>', page), page[:2000]

    one = text_of(main_of(dump_dom(f"http://{dash}/#/topics?q=many-0777", tmp_path)))
    assert "1–1 of 1" in one and "many-0777" in one
    png = screenshot(f"http://{dash}/#/topics?q=many-", tmp_path, "topics.png", size=(1280, 1600))
    assert_rendered(png, (1280, 1600), HEADER_RGB)


def test_group_page_shows_lag_a_chart_and_queue_progress(server: Standalone, dash: str, tmp_path: Path) -> None:
    post_json(dash, "/api/topics", {"name": "browser-lag", "queues": 1})
    with Producer("dash-browser-producer", server.namesrv) as producer:
        for i in range(7):
            producer.send(Message("browser-lag", f"m{i}".encode()))
    with AdminClient(server.namesrv) as admin:
        admin.update_consumer_offset("browser-lag-group", MessageQueue("browser-lag", "broker-a", 0), 2)
        admin.update_subscription_group("browser-lag-group", {"retry_max_times": 7, "consume_enable": False})
    wait_until(lambda: len(get_json(dash, "/api/group?name=browser-lag-group")["history"]) >= 3,
               timeout=20, what="three lag samples")

    groups = text_of(main_of(dump_dom(f"http://{dash}/#/groups", tmp_path)))
    assert "browser-lag-group 5" in groups
    body = main_of(dump_dom(f"http://{dash}/#/group/browser-lag-group", tmp_path))
    assert "total lag 5" in text_of(body)
    assert re.search(r'<polyline class="lag" points="[\d., ]+"', body), "no lag line drawn"
    assert "browser-lag broker-a 0 7 2 5" in text_of(body)
    assert "broker-a disabled allowed true 7 1 1" in text_of(body)  # the group's settings
    png = screenshot(f"http://{dash}/#/group/browser-lag-group", tmp_path, "group.png")
    assert_rendered(png, (1280, 900), HEADER_RGB, LAG_LINE_RGB)


def test_message_page_shows_the_message_and_its_trace_timeline(server: Standalone, dash: str, tmp_path: Path) -> None:
    post_json(dash, "/api/topics", {"name": "browser-msg", "queues": 1})
    with Producer("dash-browser-producer", server.namesrv) as producer:
        sent: Any = producer.send(Message("browser-msg", b"hello browser", keys="k-browser"))
    consumer = PushConsumer("browser-msg-group", server.namesrv, consume_from_where=ConsumeFromWhere.FIRST_OFFSET,
                            rebalance_interval=0.3, pull_suspend_timeout=1.0)
    consumer.subscribe("browser-msg")
    consumer.register_listener(lambda msgs, ctx: ConsumeStatus.CONSUME_SUCCESS)
    with consumer:
        wait_until(lambda: "consumed" in [e["kind"] for e in get_json(
            dash, f"/api/message?id={sent.msg_id}")["trace"]["events"]], what="the consumed event recorded")
        url = f"http://{dash}/#/message?id={sent.msg_id}"
        body = main_of(dump_dom(url, tmp_path))  # with the group online
        # The group list: one consumer online, its model, its consume TPS (1 message in the minute).
        wait_until(lambda: get_json(dash, "/api/groups?q=browser-msg")["groups"][0]["consume_tps"] > 0,
                   what="the group's consume TPS")
        groups = main_of(dump_dom(f"http://{dash}/#/groups?q=browser-msg", tmp_path))
        row = re.search(r'<tr data-group="browser-msg-group">(.*?)</tr>', groups)
        assert row, groups[:2000]
        assert re.search(r" 1 clustering 0\.0[1-9] ", text_of(row.group(1))), text_of(row.group(1))
        assert re.findall(r"<th[^>]*>([^<]*)</th>", groups)[3:6] == ["consumers", "model", "consume TPS"]
    text = text_of(body)
    assert f"Message {sent.msg_id}" in text and "hello browser" in text and "k-browser" in text
    timeline = re.findall(r'<li class="[\w-]+" data-kind="([\w-]+)">', body)
    assert timeline[:2] == ["sent", "stored"] and {"delivered", "consumed"} <= set(timeline), timeline
    assert "delivered to browser-msg-group" in text and "consumed by browser-msg-group" in text
    assert "browser-msg-group browser-msg 0 CONSUMED 1" in text  # the group's track
    assert_rendered(screenshot(url, tmp_path, "message.png"), (1280, 900), HEADER_RGB)
    topic_page = main_of(dump_dom(f"http://{dash}/#/topic/browser-msg", tmp_path))
    assert f'<tr data-msg-id="{sent.msg_id}">' in topic_page  # among the latest messages
    assert "browser-msg-group" in text_of(topic_page)  # consumed by
    by_key = text_of(main_of(dump_dom(f"http://{dash}/#/message?topic=browser-msg&key=k-browser", tmp_path)))
    assert "1 message(s) with key k-browser" in by_key and sent.msg_id in by_key


def test_cluster_page_shows_a_master_and_its_slave_with_replication_lag(tmp_path: Path) -> None:
    config = {"ha_heartbeat_interval_ms": 100, "ha_slave_sync_interval_ms": 200}
    with start_cluster(tmp_path / "cluster", slaves=1, role="SYNC_MASTER", broker_config=config) as cluster:
        master, slave = cluster.static_master(), cluster.slaves()[0]
        proc = start_dashboard(cluster.namesrv.addr, tmp_path)
        try:
            dash = proc.ready["dashboard"]
            wait_until(lambda: (lambda b: len(b) == 2 and b[1]["replication"]["ha_connected"]
                                and b[0]["replication"]["in_sync_slaves"] == [1])(
                get_json(dash, "/api/cluster")["brokers"]), timeout=30, what="the slave in sync")
            body = main_of(dump_dom(f"http://{dash}/#/cluster", tmp_path))
            rows = dict(re.findall(r'<tr data-addr="([\d.:]+)">(.*?)</tr>', body))
            assert set(rows) == {master.addr, slave.addr}
            m, s = text_of(rows[master.addr]), text_of(rows[slave.addr])
            assert re.search(rf"broker-a 0 SYNC_MASTER {re.escape(master.addr)} ", m), m
            assert "in sync: 1" in m and re.search(r"slave 1: 0 B / [\d,]+ ms behind \(in sync\)", m), m
            assert re.search(rf"broker-a 1 SLAVE {re.escape(slave.addr)} ", s), s
            assert re.search(r"connected 0 B / [\d,]+ ms behind", s), s
        finally:
            proc.stop()


def test_an_unreachable_cluster_shows_one_error_across_refreshes(tmp_path: Path) -> None:
    import socket

    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        dead = f"127.0.0.1:{s.getsockname()[1]}"
    proc = start_dashboard(dead, tmp_path)
    try:
        # Long enough for the page to retry twice.
        body = main_of(dump_dom(f"http://{proc.ready['dashboard']}/#/cluster", tmp_path, budget_ms=12000))
    finally:
        proc.stop()
    assert body.count('role="alert"') == 1 and "loading" not in body, body
    assert f"connect to {dead} failed" in text_of(body)
