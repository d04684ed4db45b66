"""The dashboard's login on a cluster with ACL, over real sockets: a real `ferrymq dashboard`
process given the cluster's plain_acl.yml, in front of a real standalone server checking the
same file. Nothing without a session, logins checked against the file's accounts, a session
cookie browsers keep to the dashboard's own pages, cross-site and token-less writes refused,
a non-admin account refused the write actions and the cluster's reads signed with the user's
own account (so the broker's ACL decides), logout, and sessions ending with their account."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from dash_util import ACCOUNTS, ADMIN, OPS, VIEWER, DashClient, acl_args, start_acl_server, start_dashboard, write_rules

from conftest import Standalone
from ferrymq import AdminClient, Message, Producer
from waits import wait_until

LEAVING = {"access_key": "leaving001", "secret_key": "leavingSecret1"}
RULES = ACCOUNTS + """
  - accessKey: leaving001
    secretKey: leavingSecret1
    defaultTopicPerm: SUB
    defaultGroupPerm: SUB
"""


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Standalone, Path]]:
    srv, acl = start_acl_server(tmp_path_factory.mktemp("dash-acl"), RULES)
    try:
        with AdminClient(srv.namesrv, **ADMIN) as admin:
            for topic in ("dash-acl-topic", "dash-secret"):
                admin.create_topic(topic, 1)
        with Producer("dash-acl-producer", srv.namesrv, **ADMIN) as producer:
            producer.send(Message("dash-secret", b"for admins only"))
        yield srv, acl
    finally:
        srv.stop()


@pytest.fixture(scope="module")
def dash(cluster: tuple[Standalone, Path], tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    srv, acl = cluster
    base = tmp_path_factory.mktemp("dashlog")
    proc = start_dashboard(srv.namesrv, base, *acl_args(acl))
    try:
        yield proc.ready["dashboard"]
    finally:
        proc.stop()


def topics_on_broker(srv: Standalone) -> set[str]:
    with AdminClient(srv.namesrv, **ADMIN) as admin:
        return set(admin.topic_list())


def test_without_a_session_nothing_is_served_but_the_login_page(cluster: tuple[Standalone, Path], dash: str) -> None:
    client = DashClient(dash)
    for path in ("/api/topics", "/api/cluster", "/api/session", "/api/dlq?group=g", "/static/app.js"):
        status, body = client.get(path)
        assert status == 401, path
        assert body["error"]["type"] == "LoginRequired"
    status, headers, _ = client.request("GET", "/")
    assert (status, headers["location"]) == (303, "/login")
    # A write without a session is refused before anything reaches the cluster.
    status, body = client.post("/api/topics", {"name": "dash-no-session", "queues": 1})
    assert status == 401 and body["error"]["type"] == "LoginRequired"
    assert "dash-no-session" not in topics_on_broker(cluster[0])
    status, headers, page = client.request("GET", "/login")
    assert status == 200 and headers["content-type"].startswith("text/html")
    assert b'id="login-secret-key"' in page and b'src="/static/login.js"' in page
    assert client.get("/static/login.js")[0] == 200 and client.get("/static/app.css")[0] == 200


def test_a_wrong_secret_or_an_unknown_key_is_refused(dash: str) -> None:
    client = DashClient(dash)
    for access_key, secret_key in ((OPS["access_key"], "not-the-secret"), ("nobody0001", OPS["secret_key"]),
                                   (OPS["access_key"], "")):
        status, headers, body = client.login(access_key, secret_key)
        assert status == 401, (access_key, secret_key)
        assert body["error"] == {"type": "LoginFailed", "message": "unknown access key or wrong secret key"}
        assert "set-cookie" not in headers
    assert client.get("/api/topics")[0] == 401


def test_a_login_gives_a_strict_http_only_cookie_and_the_topics(dash: str) -> None:
    client = DashClient(dash)
    status, headers, body = client.login(**OPS)
    assert status == 200
    assert body["user"] == {"access_key": OPS["access_key"], "admin": True} and len(body["csrf"]) >= 32
    cookie = [part.strip() for part in headers["set-cookie"].split(";")]
    name, _, token = cookie[0].partition("=")
    assert name == f"ferrymq_session_{dash.rsplit(':', 1)[1]}" and len(token) >= 32
    assert {"HttpOnly", "SameSite=Strict", "Path=/"} <= set(cookie[1:])
    status, topics = client.get("/api/topics?q=dash-acl")
    assert status == 200 and [t["name"] for t in topics["topics"]] == ["dash-acl-topic"]
    assert client.get("/api/session")[1]["user"]["access_key"] == OPS["access_key"]
    status, headers, _ = client.request("GET", "/login")
    assert (status, headers["location"]) == (303, "/")  # logged in already
    assert client.request("GET", "/")[0] == 200
    # Another client without the cookie is still refused.
    assert DashClient(dash).get("/api/topics")[0] == 401


def test_cross_site_and_token_less_writes_are_refused(cluster: tuple[Standalone, Path], dash: str) -> None:
    client = DashClient(dash)
    assert client.login(**OPS)[0] == 200
    create = {"name": "dash-csrf", "queues": 1}
    for headers in ({"Origin": "http://evil.example"}, {"Origin": "null"},
                    {"Origin": f"http://{dash.rsplit(':', 1)[0]}:1"},  # another port of this host
                    {"Origin": None, "Referer": "http://evil.example/page"},
                    {"Origin": None, "Sec-Fetch-Site": "cross-site"},
                    {"Sec-Fetch-Site": "same-site"}):
        status, body = client.post("/api/topics", create, headers)
        assert (status, body["error"]["type"]) == (403, "CrossSiteRefused"), headers
    for headers in ({"X-CSRF-Token": None}, {"X-CSRF-Token": "x" * 43}):
        status, body = client.post("/api/topics", create, headers)
        assert (status, body["error"]["type"]) == (403, "CsrfTokenRefused"), headers
    status, _ = client.post("/api/topics", b"name=dash-csrf", {"Content-Type": "text/plain"})
    assert status == 415
    # Another session's token is not this one's.
    other = DashClient(dash)
    assert other.login(**OPS)[0] == 200
    status, body = client.post("/api/topics", create, {"X-CSRF-Token": other.csrf})
    assert (status, body["error"]["type"]) == (403, "CsrfTokenRefused")
    assert "dash-csrf" not in topics_on_broker(cluster[0])
    # A login from another site is refused too (it would log the victim in as the attacker).
    status, _, body = DashClient(dash).request("POST", "/api/login", OPS, {"Origin": "http://evil.example"})
    assert (status, body["error"]["type"]) == (403, "CrossSiteRefused")

    # The page's own request: same origin, its token.
    status, body = client.post("/api/topics", create)
    assert status == 200, body
    assert body["brokers"] == ["broker-a"] and "dash-csrf" in topics_on_broker(cluster[0])
    # A client that is no browser sends neither Origin nor Referer: the token is what counts.
    status, body = client.post("/api/topics", {"name": "dash-csrf-2", "queues": 1}, {"Origin": None})
    assert status == 200, body


def test_a_non_admin_account_reads_with_its_own_rights_and_cannot_write(
    cluster: tuple[Standalone, Path], dash: str
) -> None:
    viewer = DashClient(dash)
    status, _, body = viewer.login(**VIEWER)
    assert status == 200 and body["user"] == {"access_key": VIEWER["access_key"], "admin": False}
    status, topics = viewer.get("/api/topics?q=dash-acl")
    assert status == 200 and [t["name"] for t in topics["topics"]] == ["dash-acl-topic"]
    status, body = viewer.post("/api/topics", {"name": "dash-by-viewer", "queues": 1})
    assert status == 403 and body["error"]["type"] == "AccessDenied"
    assert "admin" in body["error"]["message"]
    status, body = viewer.post("/api/dlq/resend", {"group": "g", "all": True})
    assert status == 403 and body["error"]["type"] == "AccessDenied"
    assert "dash-by-viewer" not in topics_on_broker(cluster[0])
    # The broker refuses the viewer's pull of a topic its account may not read: the request
    # was signed with the viewer's account, not the dashboard's admin one.
    status, body = viewer.get("/api/topic/messages?name=dash-secret")
    assert status == 403 and body["error"]["type"] == "NoPermissionError"
    assert VIEWER["access_key"] in body["error"]["message"]
    ops = DashClient(dash)
    assert ops.login(**OPS)[0] == 200
    status, body = ops.get("/api/topic/messages?name=dash-secret")
    assert status == 200 and [m["body"] for m in body["messages"]] == ["for admins only"]


def test_logout_ends_the_session(dash: str) -> None:
    client = DashClient(dash)
    assert client.login(**OPS)[0] == 200
    kept = client.cookie
    status, headers, _ = client.request("POST", "/api/logout", {})
    assert status == 200
    assert "Max-Age=0" in headers["set-cookie"] and headers["set-cookie"].split(";")[0].endswith("=")
    client.cookie = kept  # a copy of the cookie kept elsewhere is worth nothing now
    assert client.get("/api/topics")[0] == 401


def test_a_session_ends_when_its_account_leaves_the_acl_file(cluster: tuple[Standalone, Path], dash: str) -> None:
    _, acl = cluster
    client = DashClient(dash)
    assert client.login(**LEAVING)[0] == 200
    assert client.get("/api/topics?stats=0")[0] == 200
    write_rules(acl, ACCOUNTS)
    wait_until(lambda: client.get("/api/topics?stats=0")[0] == 401, timeout=20,
               what="the session of the removed account ended")
    assert client.login(**LEAVING)[0] == 401


def test_failed_logins_from_one_address_are_throttled(cluster: tuple[Standalone, Path], tmp_path: Path) -> None:
    srv, acl = cluster
    proc = start_dashboard(srv.namesrv, tmp_path, *acl_args(acl))
    try:
        client = DashClient(proc.ready["dashboard"])
        for _ in range(5):
            assert client.login(OPS["access_key"], "guess-guess")[0] == 401
        status, headers, body = client.login(**OPS)  # right, but too late
        assert status == 429 and body["error"]["type"] == "LoginThrottled"
        assert 1 <= int(headers["retry-after"]) <= 61
    finally:
        proc.stop()


def test_every_answer_forbids_framing_and_foreign_scripts(dash: str) -> None:
    for path in ("/login", "/api/topics"):
        _, headers, _ = DashClient(dash).request("GET", path)
        assert headers["x-frame-options"] == "DENY"
        assert "frame-ancestors 'none'" in headers["content-security-policy"]
        assert "default-src 'self'" in headers["content-security-policy"]


def test_signing_with_an_account_needs_the_acl_file_to_log_users_in(tmp_path: Path) -> None:
    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "ferrymq", "dashboard", "--port", "0", *args],
                              capture_output=True, text=True, timeout=60)

    proc = run("--access-key", ADMIN["access_key"], "--secret-key", ADMIN["secret_key"])
    assert proc.returncode == 2 and "--acl-file" in proc.stderr, proc.stderr
    proc = run("--acl-file", str(tmp_path / "missing.yml"))
    assert proc.returncode == 1 and "missing.yml" in proc.stderr, proc.stderr
