"""Topic and group naming rules and the system topics RocketMQ reserves."""

from __future__ import annotations

import re

from .errors import FerryMQError

RETRY_GROUP_TOPIC_PREFIX = "%RETRY%"
DLQ_GROUP_TOPIC_PREFIX = "%DLQ%"
AUTO_CREATE_TOPIC_KEY_TOPIC = "TBW102"
SCHEDULE_TOPIC = "SCHEDULE_TOPIC_XXXX"
# RocketMQ 5's timer messages wait here (queue 0) until the timer wheel delivers them.
TIMER_TOPIC = "rmq_sys_wheel_timer"
# Pop checkpoints (RocketMQ's PopCheckPoint records), one topic per cluster: <prefix><cluster>.
REVIVE_LOG_TOPIC_PREFIX = "rmq_sys_REVIVE_LOG_"
DEFAULT_CLUSTER = "DefaultCluster"
DEFAULT_BROKER_NAME = "broker-a"
MASTER_ID = 0
CLIENT_INNER_PRODUCER_GROUP = "CLIENT_INNER_PRODUCER"
TOOLS_CONSUMER_GROUP = "TOOLS_CONSUMER"

TOPIC_MAX_LENGTH = 127
GROUP_MAX_LENGTH = 255
_VALID = re.compile(r"^[%|a-zA-Z0-9_-]+$")

# Transactional messages (RocketMQ's TopicValidator and MixAll names): half messages, the
# operations that end them, half messages checked too often, and the group whose offsets on
# the first two hold the check's progress.
TRANS_HALF_TOPIC = "RMQ_SYS_TRANS_HALF_TOPIC"
TRANS_OP_HALF_TOPIC = "RMQ_SYS_TRANS_OP_HALF_TOPIC"
TRANS_CHECK_MAX_TIME_TOPIC = "TRANS_CHECK_MAX_TIME_TOPIC"
CID_SYS_RMQ_TRANS = "CID_RMQ_SYS_TRANS"
TRANSACTION_TOPICS = frozenset({TRANS_HALF_TOPIC, TRANS_OP_HALF_TOPIC, TRANS_CHECK_MAX_TIME_TOPIC})

SYSTEM_TOPICS = frozenset({AUTO_CREATE_TOPIC_KEY_TOPIC, SCHEDULE_TOPIC, TIMER_TOPIC})
# Names a client may not create, change or delete on a broker (RocketMQ's TopicValidator set).
# Every broker serves it (one queue), as RocketMQ's do: `ferrymq cluster send-rt` probes it.
SELF_TEST_TOPIC = "SELF_TEST_TOPIC"
RESERVED_TOPICS = SYSTEM_TOPICS | frozenset({
    "BenchmarkTest", "RMQ_SYS_TRACE_TOPIC", SELF_TEST_TOPIC, "OFFSET_MOVED_EVENT",
}) | TRANSACTION_TOPICS
RESERVED_TOPIC_PREFIXES = ("rmq_sys_", "RMQ_SYS_")


class InvalidNameError(FerryMQError, ValueError):
    """A topic or group name breaks RocketMQ's naming rule."""

    def __init__(self, kind: str, name: str, reason: str) -> None:
        super().__init__(f"invalid {kind} name {name!r}: {reason}")
        self.kind = kind
        self.name = name
        self.reason = reason


def _check(kind: str, name: str, max_len: int) -> None:
    if not name:
        raise InvalidNameError(kind, name, "it is empty")
    if len(name) > max_len:
        raise InvalidNameError(kind, name, f"it is longer than {max_len} characters")
    if not _VALID.match(name):
        raise InvalidNameError(kind, name, "only letters, digits, '%', '|', '_' and '-' are allowed")


def validate_topic(name: str) -> None:
    _check("topic", name, TOPIC_MAX_LENGTH)


def validate_group(name: str) -> None:
    _check("group", name, GROUP_MAX_LENGTH)


def is_reserved_topic(topic: str, *broker_names: str) -> bool:
    """A system topic, or one named like the broker's cluster or broker name (the name server
    routes those names to the broker itself)."""
    return topic in RESERVED_TOPICS or topic.startswith(RESERVED_TOPIC_PREFIXES) or topic in broker_names


def retry_topic(group: str) -> str:
    return RETRY_GROUP_TOPIC_PREFIX + group


def dlq_topic(group: str) -> str:
    return DLQ_GROUP_TOPIC_PREFIX + group


def is_retry_topic(topic: str) -> bool:
    return topic.startswith(RETRY_GROUP_TOPIC_PREFIX)


def is_dlq_topic(topic: str) -> bool:
    return topic.startswith(DLQ_GROUP_TOPIC_PREFIX)


def java_string_hash(text: str) -> int:
    """Java's String.hashCode: RocketMQ stores it as a message's tag code, and clients send
    the hashes of their subscribed tags, so ours must agree bit for bit."""
    h = 0
    data = text.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h
