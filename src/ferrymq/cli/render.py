"""Output for the client commands: JSON for programs (one document, or one object per line
for streams) and rich tables for people. Diagnostics and progress go to stderr."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Iterable, Sequence
from typing import Any, Literal

from rich.console import Console
from rich.measure import Measurement
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

stdout = Console(highlight=False, soft_wrap=True)
stderr = Console(stderr=True, highlight=False)


def print_json(value: Any) -> None:
    sys.stdout.write(json.dumps(value, ensure_ascii=False) + "\n")
    sys.stdout.flush()


def is_id_column(name: str) -> bool:
    """Columns people copy whole: ids (msg_id, offset_msg_id, client id) and addresses."""
    return name.endswith("id") or name in ("addr", "address")


# A folded column keeps its header whole, and words up to this length (the longest message id,
# an IPv6 one) are never cut, so an id in a key/value table stays whole too.
FOLD_MIN_WIDTH = 56


def print_table(
    title: str | None,
    columns: Sequence[str],
    rows: Iterable[Sequence[Any]],
    *,
    right: Iterable[str] = (),
) -> None:
    """A table that never cuts an id: id columns keep their full width, other columns fold,
    and when even that does not fit the table is wider than the terminal rather than lossy."""
    numeric = set(right)
    cells = [["" if v is None else str(v) for v in row] for row in rows]
    table = Table(title=title, title_justify="left", show_edge=False, pad_edge=False)
    for i, col in enumerate(columns):
        justify: Literal["left", "right"] = "right" if col in numeric else "left"
        if is_id_column(col):
            longest = max((len(r[i]) for r in cells), default=0)
            table.add_column(col, justify=justify, no_wrap=True, min_width=longest)
        else:
            word = max((len(w) for r in cells for w in r[i].split()), default=0)
            floor = max(len(col), min(word, FOLD_MIN_WIDTH))
            table.add_column(col, justify=justify, overflow="fold", min_width=floor)
    for row in cells:
        table.add_row(*row)
    needed = Measurement.get(stdout, stdout.options, table).minimum
    stdout.print(table, width=max(stdout.width, needed), crop=False)


def broker_label(broker: str, read_from: str) -> str:
    """A broker group's name, marked when its master is down and its slave was read."""
    return broker if read_from != "slave" else f"{broker} (slave)"


def print_slave_note(rows: Iterable[Any]) -> None:
    """After a table of rows with `broker` and `read_from`: which groups were read from a
    slave because their master is down."""
    names = sorted({r.broker for r in rows if r.read_from == "slave"})
    if names:
        stdout.print(f"{', '.join(names)}: master down, read from slave", markup=False)


def fmt_time(ms: int) -> str:
    if ms <= 0:
        return "-"
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ms / 1000)) + f".{ms % 1000:03d}"


def progress(description: str, total: int | None) -> Progress:
    """A progress bar on stderr, shown only to a person at a terminal."""
    return Progress(
        TextColumn(description),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=stderr,
        transient=True,
        disable=total is None or not stderr.is_terminal,
    )
