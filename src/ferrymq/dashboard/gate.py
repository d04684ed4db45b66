"""What every request to the dashboard passes before it is served (docs/dashboard.md, Security):

- its Host must be one the dashboard answers to, so a site whose name an attacker points at
  127.0.0.1 (DNS rebinding) is not the dashboard's own origin in the browser's eyes;
- a state-changing request (any method but GET and HEAD) must come from the dashboard's own
  page: no other site by Sec-Fetch-Site, Origin or Referer, a JSON body, and the CSRF token of
  its session in X-CSRF-Token;
- with an ACL file, a session: the login page, its script and style sheet and the login call
  are all that is served without one.

The actor a request acts for goes with it to the endpoints: the account it logged in with
(its cluster requests are signed with that account), or None on a dashboard without login."""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import ipaddress
import logging
import secrets
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

from ..acl import AclFile, AclRules
from .httpd import HttpError, Request, Response
from .sessions import LoginThrottle, Session, SessionPolicy, Sessions, verify_login

log = logging.getLogger(__name__)

CSRF_HEADER = "x-csrf-token"
SAFE_METHODS = frozenset({"GET", "HEAD"})
# Served without a session: the login page and what it loads.
PUBLIC_PAGES = frozenset({"/login", "/static/login.html", "/static/login.js", "/static/app.css"})
LOGIN_PAGES = frozenset({"/", "/static/index.html", "/login", "/static/login.html"})


@dataclass(frozen=True, slots=True)
class GateConfig:
    listen_host: str = "127.0.0.1"
    https: bool = False
    # plain_acl.yml of the cluster: with it, every request needs a login with one of its accounts.
    acl_file: str = ""
    acl_poll_interval: float = 1.0
    # Host names (besides IP addresses and localhost) the dashboard answers to.
    allow_hosts: tuple[str, ...] = ()
    sessions: SessionPolicy = field(default_factory=SessionPolicy)


@dataclass(frozen=True, slots=True)
class Actor:
    """A logged-in account, as the ACL file has it when the request came."""

    access_key: str
    secret_key: str = field(repr=False)
    admin: bool


Inner = Callable[[Request, Actor | None], Awaitable[Response]]


def is_loopback(host: str) -> bool:
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def host_name(host_header: str) -> str:
    """The name or address of a Host header, without port or IPv6 brackets, lower-cased."""
    value = host_header.strip().lower()
    if value.startswith("["):
        return value[1:].partition("]")[0]
    return value.rpartition(":")[0] if value.count(":") == 1 else value


def _is_ip(name: str) -> bool:
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


def _netloc(host_header: str, scheme: str) -> str:
    """host:port with the scheme's default port dropped, lower-cased: how Origin writes it."""
    value = host_header.strip().lower()
    default = {"http": ":80", "https": ":443"}.get(scheme, "")
    return value[: -len(default)] if default and value.endswith(default) else value


def cookie_value(header: str, name: str) -> str | None:
    for part in header.split(";"):
        key, sep, value = part.strip().partition("=")
        if sep and key == name:
            return value
    return None


