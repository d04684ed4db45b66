"""RocketMQ 5.3's recall handle (RecallMessageHandle v1): what a send of a delayed message
answers and a recall names it by, "v1 <topic> <broker name> <delivery ms> <message id>" in
URL-safe base64. Read by the broker that holds the timer (RECALL_MESSAGE) and by the gRPC
front (RecallMessage)."""

from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass

from .errors import FerryMQError

_VERSION = "v1"


class RecallHandleError(FerryMQError, ValueError):
    """A recall handle that does not decode (RocketMQ's "recall handle is invalid")."""

    def __init__(self, handle: str) -> None:
        super().__init__("recall handle is invalid")
        self.handle = handle


@dataclass(frozen=True, slots=True)
class RecallHandle:
    topic: str
    broker_name: str
    deliver_ms: int
    message_id: str

    def encode(self) -> str:
        raw = " ".join((_VERSION, self.topic, self.broker_name, str(self.deliver_ms), self.message_id))
        return base64.urlsafe_b64encode(raw.encode()).decode()


def decode_recall_handle(text: str) -> RecallHandle:
    try:
        items = base64.urlsafe_b64decode(text.encode()).decode().split(" ")
    except (binascii.Error, UnicodeDecodeError, ValueError):
        items = []
    if len(items) < 5 or items[0] != _VERSION or not items[3].lstrip("-").isdigit():
        raise RecallHandleError(text)
    return RecallHandle(items[1], items[2], int(items[3]), items[4])
