"""RocketMQ's SubscriptionGroupConfig settings as ferrymq names them: the broker's table
(broker/groups.py) and the admin client (client/admin_groups.py) read and write the same JSON."""

from __future__ import annotations

# (ferrymq's name, RocketMQ's JSON field, type), in SubscriptionGroupConfig's order.
GROUP_FIELDS: tuple[tuple[str, str, type], ...] = (
    ("consume_enable", "consumeEnable", bool),
    ("consume_from_min_enable", "consumeFromMinEnable", bool),
    ("consume_broadcast_enable", "consumeBroadcastEnable", bool),
    ("consume_message_orderly", "consumeMessageOrderly", bool),
    ("retry_queue_nums", "retryQueueNums", int),
    ("retry_max_times", "retryMaxTimes", int),
    ("broker_id", "brokerId", int),
    ("which_broker_when_consume_slowly", "whichBrokerWhenConsumeSlowly", int),
    ("notify_consumer_ids_changed_enable", "notifyConsumerIdsChangedEnable", bool),
    ("group_sys_flag", "groupSysFlag", int),
    ("consume_timeout_minute", "consumeTimeoutMinute", int),
)
JSON_NAMES = {ours: theirs for ours, theirs, _ in GROUP_FIELDS}


def field_value(value: object, kind: type) -> bool | int:
    """A setting as sent: Java's tools send booleans, some callers their text."""
    if kind is bool:
        return value.strip().lower() == "true" if isinstance(value, str) else bool(value)
    return int(str(value))
