"""Typed errors of the Spark connector; each carries the fields a caller may act on."""

from __future__ import annotations

from ..common.errors import FerryMQError


class FerryMQSparkError(FerryMQError):
    """Base class of the connector's errors."""


class OptionError(FerryMQSparkError, ValueError):
    """An option is missing or its value cannot be used."""

    def __init__(self, option: str, value: str | None, reason: str) -> None:
        shown = "missing" if value is None else repr(value)
        super().__init__(f"option {option!r} ({shown}): {reason}")
        self.option = option
        self.value = value
        self.reason = reason


class DataLossError(FerryMQSparkError):
    """Messages the query should read are gone (retention or a truncated queue) while
    failOnDataLoss is true. `first_available` is where the queue now starts."""

    def __init__(self, queue: str, wanted: int, first_available: int, detail: str = "") -> None:
        super().__init__(
            f"data loss on {queue}: offset {wanted} is no longer available, the queue now starts"
            f" at {first_available}{': ' + detail if detail else ''}"
            " (set failOnDataLoss=false to skip ahead)"
        )
        self.queue = queue
        self.wanted = wanted
        self.first_available = first_available


class OffsetFormatError(FerryMQSparkError, ValueError):
    """An offset document (option or checkpoint) does not have the expected shape."""

    def __init__(self, text: str, reason: str) -> None:
        super().__init__(f"bad offsets {text[:200]!r}: {reason}")
        self.text = text
        self.reason = reason
