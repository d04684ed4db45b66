"""Typed access to a remoting command's extFields, which are all strings on the wire.

A missing or non-numeric required field is a client error, not a crash: it raises
HeaderError, which the server turns into a response with a remark naming the field."""

from __future__ import annotations

from collections.abc import Mapping

from .errors import FerryMQError


class HeaderError(FerryMQError, ValueError):
    def __init__(self, field: str, reason: str) -> None:
        super().__init__(f"header field {field!r} {reason}")
        self.field = field
        self.reason = reason


def req_str(ext: Mapping[str, str], name: str) -> str:
    value = ext.get(name)
    if value is None or value == "":
        raise HeaderError(name, "is missing")
    return value


def opt_str(ext: Mapping[str, str], name: str, default: str | None = None) -> str | None:
    value = ext.get(name)
    return default if value is None else value


def req_int(ext: Mapping[str, str], name: str) -> int:
    value = ext.get(name)
    if value is None or value == "":
        raise HeaderError(name, "is missing")
    try:
        return int(value)
    except ValueError:
        raise HeaderError(name, f"is not an integer: {value!r}") from None


def opt_int(ext: Mapping[str, str], name: str, default: int) -> int:
    value = ext.get(name)
    if value is None or value == "" or value == "null":
        return default
    try:
        return int(value)
    except ValueError:
        raise HeaderError(name, f"is not an integer: {value!r}") from None


def opt_bool(ext: Mapping[str, str], name: str, default: bool = False) -> bool:
    value = ext.get(name)
    if value is None or value == "":
        return default
    return value.lower() == "true"


def fields(**values: object) -> dict[str, str]:
    """Build extFields, dropping None and writing booleans as Java does."""
    out: dict[str, str] = {}
    for k, v in values.items():
        if v is None:
            continue
        out[k] = ("true" if v else "false") if isinstance(v, bool) else str(v)
    return out


# SEND_MESSAGE_V2 carries SendMessageRequestHeader with one-letter names to save bytes.
SEND_V2_NAMES = {
    "a": "producerGroup",
    "b": "topic",
    "c": "defaultTopic",
    "d": "defaultTopicQueueNums",
    "e": "queueId",
    "f": "sysFlag",
    "g": "bornTimestamp",
    "h": "flag",
    "i": "properties",
    "j": "reconsumeTimes",
    "k": "unitMode",
    "l": "maxReconsumeTimes",
    "m": "batch",
    "n": "brokerName",
}
SEND_V1_NAMES = {v: k for k, v in SEND_V2_NAMES.items()}


def send_header_from_v2(ext: Mapping[str, str]) -> dict[str, str]:
    return {SEND_V2_NAMES.get(k, k): v for k, v in ext.items()}


def send_header_to_v2(ext: Mapping[str, str]) -> dict[str, str]:
    return {SEND_V1_NAMES.get(k, k): v for k, v in ext.items()}


# QUERY_CONSUMER_OFFSET field (RocketMQ 5): "false" asks for the stored offset only, never the
# broker's start for a new group on a young queue (broker/init_offset.py).
SET_ZERO_IF_NOT_FOUND = "setZeroIfNotFound"

# PULL_MESSAGE sysFlag bits (PullSysFlag)
PULL_FLAG_COMMIT_OFFSET = 0x1
PULL_FLAG_SUSPEND = 0x2
PULL_FLAG_SUBSCRIPTION = 0x4
PULL_FLAG_CLASS_FILTER = 0x8

# Topic permissions (PermName)
PERM_PRIORITY = 0x8
PERM_READ = 0x4
PERM_WRITE = 0x2
PERM_INHERIT = 0x1
