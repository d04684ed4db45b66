"""Typed errors of the Spark connector; each carries the fields a caller may act on."""

from __future__ import annotations

from collections.abc import Sequence

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


class UnknownOptionError(OptionError):
    """An option name the reader or writer does not take (a misspelt one, or one of the other
    side's). `suggestion` is the closest valid name, if any is close; `valid` lists them all."""

    def __init__(
        self, option: str, value: str | None, kind: str, valid: Sequence[str],
        suggestion: str | None,
    ) -> None:
        hint = f"; did you mean {suggestion!r}?" if suggestion else ""
        super().__init__(
            option, value,
            f"not an option of the ferrymq {kind}{hint} Valid {kind} options: {', '.join(valid)}",
        )
        self.kind = kind
        self.valid = tuple(valid)
        self.suggestion = suggestion


class SaveModeError(FerryMQSparkError, ValueError):
    """A batch write in a save mode the sink cannot honour: a topic cannot be truncated, so
    `overwrite` is refused rather than silently appended (Kafka's sink refuses it too)."""

    def __init__(self, mode: str) -> None:
        super().__init__(
            f"save mode {mode!r} is not allowed for ferrymq: messages cannot be removed from a"
            " topic; use .mode(\"append\")"
        )
        self.mode = mode


class DataLossError(FerryMQSparkError):
    """Messages the query should read are gone (retention or a truncated queue) while
    failOnDataLoss is true: offsets [wanted, first_available) of the queue (topic, broker,
    queue_id) are missing; `first_available` is where the queue now starts."""

    def __init__(
        self, topic: str, broker: str, queue_id: int, wanted: int, first_available: int,
        detail: str = "",
    ) -> None:
        where = f"topic {topic!r}, broker {broker!r}, queue {queue_id}"
        if first_available > wanted:
            what = (f"offsets {wanted}..{first_available - 1} are no longer available"
                    f" (removed by retention), the queue now starts at {first_available}")
        else:
            what = f"offset {wanted} is no longer available"
        super().__init__(
            f"data loss on {where}: {what}{': ' + detail if detail else ''}"
            " (set failOnDataLoss=false to log a warning and continue from the earliest"
            " available offset)"
        )
        self.topic = topic
        self.broker = broker
        self.queue_id = queue_id
        self.wanted = wanted
        self.first_available = first_available

    @property
    def queue(self) -> str:
        return f"{self.topic}@{self.broker}:{self.queue_id}"


class OffsetFormatError(FerryMQSparkError, ValueError):
    """An offset document (option or checkpoint) does not have the expected shape."""

    def __init__(self, text: str, reason: str) -> None:
        super().__init__(f"bad offsets {text[:200]!r}: {reason}")
        self.text = text
        self.reason = reason
