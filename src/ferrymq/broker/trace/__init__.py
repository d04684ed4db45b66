"""Message trace recorded by the broker (docs/trace.md)."""

from .codec import TRACE_TOPIC
from .recorder import TRACED_EVENTS, TraceRecorder

__all__ = ["TRACED_EVENTS", "TRACE_TOPIC", "TraceRecorder"]
