"""The subscription group table: UPDATE_AND_CREATE_SUBSCRIPTIONGROUP,
GET_ALL_SUBSCRIPTIONGROUP_CONFIG, DELETE_SUBSCRIPTIONGROUP, with RocketMQ's bodies (a
SubscriptionGroupConfig; a SubscriptionGroupWrapper) so its admin tools are understood."""

from __future__ import annotations

from ...common import jsonx
from ...common.codes import RequestCode, ResponseCode
from ...common.headers import req_str
from ...common.names import validate_group
from ...remoting import Connection, RemotingCommand
from ..context import BrokerContext
from ..groups import SubscriptionGroupConfig
from . import log, reply


def _writable(broker: BrokerContext, req: RemotingCommand) -> RemotingCommand | None:
    """A slave's table is its master's copy: a change made there would be undone by the next
    copy, so it is refused with the reason (as a write is)."""
    reason = broker.refuse_writes()
    return reply(req, ResponseCode.NO_PERMISSION, reason) if reason else None


async def update_group(broker: BrokerContext, conn: Connection, req: RemotingCommand) -> RemotingCommand | None:
    """The body replaces the group's entry whole, as RocketMQ's updateSubscriptionGroupConfig;
    fields it leaves out take RocketMQ's defaults."""
    if refused := _writable(broker, req):
        return refused
    try:
        data = jsonx.loads(req.body or b"")
    except ValueError as exc:
        return reply(req, ResponseCode.SYSTEM_ERROR, f"subscription group body is not JSON: {exc}")
    if not isinstance(data, dict):
        return reply(req, ResponseCode.SYSTEM_ERROR, "subscription group body is not a JSON object")
    cfg = SubscriptionGroupConfig.from_json(data)
    validate_group(cfg.group_name)
    broker.groups.upsert(cfg)
    await broker.groups.durable()  # answered, so on disk
    log.info("subscription group %s updated by %s: %s", cfg.group_name, conn.remote_addr, cfg.to_json())
    return reply(req, ResponseCode.SUCCESS)


async def all_groups(broker: BrokerContext, conn: Connection, req: RemotingCommand) -> RemotingCommand | None:
    return reply(req, ResponseCode.SUCCESS, body=jsonx.dumps_bytes(broker.groups.wrapper_json()))


async def delete_group(broker: BrokerContext, conn: Connection, req: RemotingCommand) -> RemotingCommand | None:
    """RocketMQ answers SUCCESS for a group it does not have; so does this."""
    if refused := _writable(broker, req):
        return refused
    group = req_str(req.ext_fields, "groupName")
    if broker.groups.delete(group):
        await broker.groups.durable()
        log.info("subscription group %s deleted by %s", group, conn.remote_addr)
    return reply(req, ResponseCode.SUCCESS)


HANDLERS = {
    RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP: update_group,
    RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG: all_groups,
    RequestCode.DELETE_SUBSCRIPTIONGROUP: delete_group,
}
