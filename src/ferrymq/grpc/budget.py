"""How much of a client's deadline a call the front makes for it may take."""

from __future__ import annotations

import time


def forward_budget(time_remaining: float | None) -> float | None:
    """The part of the client's remaining deadline a forwarded call (a put, an ack) may take:
    the rest carries a timeout answer back while the client still waits, so that it retries
    (a send's next attempt goes to another broker group) instead of failing with
    DEADLINE_EXCEEDED. None: the client set no deadline."""
    if time_remaining is None:
        return None
    return time_remaining - max(0.2, time_remaining * 0.1)


class Deadline:
    """`budget` seconds from now (None: none), for calls forwarded one after another."""

    __slots__ = ("_until",)

    def __init__(self, budget: float | None) -> None:
        self._until = None if budget is None else time.monotonic() + budget

    @classmethod
    def for_client(cls, time_remaining: float | None) -> Deadline:
        """The forward_budget of a client's remaining deadline, from now on."""
        return cls(forward_budget(time_remaining))

    def left(self) -> float | None:
        return None if self._until is None else self._until - time.monotonic()
