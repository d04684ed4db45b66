"""What a request needs: the topics and groups it touches with the permission each needs, and
whether only an admin account may make it (RocketMQ's PlainAccessResource.parse and
Permission.ADMIN_CODE, with ferrymq's own request codes added).

Groups are named by their retry topic (%RETRY%group), as in the rules."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..common import jsonx
from ..common.codes import RequestCode
from ..common.errors import FerryMQError
from ..common.names import is_retry_topic, retry_topic
from ..common.progress import decode_progress
from ..remoting.command import RemotingCommand
from .permission import Perm

# RocketMQ's admin codes, then what ferrymq adds: offset resets, name server writes, the
# store's skip-range and file deletion, and the broker-to-name-server and controller
# requests that change routes.
ADMIN_CODES = frozenset({
    RequestCode.UPDATE_AND_CREATE_TOPIC,
    RequestCode.UPDATE_BROKER_CONFIG,
    RequestCode.DELETE_TOPIC_IN_BROKER,
    RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP,
    RequestCode.DELETE_SUBSCRIPTIONGROUP,
    RequestCode.INVOKE_BROKER_TO_RESET_OFFSET,
    RequestCode.CLONE_GROUP_OFFSET,  # rewrites another group's offsets, as a reset does
    RequestCode.DELETE_TOPIC_IN_NAMESRV,
    RequestCode.PUT_KV_CONFIG,
    RequestCode.DELETE_KV_CONFIG,
    RequestCode.WIPE_WRITE_PERM_OF_BROKER,
    RequestCode.ADD_WRITE_PERM_OF_BROKER,
    RequestCode.UPDATE_NAMESRV_CONFIG,
    RequestCode.CONTROLLER_ELECT_MASTER,
    RequestCode.CLEAN_UNUSED_TOPIC,
    RequestCode.TRIGGER_DELETE_FILES,
    RequestCode.SKIP_STORE_RANGE,
    RequestCode.REGISTER_BROKER,
    RequestCode.UNREGISTER_BROKER,
    RequestCode.QUERY_DATA_VERSION,  # an unchanged answer keeps the broker's routes alive
    RequestCode.BROKER_HEARTBEAT,
    RequestCode.CONTROLLER_ALTER_SYNC_STATE_SET,
})

# The name server checks only these: route queries stay open to any client, as RocketMQ's
# name server serves them, while nobody without the cluster's credentials can register a
# broker address, unregister one or delete a topic's routes.
NAMESRV_GUARDED_CODES = frozenset({
    RequestCode.REGISTER_BROKER,
    RequestCode.UNREGISTER_BROKER,
    RequestCode.QUERY_DATA_VERSION,
    RequestCode.DELETE_TOPIC_IN_NAMESRV,
    RequestCode.PUT_KV_CONFIG,
    RequestCode.DELETE_KV_CONFIG,
    RequestCode.WIPE_WRITE_PERM_OF_BROKER,
    RequestCode.ADD_WRITE_PERM_OF_BROKER,
    RequestCode.UPDATE_NAMESRV_CONFIG,
    RequestCode.BROKER_HEARTBEAT,
    RequestCode.CONTROLLER_ALTER_SYNC_STATE_SET,
    RequestCode.CONTROLLER_ELECT_MASTER,
})


class ResourceParseError(FerryMQError, ValueError):
    def __init__(self, code: int, reason: str) -> None:
        super().__init__(f"request code {code}: {reason}")
        self.code = code
        self.reason = reason


@dataclass(slots=True)
class Needs:
    admin: bool = False
    resources: dict[str, int] = field(default_factory=dict)

    def add(self, resource: str | None, perm: int) -> None:
        # A request without the field names no resource, as RocketMQ skips a null one.
        if resource:
            self.resources[resource] = perm


def _group(name: str | None) -> str | None:
    return retry_topic(name) if name else None


def _send(ext: dict[str, str], needs: Needs, topic_key: str) -> None:
    topic = ext.get(topic_key)
    if topic is not None and is_retry_topic(topic):
        # A send into %RETRY%G is a consumer giving a message back to its group G.
        needs.add(topic, Perm.SUB)
    else:
        needs.add(topic, Perm.PUB)


def _heartbeat(cmd: RemotingCommand, needs: Needs) -> None:
    data: Any = jsonx.loads(cmd.body or b"{}")
    for consumer in data.get("consumerDataSet") or []:
        needs.add(_group(str(consumer.get("groupName") or "")), Perm.SUB)
        for sub in consumer.get("subscriptionDataSet") or []:
            needs.add(str(sub.get("topic") or ""), Perm.SUB)


def _group_and_topic(group_key: str = "consumerGroup") -> Callable[[RemotingCommand, Needs], None]:
    def parse(cmd: RemotingCommand, needs: Needs) -> None:
        needs.add(_group(cmd.ext_fields.get(group_key)), Perm.SUB)
        needs.add(cmd.ext_fields.get("topic"), Perm.SUB)
    return parse


def _group_only(group_key: str) -> Callable[[RemotingCommand, Needs], None]:
    def parse(cmd: RemotingCommand, needs: Needs) -> None:
        needs.add(_group(cmd.ext_fields.get(group_key)), Perm.SUB)
    return parse


def _progress(cmd: RemotingCommand, needs: Needs) -> None:
    group, updates = decode_progress(cmd.body)
    needs.add(_group(group), Perm.SUB)
    for update in updates:
        needs.add(update.topic, Perm.SUB)


def _lock_batch(cmd: RemotingCommand, needs: Needs) -> None:
    data: Any = jsonx.loads(cmd.body or b"{}")
    needs.add(_group(str(data.get("consumerGroup") or "")), Perm.SUB)


_PARSERS: dict[int, Callable[[RemotingCommand, Needs], None]] = {
    RequestCode.SEND_MESSAGE: lambda c, n: _send(c.ext_fields, n, "topic"),
    RequestCode.SEND_MESSAGE_V2: lambda c, n: _send(c.ext_fields, n, "b"),
    RequestCode.SEND_BATCH_MESSAGE: lambda c, n: _send(c.ext_fields, n, "b"),
    RequestCode.CONSUMER_SEND_MSG_BACK: _group_only("group"),
    RequestCode.PULL_MESSAGE: _group_and_topic(),
    RequestCode.QUERY_MESSAGE: lambda c, n: n.add(c.ext_fields.get("topic"), Perm.SUB),
    RequestCode.HEART_BEAT: _heartbeat,
    RequestCode.UNREGISTER_CLIENT: _group_only("consumerGroup"),
    RequestCode.GET_CONSUMER_LIST_BY_GROUP: _group_only("consumerGroup"),
    RequestCode.UPDATE_CONSUMER_OFFSET: _group_and_topic(),
    # ferrymq: the other offset requests and pop consumption need what pulls need.
    RequestCode.QUERY_CONSUMER_OFFSET: _group_and_topic(),
    RequestCode.UPDATE_CONSUMER_ACK_RANGES: _group_and_topic(),
    RequestCode.UPDATE_CONSUMER_PROGRESS: _progress,
    RequestCode.LOCK_BATCH_MQ: _lock_batch,
    RequestCode.UNLOCK_BATCH_MQ: _lock_batch,
    RequestCode.POP_MESSAGE: _group_and_topic(),
    RequestCode.ACK_MESSAGE: _group_and_topic(),
    RequestCode.BATCH_ACK_MESSAGE: lambda c, n: None,
    RequestCode.CHANGE_MESSAGE_INVISIBLETIME: _group_and_topic(),
    # RocketMQ 5.3: cancelling a delayed message is a write to its topic.
    RequestCode.RECALL_MESSAGE: lambda c, n: n.add(c.ext_fields.get("topic"), Perm.PUB),
}


def needs_of(cmd: RemotingCommand) -> Needs:
    needs = Needs(admin=cmd.code in ADMIN_CODES)
    parse = _PARSERS.get(cmd.code)
    if parse is not None:
        try:
            parse(cmd, needs)
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise ResourceParseError(cmd.code, f"cannot tell which resources it uses: {exc}") from None
    return needs
