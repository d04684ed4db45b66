"""What a refused request was trying to do, in words a user recognises: the action, the
topic or group it names (from the request's fields) and RocketMQ's name of the request, e.g.
"send to topic orders (SEND_MESSAGE_V2, request code 310)"."""

from __future__ import annotations

from ..common.codes import RequestCode
from ..common.errors import request_name
from ..common.names import is_retry_topic
from ..remoting.command import RemotingCommand

# Where the user's own credentials go; every refusal a credential would cure says so.
CREDENTIALS_HINT = ("sign with an account of the ACL file: --access-key/--secret-key "
                    "(or FERRYMQ_ACCESS_KEY/FERRYMQ_SECRET_KEY)")
ADMIN_HINT = ("sign with an admin account of the ACL file: --access-key/--secret-key "
              "(or FERRYMQ_ACCESS_KEY/FERRYMQ_SECRET_KEY)")

_VERBS: dict[int, str] = {
    RequestCode.SEND_MESSAGE: "send to",
    RequestCode.SEND_MESSAGE_V2: "send to",
    RequestCode.SEND_BATCH_MESSAGE: "send a batch to",
    RequestCode.CONSUMER_SEND_MSG_BACK: "send a message back for",
    RequestCode.PULL_MESSAGE: "pull from",
    RequestCode.POP_MESSAGE: "pop from",
    RequestCode.ACK_MESSAGE: "ack a message of",
    RequestCode.QUERY_MESSAGE: "query messages of",
    RequestCode.UPDATE_AND_CREATE_TOPIC: "update topic config of",
    RequestCode.DELETE_TOPIC_IN_BROKER: "delete",
    RequestCode.DELETE_TOPIC_IN_NAMESRV: "delete the routes of",
    RequestCode.UPDATE_BROKER_CONFIG: "update broker config",
    RequestCode.GET_BROKER_CONFIG: "read broker config",
    RequestCode.GET_BROKER_RUNTIME_INFO: "read broker runtime info",
    RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP: "update subscription group config",
    RequestCode.DELETE_SUBSCRIPTIONGROUP: "delete subscription group",
    RequestCode.INVOKE_BROKER_TO_RESET_OFFSET: "reset the offsets of",
    RequestCode.CLONE_GROUP_OFFSET: "copy a group's offsets on",
    RequestCode.UPDATE_CONSUMER_OFFSET: "commit an offset of",
    RequestCode.QUERY_CONSUMER_OFFSET: "read an offset of",
    RequestCode.HEART_BEAT: "heartbeat",
    RequestCode.UNREGISTER_CLIENT: "unregister a client of",
    RequestCode.REGISTER_BROKER: "register broker",
    RequestCode.UNREGISTER_BROKER: "unregister broker",
    RequestCode.WIPE_WRITE_PERM_OF_BROKER: "take a broker out of writes",
    RequestCode.ADD_WRITE_PERM_OF_BROKER: "give a broker writes back",
    RequestCode.PUT_KV_CONFIG: "put a name server KV config",
    RequestCode.DELETE_KV_CONFIG: "delete a name server KV config",
    RequestCode.UPDATE_NAMESRV_CONFIG: "update name server config",
    RequestCode.CONTROLLER_ELECT_MASTER: "elect a master",
    RequestCode.CLEAN_UNUSED_TOPIC: "clean unused topics",
}

# Header fields naming a topic or a group, the short ones of SEND_MESSAGE_V2 included.
_TOPIC_FIELDS = ("topic", "b")
_GROUP_FIELDS = ("consumerGroup", "group", "producerGroup")


def _resource(cmd: RemotingCommand) -> str | None:
    ext = cmd.ext_fields
    topic = next((ext[k] for k in _TOPIC_FIELDS if ext.get(k)), None)
    group = next((ext[k] for k in _GROUP_FIELDS if ext.get(k)), None)
    if topic is not None and is_retry_topic(topic):
        group, topic = topic[len("%RETRY%"):], None
    parts = [f"topic {topic}"] if topic else []
    if group:
        parts.append(f"group {group}")
    return " of ".join(parts) or None


def describe_request(cmd: RemotingCommand) -> str:
    name = request_name(cmd.code)
    verb = _VERBS.get(cmd.code, name.lower().replace("_", " "))
    resource = _resource(cmd)
    action = f"{verb} {resource}" if resource else verb
    return f"{action} ({name}, request code {cmd.code})"
