"""What the demo says besides its progress bars and tables: the failures it injects on purpose
and why, what its time windows are, and where its files are. Apart from run.py (no Spark here)
so that tests can read the text as a terminal shows it.

Lines are kept under 80 columns so a terminal of the usual width never breaks one mid-sentence;
paths are printed whole (soft-wrapped by the terminal, never cut with an ellipsis as a table
cell is), so they can be copied."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from rich.console import Console

from . import events


def _ids(pick: Sequence[int]) -> str:
    return ", ".join(str(i) for i in pick[:3]) + ", ..."


def intro(orders: Sequence[events.Order], max_reconsume: int, dlq_topic: str, bad_topic: str) -> list[str]:
    broken = [o.order_id for o in orders if events.is_malformed(o.order_id)]
    transient = [o.order_id for o in orders if events.is_transient(o.order_id)]
    return [
        f"ferrymq demo: {len(orders)} orders through a broker, Spark and an audit consumer.",
        "Failures are injected on purpose, to show retries and the dead-letter queue:",
        f"- every {events.MALFORMED_EVERY}th order (ids {_ids(broken)}: {len(broken)} orders) is sent as",
        "  broken JSON. The audit consumer fails it on every delivery, so the broker",
        f"  redelivers it {max_reconsume} times (its max reconsume times), then moves it to",
        f"  {dlq_topic}: {len(broken)} dead letters. Spark sends the same broken",
        f"  rows to {bad_topic}.",
        f"- every {events.TRANSIENT_EVERY}th order (ids {_ids(transient)}: {len(transient)} orders) fails its first",
        "  audit with a simulated time-out and passes when the broker redelivers it.",
    ]


def failures_line(orders: Sequence[events.Order], max_reconsume: int) -> str:
    """How the audit's failure count is made up, from what was injected."""
    broken = sum(events.is_malformed(o.order_id) for o in orders)
    transient = sum(events.is_transient(o.order_id) for o in orders)
    return (f"audit failures expected: {transient} time-outs (once each) + {broken} broken orders"
            f" x {max_reconsume + 1} deliveries = {transient + broken * (max_reconsume + 1)}")


def span_lines(orders: Sequence[events.Order], windows: int) -> list[str]:
    """What "over N minutes" means: event time, not how long the demo ran."""
    span_min = (max(o.ts for o in orders) - min(o.ts for o in orders)) / 60_000 if orders else 0.0
    return [
        f"The {windows} minutes are event time: the producer stamps the orders over a",
        f"simulated span of {span_min:.0f} minutes before the demo started, and a span that",
        "does not start on the minute touches one more one-minute window.",
    ]


def say(console: Console, lines: Sequence[str]) -> None:
    for line in lines:
        console.print(line, markup=False, highlight=False, soft_wrap=True)


def print_paths(console: Console, title: str, rows: Sequence[tuple[str, Path]]) -> None:
    """One path a line, whole: a terminal narrower than the line wraps it, nothing cuts it."""
    console.print(title, style="bold italic", soft_wrap=True)
    width = max(len(label) for label, _ in rows)
    for label, path in rows:
        console.print(f"  {label:<{width}}  {path}", markup=False, highlight=False, soft_wrap=True)