class Gate:
    def __init__(self, config: GateConfig, cookie_name: Callable[[], str]) -> None:
        self.config = config
        self.acl = AclFile(Path(config.acl_file), poll_interval=config.acl_poll_interval) if config.acl_file else None
        self.sessions = Sessions(config.sessions)
        self.throttle = LoginThrottle(config.sessions)
        self._cookie_name = cookie_name
        # Without an ACL file every page gets this one token: it still proves a request came
        # from a page the dashboard served, which another site cannot read.
        self.open_csrf = secrets.token_urlsafe(32)
        self._watch: asyncio.Task[None] | None = None
        self.scheme = "https" if config.https else "http"

    @property
    def login_required(self) -> bool:
        return self.acl is not None

    def start(self) -> None:
        if self.acl is not None:
            self._watch = asyncio.create_task(self.acl.run(), name="dashboard-acl-watch")

    async def close(self) -> None:
        if self._watch is not None:
            self._watch.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._watch
            self._watch = None

    def rules(self) -> AclRules:
        return self.acl.rules if self.acl is not None else AclRules()

    # --- checks --------------------------------------------------------------------------------
    def check_host(self, request: Request) -> None:
        header = request.headers.get("host")
        if header is None:
            return  # not from a browser: browsers always send one
        name = host_name(header)
        if _is_ip(name) or name == "localhost" or name in (h.lower() for h in self.config.allow_hosts):
            return
        if self.config.allow_hosts or is_loopback(self.config.listen_host):
            raise HttpError(403, f"this dashboard does not answer to the host name {name!r} "
                                 "(give it with --allow-host)", "HostRefused")

    def check_same_site(self, request: Request) -> None:
        """Refuse a state-changing request that another site's page made."""
        site = request.headers.get("sec-fetch-site")
        if site is not None and site not in ("same-origin", "none"):
            raise HttpError(403, f"a {site} request may not change anything here", "CrossSiteRefused")
        own = _netloc(request.headers.get("host", ""), self.scheme)
        origin = request.headers.get("origin")
        source, what = (origin, "Origin") if origin is not None else (request.headers.get("referer"), "Referer")
        if source is not None:
            url = urlsplit(source)
            if source == "null" or not own or _netloc(url.netloc, url.scheme) != own:
                raise HttpError(403, f"{what} {source[:200]!r} is not this dashboard ({own or 'no Host'})",
                                "CrossSiteRefused")
        ctype = request.headers.get("content-type", "").split(";")[0].strip().lower()
        if ctype != "application/json":
            raise HttpError(415, "send the request body as application/json")

    def check_csrf(self, request: Request, session: Session | None) -> None:
        expected = session.csrf if session is not None else self.open_csrf
        given = request.headers.get(CSRF_HEADER, "")
        if not given or not hmac.compare_digest(given.encode(), expected.encode()):
            raise HttpError(403, "missing or wrong X-CSRF-Token (GET /api/session gives it)", "CsrfTokenRefused")

    # --- the flow ------------------------------------------------------------------------------
    async def handle(self, request: Request, inner: Inner) -> Response:
        self.check_host(request)
        changing = request.method not in SAFE_METHODS
        if changing:
            self.check_same_site(request)
        if request.path == "/api/login":
            if request.method != "POST":
                raise HttpError(405, f"{request.method} is not allowed on {request.path}")
            return self._login(request)
        session = self._session_of(request)
        if request.path in ("/login", "/static/login.html") and not changing and (
                session is not None or not self.login_required):
            return Response(303, b"", "text/plain", {"Location": "/"})
        if request.path in PUBLIC_PAGES and not changing:
            return await inner(request, None)
        if self.login_required and session is None:
            if request.path in LOGIN_PAGES and not changing:
                return Response(303, b"", "text/plain", {"Location": "/login"})
            raise HttpError(401, "log in first (POST /api/login)", "LoginRequired")
        if changing:
            self.check_csrf(request, session)
        if request.path == "/api/session":
            if request.method not in SAFE_METHODS:
                raise HttpError(405, f"{request.method} is not allowed on {request.path}")
            return Response.json(self._session_json(session))
        if request.path == "/api/logout":
            if request.method != "POST":
                raise HttpError(405, f"{request.method} is not allowed on {request.path}")
            return self._logout(session)
        return await inner(request, self._actor(session))

    def _session_of(self, request: Request) -> Session | None:
        if self.acl is None:
            return None
        token = cookie_value(request.headers.get("cookie", ""), self._cookie_name())
        return self.sessions.get(token, self.acl.rules) if token else None

    def _actor(self, session: Session | None) -> Actor | None:
        if session is None:
            return None
        account = self.rules().accounts[session.access_key]  # the session check just found it
        return Actor(account.access_key, account.secret_key, account.admin)

    def _session_json(self, session: Session | None) -> dict[str, object]:
        if session is None:
            return {"login": False, "user": None, "csrf": self.open_csrf}
        actor = self._actor(session)
        assert actor is not None
        return {"login": True, "user": {"access_key": actor.access_key, "admin": actor.admin},
                "csrf": session.csrf}

    def _cookie(self, value: str, max_age: int | None = None) -> str:
        parts = [f"{self._cookie_name()}={value}", "Path=/", "HttpOnly", "SameSite=Strict"]
        if max_age is not None:
            parts.append(f"Max-Age={max_age}")
        if self.config.https:
            parts.append("Secure")
        return "; ".join(parts)

    def _login(self, request: Request) -> Response:
        if self.acl is None:
            raise HttpError(404, "this dashboard has no login: it was started without --acl-file", "NoLogin")
        wait = self.throttle.wait_for(request.peer)
        if wait > 0:
            raise HttpError(429, f"too many failed logins from {request.peer}; try again in {wait:.0f} s",
                            "LoginThrottled", {"Retry-After": str(int(wait) + 1)})
        body = request.json()
        access_key, secret_key = body.get("access_key"), body.get("secret_key")
        if not isinstance(access_key, str) or not isinstance(secret_key, str) or not access_key:
            raise HttpError(400, "give access_key and secret_key (strings)")
        account = verify_login(self.acl.rules, access_key, secret_key)
        if account is None:
            self.throttle.failed(request.peer)
            log.warning("failed dashboard login from %s as %r", request.peer, access_key[:64])
            raise HttpError(401, "unknown access key or wrong secret key", "LoginFailed")
        old = cookie_value(request.headers.get("cookie", ""), self._cookie_name())
        if old:
            self.sessions.drop(old)
        session = self.sessions.create(account)
        log.info("dashboard login from %s as %s", request.peer, account.access_key)
        resp = Response.json(self._session_json(session))
        return Response(resp.status, resp.body, resp.content_type, {"Set-Cookie": self._cookie(session.token)})

    def _logout(self, session: Session | None) -> Response:
        if session is None:
            raise HttpError(404, "this dashboard has no login: it was started without --acl-file", "NoLogin")
        self.sessions.drop(session.token)
        resp = Response.json({"login": False})
        return Response(resp.status, resp.body, resp.content_type, {"Set-Cookie": self._cookie("", max_age=0)})
