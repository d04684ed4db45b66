"""Message trace recorded by the broker (docs/trace.md)."""

from .codec import TRACE_TOPIC
from .recorder import TraceRecorder

__all__ = ["TRACE_TOPIC", "TraceRecorder"]
