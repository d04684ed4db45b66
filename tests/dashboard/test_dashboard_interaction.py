"""The dashboard's buttons and forms used in a real headless Chromium (driven over the
DevTools pipe): creating a topic, filtering the topic list as one types, re-driving dead
letters; each result checked in the cluster, not only on the page."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cdp import Browser
from dash_util import get_json, post_json, start_dashboard

from conftest import Standalone, start_standalone
from ferrymq import AdminClient, ConsumeFromWhere, ConsumeStatus, Message, Producer, PushConsumer
from waits import wait_until

pytestmark = pytest.mark.browser


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Standalone]:
    srv = start_standalone(tmp_path_factory.mktemp("dash-ui") / "store")
    try:
        yield srv
    finally:
        srv.stop()


@pytest.fixture(scope="module")
def dash(server: Standalone, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    proc = start_dashboard(server.namesrv, tmp_path_factory.mktemp("dashlog"), "--lag-interval", "0.5")
    try:
        yield proc.ready["dashboard"]
    finally:
        proc.stop()


@pytest.fixture
def browser(tmp_path: Path) -> Iterator[Browser]:
    with Browser(tmp_path / "profile") as b:
        yield b


def test_the_create_topic_form_creates_the_topic_on_the_broker(
    server: Standalone, dash: str, browser: Browser
) -> None:
    page = browser.open(f"http://{dash}/#/topics")
    page.wait_for("!!document.querySelector('#create-topic')", what="the create form")
    page.fill("#new-topic-name", "ui-made")
    page.fill("#new-topic-queues", "5")
    page.click("#create-topic button[type=submit]")
    notice = page.wait_for("document.querySelector('#create-topic-result .notice')?.innerText",
                           what="the create notice")
    assert notice == "created ui-made with 5 queue(s) on broker-a"
    with AdminClient(server.namesrv) as admin:
        assert [q.queue_id for q in admin.topic_status("ui-made")] == [0, 1, 2, 3, 4]
    # The page then lists the new topic, filtered to it.
    page.wait_for("!!document.querySelector('tr[data-topic=\"ui-made\"]')", what="the new topic listed")
    assert page.evaluate("location.hash") == "#/topics?q=ui-made"

    page.fill("#new-topic-name", "bad name!")
    page.click("#create-topic button[type=submit]")
    error = page.wait_for("document.querySelector('#create-topic-result .error')?.innerText", what="the error")
    assert "bad name!" in error


def test_typing_in_the_filter_narrows_the_topic_list(dash: str, browser: Browser) -> None:
    for i in range(12):
        post_json(dash, "/api/topics", {"name": f"ui-filter-{i:02d}", "queues": 1})
    page = browser.open(f"http://{dash}/#/topics?q=ui-filter")
    page.wait_for("document.querySelectorAll('tr[data-topic]').length === 12", what="12 topics listed")
    page.fill("#topic-filter", "ui-filter-1")
    page.wait_for("document.querySelectorAll('tr[data-topic]').length === 2", what="the list filtered")
    names = page.evaluate("[...document.querySelectorAll('tr[data-topic]')].map(r => r.dataset.topic)")
    assert names == ["ui-filter-10", "ui-filter-11"]
    assert page.text("#topic-range") == "1–2 of 2"


def dead_letter(server: Standalone, dash: str, group: str, topic: str, bodies: list[str]) -> list[dict[str, Any]]:
    post_json(dash, "/api/topics", {"name": topic, "queues": 1})
    with Producer("dash-ui-producer", server.namesrv) as producer:
        for body in bodies:
            producer.send(Message(topic, body.encode()))
    failing = PushConsumer(group, server.namesrv, max_reconsume_times=0,
                           consume_from_where=ConsumeFromWhere.FIRST_OFFSET, rebalance_interval=0.3,
                           route_refresh_interval=0.3, pull_suspend_timeout=1.0)
    failing.subscribe(topic)
    failing.register_listener(lambda msgs, ctx: ConsumeStatus.RECONSUME_LATER)
    with failing:
        listed: list[dict[str, Any]] = wait_until(
            lambda: (lambda rows: rows if len(rows) == len(bodies) else None)(
                get_json(dash, f"/api/dlq?group={group}")["messages"]),
            timeout=30, what="the DLQ filled",
        )
    return listed


def test_dead_letters_are_re_driven_from_the_page(server: Standalone, dash: str, browser: Browser) -> None:
    listed = dead_letter(server, dash, "ui-dlq-group", "ui-dlq", ["p1", "p2", "p3"])
    page = browser.open(f"http://{dash}/#/dlq?group=ui-dlq-group")
    page.wait_for("document.querySelectorAll('#dlq tr[data-msg-id]').length === 3", what="3 dead letters")
    chosen = listed[1]["msg_id"]
    page.click(f"#dlq tr[data-msg-id={json.dumps(chosen)}] input[type=checkbox]")
    page.click("#resend-selected")
    notice = page.wait_for("document.querySelector('#dlq-action .notice')?.innerText", what="the re-drive notice")
    assert notice == "re-drove 1 message(s) to %RETRY%ui-dlq-group"
    left = [m["msg_id"] for m in get_json(dash, "/api/dlq?group=ui-dlq-group")["messages"]]
    assert left == [listed[0]["msg_id"], listed[2]["msg_id"]]
    # The page reloads its list; then everything else goes.
    page.wait_for("document.querySelectorAll('#dlq tr[data-msg-id]').length === 2", what="2 left")
    page.click("#resend-all")
    page.wait_for("document.querySelector('#dlq-action .notice')?.innerText.startsWith('re-drove 2')",
                  what="the second notice")
    assert get_json(dash, "/api/dlq?group=ui-dlq-group")["messages"] == []
    page.wait_for("document.querySelector('#dlq td.muted')?.innerText === 'nothing to re-drive'", what="empty DLQ")

    # A re-driven message's trace is long: scrolled to its end in a short window, the status
    # line must not sit over the timeline (it was fixed to the window's corner).
    browser.call("Emulation.setDeviceMetricsOverride",
                 {"width": 900, "height": 500, "deviceScaleFactor": 1, "mobile": False}, page.session)
    page.evaluate(f"location.hash = '#/message?id={listed[1]['msg_id']}'")
    page.wait_for("document.querySelectorAll('#trace .timeline li').length >= 4", what="the trace timeline")
    page.wait_for("document.getElementById('status').innerText.startsWith('updated')", what="the status line")
    boxes = page.evaluate("""(() => {
        document.querySelector('#trace .timeline').scrollIntoView({block: 'end'});
        const box = el => { const r = el.getBoundingClientRect(); return [r.left, r.top, r.right, r.bottom]; };
        return [box(document.querySelector('#trace .timeline')), box(document.getElementById('status')),
                innerHeight];
    })()""")
    timeline, status, height = boxes
    assert timeline[3] > height - 100, boxes  # the timeline's end is in the lower part of the window
    overlap = (min(timeline[2], status[2]) > max(timeline[0], status[0])
               and min(timeline[3], status[3]) > max(timeline[1], status[1]))
    assert not overlap, boxes
