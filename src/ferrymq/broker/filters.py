"""SQL92 filtering of stored records: the consume queue holds only tag hash codes, so a
selector is evaluated on the properties of each record a pull reads (RocketMQ's
ExpressionMessageFilter.isMatchedByCommitLog)."""

from __future__ import annotations

from ..common.record import MessageDecodeError, locate, properties_decode
from ..common.sql92 import Selector
from ..store import RecordFilter


def record_filter(selector: Selector) -> RecordFilter:
    """Whether the record at buf[start:end] is delivered: only when the selector is TRUE for
    its properties (unknown, a failed evaluation or unreadable properties: not delivered, as
    in RocketMQ)."""
    matches = selector.matches

    def keep(buf: bytes, start: int, end: int) -> bool:
        try:
            props_at = locate(buf, start, end)[5]
        except MessageDecodeError:
            return False
        return matches(properties_decode(memoryview(buf)[props_at:end]))

    return keep
