"""What a fault run did to the messages, in the manner of Jepsen's queue checkers: from the ids
the producers attempted, the ids they got a successful SendResult for, and the ids the
consumers received (with counts), which acknowledged messages were lost, which arrived twice,
and which arrived without ever being sent. Pure: no I/O, no clock."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class LossWindow:
    """The stretch of sending the losses fall in: from the send time of the first lost
    message to that of the last, and how many acknowledged messages were sent in it."""

    first_ms: float
    last_ms: float
    acked_in_window: int
    lost: int

    @property
    def ms(self) -> float:
        return self.last_ms - self.first_ms


@dataclass(frozen=True, slots=True)
class CheckResult:
    attempted: int
    acked: int
    received: int  # distinct ids
    deliveries: int  # with repeats
    lost: tuple[str, ...]  # acknowledged, never received
    duplicated: Mapping[str, int]  # received more than once: id -> times
    unexpected: tuple[str, ...]  # received, never attempted
    unacked_received: int  # sent without an acknowledgement (timeout, error) yet stored
    unacked_missing: int  # sent without an acknowledgement and not stored: allowed
    window: LossWindow | None

    @property
    def ok(self) -> bool:
        """At-least-once holds: nothing acknowledged is missing, nothing appeared from nowhere.
        Duplicates are allowed by that guarantee and only reported."""
        return not self.lost and not self.unexpected

    def summary(self) -> str:
        parts = [
            f"attempted={self.attempted} acked={self.acked} received={self.received}",
            f"deliveries={self.deliveries} lost={len(self.lost)} duplicated={len(self.duplicated)}",
            f"unexpected={len(self.unexpected)} unacked_received={self.unacked_received}",
            f"unacked_missing={self.unacked_missing}",
        ]
        if self.window is not None:
            w = self.window
            parts.append(f"loss_window={w.ms:.0f}ms/{w.acked_in_window} acked msgs")
        if self.lost:
            parts.append(f"first lost: {', '.join(self.lost[:5])}")
        if self.unexpected:
            parts.append(f"first unexpected: {', '.join(self.unexpected[:5])}")
        return " ".join(parts)


def check(
    attempted: Iterable[str],
    acked: Iterable[str],
    received: Mapping[str, int] | Iterable[str],
    send_ms: Mapping[str, float] | None = None,
) -> CheckResult:
    """`received` is either id -> count or every delivery (repeats counted). `send_ms` (id ->
    the time its send started) adds the loss window; ids without a time are left out of it."""
    attempted_set = set(attempted)
    acked_set = set(acked)
    if not acked_set <= attempted_set:
        stray = sorted(acked_set - attempted_set)[:5]
        raise ValueError(f"acknowledged ids that were never attempted: {stray}")
    counts = Counter(received) if not isinstance(received, Mapping) else Counter(dict(received))
    seen = {k for k, n in counts.items() if n > 0}
    lost = tuple(sorted(acked_set - seen, key=lambda k: (send_ms or {}).get(k, 0.0)))
    unacked = attempted_set - acked_set
    return CheckResult(
        attempted=len(attempted_set),
        acked=len(acked_set),
        received=len(seen),
        deliveries=sum(counts[k] for k in seen),
        lost=lost,
        duplicated={k: n for k, n in sorted(counts.items()) if n > 1},
        unexpected=tuple(sorted(seen - attempted_set)),
        unacked_received=len(unacked & seen),
        unacked_missing=len(unacked - seen),
        window=loss_window(lost, acked_set, send_ms) if send_ms is not None else None,
    )


def loss_window(lost: Iterable[str], acked: Iterable[str], send_ms: Mapping[str, float]) -> LossWindow | None:
    times = [send_ms[k] for k in lost if k in send_ms]
    if not times:
        return None
    first, last = min(times), max(times)
    in_window = sum(1 for k in acked if k in send_ms and first <= send_ms[k] <= last)
    return LossWindow(first, last, in_window, len(times))
