"""The dashboard's sessions, login throttle and request checks on their own, with a clock the
test moves: idle and absolute expiry, the cap on sessions, a changed secret ending a session,
the throttle's window, and which Host, Origin and Referer headers pass."""

from __future__ import annotations

import pytest

from ferrymq.acl import parse_rules
from ferrymq.dashboard.gate import Gate, GateConfig, cookie_value, host_name
from ferrymq.dashboard.httpd import HttpError, Request
from ferrymq.dashboard.sessions import LoginThrottle, SessionPolicy, Sessions, verify_login

RULES = parse_rules("""
accounts:
  - accessKey: alice0001
    secretKey: aliceSecret1
    admin: true
  - accessKey: bobby0001
    secretKey: bobbySecret1
""")


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_login_checks_the_pair_against_the_file() -> None:
    account = verify_login(RULES, "alice0001", "aliceSecret1")
    assert account is not None and account.admin
    assert verify_login(RULES, "alice0001", "bobbySecret1") is None
    assert verify_login(RULES, "nobody001", "aliceSecret1") is None
    assert verify_login(RULES, "alice0001", "") is None


def test_sessions_end_when_idle_too_long_or_too_old() -> None:
    clock = Clock()
    sessions = Sessions(SessionPolicy(idle=60, lifetime=300), clock)
    account = RULES.accounts["alice0001"]
    one = sessions.create(account)
    assert one.token != one.csrf
    for _ in range(5):  # in use: each request restarts the idle time ...
        clock.now += 59
        assert sessions.get(one.token, RULES) is one
    clock.now += 59  # ... but not the lifetime
    assert sessions.get(one.token, RULES) is None
    two = sessions.create(account)
    clock.now += 61
    assert sessions.get(two.token, RULES) is None
    assert len(sessions) == 0 and sessions.get("no-such-token", RULES) is None


def test_a_session_ends_when_its_secret_changes_and_the_oldest_goes_past_the_cap() -> None:
    sessions = Sessions(SessionPolicy(max_sessions=2), Clock())
    first, second, third = (sessions.create(RULES.accounts[k]) for k in ("alice0001", "bobby0001", "bobby0001"))
    assert sessions.get(first.token, RULES) is None  # the oldest, dropped by the third
    changed = parse_rules("accounts:\n  - accessKey: bobby0001\n    secretKey: bobbyNewSecret\n")
    assert sessions.get(second.token, changed) is None
    assert sessions.get(third.token, RULES) is third


def test_the_throttle_counts_failures_per_address_within_the_window() -> None:
    clock = Clock()
    throttle = LoginThrottle(SessionPolicy(failures_allowed=3, failure_window=60), clock)
    for _ in range(3):
        assert throttle.wait_for("10.0.0.1") == 0
        throttle.failed("10.0.0.1")
        clock.now += 10
    assert throttle.wait_for("10.0.0.1") == pytest.approx(30)  # the first failure leaves at +60
    assert throttle.wait_for("10.0.0.2") == 0
    clock.now += 30.5
    assert throttle.wait_for("10.0.0.1") == 0


def request(method: str = "POST", **headers: str) -> Request:
    base = {"content-type": "application/json"}
    return Request(method, "/api/topics", {}, {**base, **{k.replace("_", "-"): v for k, v in headers.items()}})


def refused(check: object, req: Request) -> str:
    with pytest.raises(HttpError) as info:
        check(req)  # type: ignore[operator]
    return info.value.kind


def test_host_names_pass_when_they_cannot_be_another_site() -> None:
    loopback = Gate(GateConfig(listen_host="127.0.0.1"), lambda: "c")
    for host in ("127.0.0.1:8080", "localhost:8080", "[::1]:8080", "10.1.2.3", "LOCALHOST"):
        loopback.check_host(request("GET", host=host))
    assert refused(loopback.check_host, request("GET", host="evil.example:8080")) == "HostRefused"
    named = Gate(GateConfig(listen_host="127.0.0.1", allow_hosts=("Dash.Example.org",)), lambda: "c")
    named.check_host(request("GET", host="dash.example.org"))
    # Listening on every address without names given, any name passes (the operator's DNS);
    # once names are given, only those.
    Gate(GateConfig(listen_host="0.0.0.0"), lambda: "c").check_host(request("GET", host="mq-dash.corp"))
    wide = Gate(GateConfig(listen_host="0.0.0.0", allow_hosts=("dash.corp",)), lambda: "c")
    assert refused(wide.check_host, request("GET", host="mq-dash.corp")) == "HostRefused"
    assert host_name("[::1]:80") == "::1" and host_name("Example.org:1") == "example.org"


def test_origin_and_referer_must_name_the_host_asked() -> None:
    gate = Gate(GateConfig(), lambda: "c")
    gate.check_same_site(request(host="127.0.0.1:8080", origin="http://127.0.0.1:8080"))
    gate.check_same_site(request(host="127.0.0.1:8080", referer="http://127.0.0.1:8080/#/topics"))
    gate.check_same_site(request(host="127.0.0.1:8080", sec_fetch_site="same-origin"))
    gate.check_same_site(request(host="dash.example", origin="http://dash.example:80"))  # default port
    gate.check_same_site(request(host="127.0.0.1:8080"))  # no browser
    for bad in (request(host="127.0.0.1:8080", origin="http://127.0.0.1:8081"),
                request(host="127.0.0.1:8080", origin="null"),
                request(origin="http://127.0.0.1:8080"),  # no Host to compare with
                request(host="127.0.0.1:8080", referer="http://evil.example/x"),
                request(host="127.0.0.1:8080", sec_fetch_site="same-site")):
        assert refused(gate.check_same_site, bad) == "CrossSiteRefused", bad.headers
    form = Request("POST", "/api/topics", {}, {"host": "h", "content-type": "text/plain"})
    with pytest.raises(HttpError) as info:
        gate.check_same_site(form)
    assert info.value.status == 415


def test_cookie_value_reads_one_cookie_of_many() -> None:
    assert cookie_value("a=1; ferrymq_session_80=tok; b=2", "ferrymq_session_80") == "tok"
    assert cookie_value("ferrymq_session_8080=x", "ferrymq_session_80") is None
    assert cookie_value("", "a") is None
