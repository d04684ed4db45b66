"""What `make demo` says on screen (examples/pipeline/story.py), rendered as a terminal shows it:
the injected failures explained with the figures the run will show, lines that fit a terminal,
paths printed whole however narrow the terminal."""

from __future__ import annotations

import sys
import time
from pathlib import Path

from rich.console import Console

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:  # `examples` is a package of the repository, not of the install
    sys.path.insert(0, str(ROOT))

from examples.pipeline import events, story  # noqa: E402

ORDERS = events.make_orders(3000, int(time.time() * 1000) - 10 * 60_000)


def rendered(width: int, lines: list[str]) -> list[str]:
    console = Console(width=width, record=True, file=open("/dev/null", "w"))  # noqa: SIM115
    story.say(console, lines)
    return console.export_text().splitlines()


def test_the_intro_says_which_orders_fail_on_purpose_and_why_75_are_dead_lettered() -> None:
    lines = story.intro(ORDERS, 3, "%DLQ%orders-audit", "orders-bad")
    text = " ".join(lines)
    assert "on purpose" in text
    assert "every 40th order (ids 39, 79, 119, ...: 75 orders)" in text
    assert "redelivers it 3 times" in text and "%DLQ%orders-audit: 75 dead letters" in text
    assert "every 15th order (ids 3, 18, 33, ...: " in text and "passes when the broker redelivers" in text
    # Each line fits an 80-column terminal: rich never breaks one in the middle.
    assert all(len(line) < 80 for line in lines), [line for line in lines if len(line) >= 80]
    assert rendered(80, lines) == lines
    assert story.failures_line(ORDERS, 3).endswith(
        f"= {sum(events.is_transient(o.order_id) for o in ORDERS) + 75 * 4}")
    span = " ".join(story.span_lines(ORDERS, 11))
    assert "The 11 minutes are event time" in span and "simulated span of 10 minutes" in span


def test_paths_are_printed_whole_in_a_narrow_terminal(tmp_path: Path) -> None:
    deep = tmp_path / ("nested-" * 12) / "demo-output" / "aggregates"
    console = Console(width=40, record=True, file=open("/dev/null", "w"))  # noqa: SIM115
    story.print_paths(console, "files", [("aggregates (Parquet, per batch)", deep),
                                         ("broker log", tmp_path / "broker.log")])
    out = console.export_text()
    assert str(deep) in out.splitlines()[1] and "…" not in out
    assert out.splitlines()[2].endswith(str(tmp_path / "broker.log"))
