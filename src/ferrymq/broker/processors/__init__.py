"""Request processors, one module per area, and what they share; registry.register_all wires them
into the broker's server."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

from ...remoting import Connection, RemotingCommand
from ..context import BrokerContext

log = logging.getLogger("ferrymq.broker")

Handler = Callable[[BrokerContext, Connection, RemotingCommand], Awaitable[RemotingCommand | None]]


def reply(req: RemotingCommand, code: int, remark: str | None = None, *,
          ext_fields: dict[str, str] | None = None, body: bytes | None = None) -> RemotingCommand:
    return RemotingCommand.make_response_to(req, code, remark=remark, ext_fields=ext_fields, body=body)
