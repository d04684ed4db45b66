"""QUERY_MESSAGE_TRACE (ferrymq extension, docs/protocol.md): the timeline of one message as
this broker recorded it. Header `msgId` (the unique id); body JSON
{"broker": name, "traceEnable": bool, "events": [TraceEvent.to_json(), ...]}."""

from __future__ import annotations

import json

from ...common.codes import RequestCode, ResponseCode
from ...common.headers import req_str
from ...remoting import Connection, RemotingCommand
from ..context import BrokerContext
from ..trace.timeline import lookup
from . import reply


async def query_message_trace(broker: BrokerContext, conn: Connection,
                              req: RemotingCommand) -> RemotingCommand | None:
    msg_id = req_str(req.ext_fields, "msgId")
    store = broker.store
    assert store is not None
    recorder = broker.trace
    if recorder is not None:
        await recorder.flush()  # what happened a moment ago is part of the answer
    events = lookup(store, msg_id, broker.config.broker_name)
    body = json.dumps({"broker": broker.config.broker_name, "traceEnable": recorder is not None,
                       "events": [e.to_json() for e in events]}, separators=(",", ":")).encode()
    return reply(req, ResponseCode.SUCCESS, body=body)


HANDLERS = {RequestCode.QUERY_MESSAGE_TRACE: query_message_trace}
