"""Timer messages: delivery at any time (RocketMQ 5's timer wheel). See docs/storage.md."""

from .message import TimerMessageError, asks_for_timer, to_timer
from .service import TimerService
from .state import TimerStore, TimerStoreConfig

__all__ = ["TimerMessageError", "TimerService", "TimerStore", "TimerStoreConfig", "asks_for_timer",
           "to_timer"]
