"""RocketMQ's messageDelayLevel text ("1s 5s 10s 30s 1m ... 2h") as milliseconds per level.

Shared by the broker (scheduling) and the store (the tag code of a SCHEDULE_TOPIC_XXXX entry is
its delivery time), which must not import each other."""

from __future__ import annotations

from .errors import FerryMQError

# RocketMQ's messageDelayLevel default: 18 levels.
DEFAULT_DELAY_LEVELS = "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h"

_UNITS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}


class DelayLevelError(FerryMQError, ValueError):
    def __init__(self, text: str, reason: str) -> None:
        super().__init__(f"bad delay levels {text!r}: {reason}")
        self.text = text
        self.reason = reason


def parse_delay_levels(text: str) -> tuple[int, ...]:
    """'1s 5s 1m' -> (1000, 5000, 60000); 'ms' is accepted so tests can use short levels."""
    levels: list[int] = []
    for item in text.split():
        unit = "ms" if item.endswith("ms") else item[-1]
        number = item[: -len(unit)]
        if unit not in _UNITS or not number:
            raise DelayLevelError(text, f"level {item!r} has no known unit (ms, s, m, h, d)")
        try:
            value = float(number)
        except ValueError:
            raise DelayLevelError(text, f"level {item!r} is not a number") from None
        if value < 0:
            raise DelayLevelError(text, f"level {item!r} is negative")
        levels.append(int(value * _UNITS[unit]))
    if not levels:
        raise DelayLevelError(text, "no levels given")
    return tuple(levels)
