"""Start/shutdown state shared by the producer and consumers."""

from __future__ import annotations

from enum import Enum

from .errors import ClientClosedError, ClientStateError


class State(Enum):
    CREATED = "created"
    RUNNING = "running"
    SHUTDOWN = "shut down"


class Lifecycle:
    kind = "client"

    def __init__(self) -> None:
        self.state = State.CREATED

    def require_running(self, action: str) -> None:
        if self.state is State.SHUTDOWN:
            raise ClientClosedError(self.kind, action)
        if self.state is not State.RUNNING:
            raise ClientStateError(self.kind, self.state.value, action)

    def require_created(self, action: str) -> None:
        if self.state is not State.CREATED:
            raise ClientStateError(self.kind, self.state.value, action)
