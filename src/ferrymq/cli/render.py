"""Output for the client commands: JSON for programs (one document, or one object per line
for streams) and rich tables for people. Diagnostics and progress go to stderr."""

from __future__ import annotations

import base64
import json
import sys
import time
from collections.abc import Iterable, Sequence
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from ..common.message import MessageExt

stdout = Console(highlight=False, soft_wrap=True)
stderr = Console(stderr=True, highlight=False)


def print_json(value: Any) -> None:
    sys.stdout.write(json.dumps(value, ensure_ascii=False) + "\n")
    sys.stdout.flush()


def print_table(
    title: str | None,
    columns: Sequence[str],
    rows: Iterable[Sequence[Any]],
    *,
    right: Iterable[str] = (),
) -> None:
    numeric = set(right)
    table = Table(title=title, title_justify="left", show_edge=False, pad_edge=False)
    for col in columns:
        table.add_column(col, justify="right" if col in numeric else "left", no_wrap=True)
    for row in rows:
        table.add_row(*("" if v is None else str(v) for v in row))
    stdout.print(table)


def fail(message: str) -> int:
    stderr.print(f"ferrymq: {message}", markup=False)
    return 1


def body_fields(body: bytes) -> dict[str, Any]:
    """UTF-8 text when the body is text, base64 otherwise (flagged with body_b64)."""
    try:
        return {"body": body.decode("utf-8")}
    except UnicodeDecodeError:
        return {"body": base64.b64encode(body).decode("ascii"), "body_b64": True}


def message_json(m: MessageExt) -> dict[str, Any]:
    out: dict[str, Any] = {
        "msg_id": m.msg_id,
        "topic": m.topic,
        "queue_id": m.queue_id,
        "queue_offset": m.queue_offset,
        "keys": m.keys,
        "tags": m.tags,
    }
    out.update(body_fields(m.body))
    out["reconsume_times"] = m.reconsume_times
    return out


def message_detail(m: MessageExt) -> dict[str, Any]:
    """Everything known about one message (msg show / msg find)."""
    out = message_json(m)
    out.update(
        {
            "offset_msg_id": m.offset_msg_id,
            "broker": m.broker,
            "commit_log_offset": m.commit_log_offset,
            "born_host": m.born_host,
            "born_timestamp": m.born_timestamp,
            "store_host": m.store_host,
            "store_timestamp": m.store_timestamp,
            "properties": dict(m.properties),
        }
    )
    return out


def preview(body: bytes, limit: int = 60) -> str:
    text = body.decode("utf-8", "replace")
    text = text.replace("\n", " ").replace("\r", " ")
    return text if len(text) <= limit else text[: limit - 1] + "…"


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
