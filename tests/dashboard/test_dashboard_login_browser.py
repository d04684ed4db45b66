"""Logging in to the dashboard in a real headless Chromium (driven over the DevTools pipe),
in front of a real server checking the same ACL file: the login page first, a wrong secret
refused on it, then the topics; the session cookie out of the page script's reach, a topic
created from the page's form (its CSRF token), a non-admin account shown no write actions,
and logging out."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from cdp import Browser, Page
from dash_util import ACCOUNTS, ADMIN, OPS, VIEWER, acl_args, start_acl_server, start_dashboard

from conftest import Standalone
from ferrymq import AdminClient

pytestmark = pytest.mark.browser


@pytest.fixture(scope="module")
def acl_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Standalone, Path]]:
    srv, acl = start_acl_server(tmp_path_factory.mktemp("dash-login"), ACCOUNTS)
    try:
        with AdminClient(srv.namesrv, **ADMIN) as admin:
            admin.create_topic("login-seen", 2)
        yield srv, acl
    finally:
        srv.stop()


@pytest.fixture(scope="module")
def cluster(acl_cluster: tuple[Standalone, Path]) -> Standalone:
    return acl_cluster[0]


@pytest.fixture(scope="module")
def dash(acl_cluster: tuple[Standalone, Path], tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    srv, acl = acl_cluster
    proc = start_dashboard(srv.namesrv, tmp_path_factory.mktemp("dashlog"), *acl_args(acl))
    try:
        yield proc.ready["dashboard"]
    finally:
        proc.stop()


@pytest.fixture
def browser(tmp_path: Path) -> Iterator[Browser]:
    with Browser(tmp_path / "profile") as b:
        yield b


def log_in(page: Page, access_key: str, secret_key: str) -> None:
    # The form is in the page before its script has bound the submit: wait for the script.
    page.wait_for("location.pathname === '/login' && document.querySelector('#login')?.dataset.ready === 'true'",
                  what="the login page, its script running")
    page.fill("#login-access-key", access_key)
    page.fill("#login-secret-key", secret_key)
    page.click("#login button[type=submit]")


def test_logging_in_through_the_page_shows_the_topics(cluster: Standalone, dash: str, browser: Browser) -> None:
    page = browser.open(f"http://{dash}/#/topics?q=login-")
    log_in(page, OPS["access_key"], "not-the-secret")
    error = page.wait_for("document.querySelector('#login-error .error')?.innerText", what="the login error")
    assert error == "unknown access key or wrong secret key"

    log_in(page, **OPS)
    name = page.wait_for("location.pathname === '/' && document.querySelector('#user-name')?.innerText",
                         what="the dashboard after the login")
    assert name == f"{OPS['access_key']} (admin)"
    assert page.evaluate("document.getElementById('open-banner').hidden") is True
    assert page.evaluate("document.cookie") == ""  # HttpOnly: no script of the page can read it
    assert page.evaluate("location.hash") == "#/topics?q=login-"  # the view asked for at first
    page.wait_for("!!document.querySelector('tr[data-topic=\"login-seen\"]')", what="the topic listed")
    row = page.text("tr[data-topic=\"login-seen\"]").split()
    assert row[:5] == ["login-seen", "normal", "NORMAL", "2", "broker-a"], row  # name, kind, type, queues

    # The form's request carries the session's CSRF token.
    page.fill("#new-topic-name", "login-made")
    page.click("#create-topic button[type=submit]")
    notice = page.wait_for("document.querySelector('#create-topic-result .notice')?.innerText",
                           what="the create notice")
    assert notice == "created login-made with 4 queue(s) on broker-a"
    with AdminClient(cluster.namesrv, **ADMIN) as admin:
        assert len(admin.topic_status("login-made")) == 4

    page.click("#logout")
    page.wait_for("location.pathname === '/login'", what="the login page after logging out")
    status = page.evaluate("fetch('/api/topics').then(r => r.status)")
    assert status == 401


def test_a_non_admin_account_is_shown_no_write_actions(dash: str, browser: Browser) -> None:
    page = browser.open(f"http://{dash}/")
    log_in(page, **VIEWER)
    name = page.wait_for("location.pathname === '/' && document.querySelector('#user-name')?.innerText",
                         what="the dashboard after the login")
    assert name == f"{VIEWER['access_key']} (read only)"
    page.evaluate("location.hash = '#/topics'")
    page.wait_for("!!document.querySelector('tr[data-topic=\"login-seen\"]')", what="the topic listed")
    assert page.evaluate("!document.querySelector('#create-topic')")
    note = page.text("main .read-only")
    assert note == f"Creating a topic needs an admin account; {VIEWER['access_key']} is not one."
    # Sent by hand from the page, with its token, it is refused by the server all the same.
    answer = page.evaluate(
        "fetch('/api/topics', {method: 'POST', headers: {'Content-Type': 'application/json', 'X-CSRF-Token': "
        "session.csrf}, body: JSON.stringify({name: 'login-by-viewer'})}).then(async r => [r.status, await r.json()])")
    assert answer[0] == 403 and answer[1]["error"]["type"] == "AccessDenied", json.dumps(answer)
