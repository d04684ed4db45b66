"""The store's damage, seen and skipped by an operator (ferrymq extensions 9010 and 9011)."""

from __future__ import annotations

from ...common import jsonx
from ...common.codes import RequestCode, ResponseCode
from ...common.headers import req_int, req_str
from ...common.names import validate_topic
from ...remoting import Connection, RemotingCommand
from ..context import BrokerContext
from . import log, reply


async def query_store_damage(broker: BrokerContext, conn: Connection,
                             req: RemotingCommand) -> RemotingCommand | None:
    store = broker.store
    assert store is not None
    body = {
        "records": [
            {"physOffset": r.phys_offset, "size": r.size, "segment": r.segment,
             "reason": r.reason, "foundBy": r.found_by, "topic": r.topic,
             "queueId": r.queue_id, "queueOffset": r.queue_offset}
            for r in store.damaged_records()
        ],
        "skipped": [
            {"topic": s.topic, "queueId": s.queue_id, "fromOffset": s.from_offset,
             "toOffset": s.to_offset}
            for s in store.skipped_ranges()
        ],
    }
    return reply(req, ResponseCode.SUCCESS, body=jsonx.dumps_bytes(body))


async def skip_store_range(broker: BrokerContext, conn: Connection,
                           req: RemotingCommand) -> RemotingCommand | None:
    store = broker.store
    assert store is not None
    ext = req.ext_fields
    topic = req_str(ext, "topic")
    validate_topic(topic)
    queue_id = req_int(ext, "queueId")
    start = req_int(ext, "fromOffset")
    end = req_int(ext, "toOffset")
    if queue_id < 0 or not 0 <= start < end:
        return reply(req, ResponseCode.SYSTEM_ERROR,
                     f"bad range: queue {queue_id}, offsets [{start}, {end}) "
                     "(need queue >= 0 and 0 <= from < to)")
    store.skip_range(topic, queue_id, start, end)
    log.warning("%s skipped %s/%d offsets [%d, %d)", conn.remote_addr, topic, queue_id, start,
                end)
    return reply(req, ResponseCode.SUCCESS)


HANDLERS = {
    RequestCode.QUERY_STORE_DAMAGE: query_store_damage,
    RequestCode.SKIP_STORE_RANGE: skip_store_range,
}
