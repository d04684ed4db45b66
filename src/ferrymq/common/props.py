"""Message property names (RocketMQ's MessageConst) and the `name\\x01value\\x02` codec."""

from __future__ import annotations

from .errors import FerryMQError

NAME_VALUE_SEPARATOR = "\x01"
PROPERTY_SEPARATOR = "\x02"
KEY_SEPARATOR = " "

PROPERTY_KEYS = "KEYS"
PROPERTY_TAGS = "TAGS"
PROPERTY_WAIT_STORE_MSG_OK = "WAIT"
PROPERTY_DELAY_TIME_LEVEL = "DELAY"
PROPERTY_RETRY_TOPIC = "RETRY_TOPIC"
PROPERTY_REAL_TOPIC = "REAL_TOPIC"
PROPERTY_REAL_QUEUE_ID = "REAL_QID"
PROPERTY_TRANSACTION_PREPARED = "TRAN_MSG"
PROPERTY_PRODUCER_GROUP = "PGROUP"
PROPERTY_TRANSACTION_PREPARED_QUEUE_OFFSET = "TRAN_PREPARED_QUEUE_OFFSET"
PROPERTY_TRANSACTION_CHECK_TIMES = "TRANSACTION_CHECK_TIMES"
PROPERTY_CHECK_IMMUNITY_TIME_IN_SECONDS = "CHECK_IMMUNITY_TIME_IN_SECONDS"
PROPERTY_TRANSACTION_ID = "__transactionId__"
# A ferrymq extension: a half message whose body is a batch (SEND_BATCH_MESSAGE's encoding) of
# the transaction's messages, each stored on its own when the transaction commits
# (docs/transactions.md, "Batch half messages").
PROPERTY_TRANSACTION_BATCH = "TRAN_BATCH"
PROPERTY_MIN_OFFSET = "MIN_OFFSET"
PROPERTY_MAX_OFFSET = "MAX_OFFSET"
PROPERTY_ORIGIN_MESSAGE_ID = "ORIGIN_MESSAGE_ID"
PROPERTY_RECONSUME_TIME = "RECONSUME_TIME"
PROPERTY_MSG_REGION = "MSG_REGION"
PROPERTY_TRACE_SWITCH = "TRACE_ON"
PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX = "UNIQ_KEY"
PROPERTY_MAX_RECONSUME_TIMES = "MAX_RECONSUME_TIMES"
PROPERTY_CONSUME_START_TIMESTAMP = "CONSUME_START_TIME"
PROPERTY_SHARDING_KEY = "__SHARDINGKEY"
PROPERTY_CLUSTER = "CLUSTER"
PROPERTY_DLQ_ORIGIN_TOPIC = "DLQ_ORIGIN_TOPIC"
PROPERTY_DLQ_ORIGIN_MESSAGE_ID = "DLQ_ORIGIN_MESSAGE_ID"
# RocketMQ 5's timer messages: what a producer asks for (one of the first three), what the
# broker stores (TIMER_OUT_MS, the delivery time it settled on) and the broker's bookkeeping.
PROPERTY_TIMER_DELIVER_MS = "TIMER_DELIVER_MS"
PROPERTY_TIMER_DELAY_SEC = "TIMER_DELAY_SEC"
PROPERTY_TIMER_DELAY_MS = "TIMER_DELAY_MS"
PROPERTY_TIMER_OUT_MS = "TIMER_OUT_MS"
PROPERTY_TIMER_ROLL_TIMES = "TIMER_ROLL_TIMES"
PROPERTY_TIMER_DEL_UNIQKEY = "TIMER_DEL_UNIQKEY"

# Properties the system sets; a user property with one of these names would be silently
# overwritten by the broker, so the producer refuses them.
SYSTEM_PROPERTIES = frozenset(
    {
        PROPERTY_KEYS,
        PROPERTY_TAGS,
        PROPERTY_WAIT_STORE_MSG_OK,
        PROPERTY_DELAY_TIME_LEVEL,
        PROPERTY_RETRY_TOPIC,
        PROPERTY_REAL_TOPIC,
        PROPERTY_REAL_QUEUE_ID,
        PROPERTY_TRANSACTION_PREPARED,
        PROPERTY_PRODUCER_GROUP,
        PROPERTY_MIN_OFFSET,
        PROPERTY_MAX_OFFSET,
        PROPERTY_ORIGIN_MESSAGE_ID,
        PROPERTY_RECONSUME_TIME,
        PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX,
        PROPERTY_MAX_RECONSUME_TIMES,
        PROPERTY_CONSUME_START_TIMESTAMP,
        PROPERTY_TIMER_DELIVER_MS,
        PROPERTY_TIMER_DELAY_SEC,
        PROPERTY_TIMER_DELAY_MS,
        PROPERTY_TIMER_OUT_MS,
        PROPERTY_TIMER_ROLL_TIMES,
        PROPERTY_TIMER_DEL_UNIQKEY,
    }
)


class PropertyError(FerryMQError, ValueError):
    """A property name or value contains one of the two separator characters."""

    def __init__(self, name: str, value: str) -> None:
        super().__init__(f"property {name!r} contains a reserved separator character (\\x01 or \\x02)")
        self.name = name
        self.value = value


def properties_to_string(props: dict[str, str]) -> str:
    """Encode as RocketMQ does: every pair is followed by the property separator."""
    if not props:
        return ""
    text = PROPERTY_SEPARATOR.join(map(NAME_VALUE_SEPARATOR.join, props.items())) + PROPERTY_SEPARATOR
    # One count per separator instead of four scans per pair: this runs for every message.
    n = len(props)
    if text.count(NAME_VALUE_SEPARATOR) != n or text.count(PROPERTY_SEPARATOR) != n:
        for name, value in props.items():
            if (NAME_VALUE_SEPARATOR in name or PROPERTY_SEPARATOR in name
                    or NAME_VALUE_SEPARATOR in value or PROPERTY_SEPARATOR in value):
                raise PropertyError(name, value)
    return text


def string_to_properties(text: str) -> dict[str, str]:
    """Decode leniently: a missing final separator or an item without a value is tolerated,
    because third-party clients differ in exactly these details."""
    props: dict[str, str] = {}
    if not text:
        return props
    for item in text.split(PROPERTY_SEPARATOR):
        if not item:
            continue
        name, sep, value = item.partition(NAME_VALUE_SEPARATOR)
        if sep and name:
            props[name] = value
    return props
