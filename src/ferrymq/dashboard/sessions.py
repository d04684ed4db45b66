"""Logins to the dashboard: the check of an access key and secret key against the ACL file's
accounts, the sessions that follow (random tokens kept in memory only, each with its own
CSRF token), and the throttle on failed logins."""

from __future__ import annotations

import hmac
import secrets
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field

from ..acl import Account, AclRules

# Compared against when the access key names no account, so a wrong key costs what a wrong
# secret does.
_NO_SECRET = secrets.token_urlsafe(24)


@dataclass(frozen=True, slots=True)
class SessionPolicy:
    idle: float = 3600.0  # seconds without a request that end a session
    lifetime: float = 12 * 3600.0  # seconds after login that end it anyway
    max_sessions: int = 1000  # the oldest goes when a login would hold more
    failures_allowed: int = 5  # failed logins from one address within failure_window ...
    failure_window: float = 60.0  # ... before its logins are refused until the window passes


def verify_login(rules: AclRules, access_key: str, secret_key: str) -> Account | None:
    """The account when the pair is one of the file's accounts, else None. The account's
    white-listed addresses play no part: they excuse requests from signing, not logins."""
    account = rules.accounts.get(access_key)
    expected = account.secret_key if account is not None else _NO_SECRET
    same = hmac.compare_digest(expected.encode(), secret_key.encode())
    return account if same and account is not None else None


@dataclass(slots=True)
class Session:
    token: str = field(repr=False)
    csrf: str = field(repr=False)
    access_key: str
    # The secret the user logged in with: a session ends once the file says otherwise.
    secret_key: str = field(repr=False)
    created: float
    last_seen: float


class Sessions:
    def __init__(self, policy: SessionPolicy, clock: Callable[[], float] = time.monotonic) -> None:
        self.policy = policy
        self._clock = clock
        self._by_token: OrderedDict[str, Session] = OrderedDict()

    def __len__(self) -> int:
        return len(self._by_token)

    def create(self, account: Account) -> Session:
        now = self._clock()
        session = Session(secrets.token_urlsafe(32), secrets.token_urlsafe(32), account.access_key,
                          account.secret_key, now, now)
        self._by_token[session.token] = session
        while len(self._by_token) > self.policy.max_sessions:
            self._by_token.popitem(last=False)
        return session

    def get(self, token: str, rules: AclRules) -> Session | None:
        """The live session of the token, its idle time restarted; None when there is none, it
        expired, or its account is gone from the rules or has another secret now."""
        session = self._by_token.get(token)
        if session is None:
            return None
        now = self._clock()
        account = rules.accounts.get(session.access_key)
        if (now - session.last_seen > self.policy.idle or now - session.created > self.policy.lifetime
                or account is None
                or not hmac.compare_digest(account.secret_key.encode(), session.secret_key.encode())):
            del self._by_token[token]
            return None
        session.last_seen = now
        return session

    def drop(self, token: str) -> None:
        self._by_token.pop(token, None)


class LoginThrottle:
    """Counts failed logins per client address; past the allowance, that address's logins are
    refused, right or wrong, until its oldest counted failure leaves the window."""

    def __init__(self, policy: SessionPolicy, clock: Callable[[], float] = time.monotonic) -> None:
        self.policy = policy
        self._clock = clock
        self._failures: dict[str, list[float]] = {}

    def _recent(self, peer: str) -> list[float]:
        cutoff = self._clock() - self.policy.failure_window
        times = [t for t in self._failures.get(peer, []) if t > cutoff]
        if times:
            self._failures[peer] = times
        else:
            self._failures.pop(peer, None)
        return times

    def wait_for(self, peer: str) -> float:
        """Seconds until `peer` may try again; 0 when it may now."""
        times = self._recent(peer)
        if len(times) < self.policy.failures_allowed:
            return 0.0
        return max(times[-self.policy.failures_allowed] + self.policy.failure_window - self._clock(), 0.001)

    def failed(self, peer: str) -> None:
        if len(self._failures) > 10_000:  # a flood from many addresses must not grow memory
            self._failures.clear()
        self._failures.setdefault(peer, []).append(self._clock())
