"""The ACL hook of a remoting server: called before a request is dispatched, it answers
NO_PERMISSION for a request the rules refuse, so the handler never runs (nothing of a refused
send is stored)."""

from __future__ import annotations

import enum
import logging

from ..common.codes import ResponseCode
from ..remoting.command import RemotingCommand
from ..remoting.connection import Connection
from .address import host_of
from .check import check_request
from .resources import NAMESRV_GUARDED_CODES
from .watch import AclFile

log = logging.getLogger("ferrymq.acl")


class GuardScope(enum.Enum):
    BROKER = "broker"  # every request
    NAMESRV = "namesrv"  # only the requests that change routes


class AclGuard:
    def __init__(self, source: AclFile, scope: GuardScope = GuardScope.BROKER) -> None:
        self.source = source
        self.scope = scope
        self.refused = 0

    def __call__(self, conn: Connection, req: RemotingCommand) -> RemotingCommand | None:
        if self.scope is GuardScope.NAMESRV and req.code not in NAMESRV_GUARDED_CODES:
            return None
        denial = check_request(self.source.rules, req, host_of(conn.remote_addr))
        if denial is None:
            return None
        self.refused += 1
        log.debug("refused request code %d from %s: %s", req.code, conn.remote_addr, denial.reason)
        return RemotingCommand.make_response_to(req, ResponseCode.NO_PERMISSION, remark=denial.remark)
