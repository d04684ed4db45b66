"""The ACL hook of a remoting server: called before a request is dispatched, it answers
NO_PERMISSION for a request the rules refuse, so the handler never runs (nothing of a refused
send is stored)."""

from __future__ import annotations

import enum
import logging
import time
from collections.abc import Callable

from ..common.codes import ResponseCode
from ..remoting.command import RemotingCommand
from ..remoting.connection import Connection
from .actions import describe_request
from .address import host_of
from .check import check_request
from .resources import NAMESRV_GUARDED_CODES
from .watch import AclFile

log = logging.getLogger("ferrymq.acl")

# One log line per address, access key and reason this often: a misconfigured client retrying in a loop
# must not flood the log.
LOG_INTERVAL = 10.0


class GuardScope(enum.Enum):
    BROKER = "broker"  # every request
    NAMESRV = "namesrv"  # only the requests that change routes


class RefusalLog:
    """Says why requests are refused, at most once per address, account and reason every
    LOG_INTERVAL seconds."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.refused = 0
        self._clock = clock
        self._logged: dict[tuple[str, str, str], float] = {}

    def refused_one(self, host: str, access_key: str, what: str, reason: str) -> None:
        self.refused += 1
        now = self._clock()
        key = (host, access_key, reason)
        if now - self._logged.get(key, float("-inf")) < LOG_INTERVAL:
            return
        if len(self._logged) > 10_000:
            self._logged.clear()
        self._logged[key] = now
        log.warning("refused %s from %s: %s (%d refused so far)", what, host, reason, self.refused)


class AclGuard:
    def __init__(self, source: AclFile, scope: GuardScope = GuardScope.BROKER, *,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.source = source
        self.scope = scope
        self.log = RefusalLog(clock)

    @property
    def refused(self) -> int:
        return self.log.refused

    def __call__(self, conn: Connection, req: RemotingCommand) -> RemotingCommand | None:
        if self.scope is GuardScope.NAMESRV and req.code not in NAMESRV_GUARDED_CODES:
            return None
        host = host_of(conn.remote_addr)
        denial = check_request(self.source.rules, req, host)
        if denial is None:
            return None
        self.log.refused_one(host, denial.access_key or "", describe_request(req), denial.reason)
        return RemotingCommand.make_response_to(req, ResponseCode.NO_PERMISSION, remark=denial.remark)
