"""The error an invalid SQL92 selector raises, wherever it is parsed (client or broker)."""

from __future__ import annotations

from ..errors import FerryMQError


class SelectorError(FerryMQError, ValueError):
    """An SQL92 message selector that RocketMQ's grammar or its checks refuse. `position` is
    the offset in `expression` where the problem was found (its length when the expression
    ended too soon)."""

    def __init__(self, expression: str, position: int, reason: str) -> None:
        super().__init__(f"invalid SQL92 selector {expression!r}: {reason} (at offset {position})")
        self.expression = expression
        self.position = position
        self.reason = reason
