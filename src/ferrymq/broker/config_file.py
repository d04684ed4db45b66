"""Writing a runtime configuration change back to the broker's TOML file (RocketMQ's
Configuration.persist to brokerConfigPath), so a restart keeps it.

The file is edited, not regenerated: a key already there (snake_case or broker.conf camelCase,
at the top level or in a [broker] table) gets its new value on its own line; a key not there
is added where the broker's keys are. Comments and the other keys stay as they were. The new
text must parse before it replaces the old one, atomically."""

from __future__ import annotations

import json
import tomllib
from collections.abc import Mapping
from pathlib import Path

from ..common.durable import atomic_write
from .config import _CAMEL_ALIASES


def toml_value(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    # A JSON string is a TOML basic string for the text a broker key holds.
    return json.dumps(str(value), ensure_ascii=False)


def _table(line: str) -> str | None:
    """The table a `[name]` header line opens; None for any other line."""
    s = line.strip()
    if s.startswith("[") and not s.startswith("[["):
        return s.strip("[]").strip()
    return None


def write_back(path: Path, changes: Mapping[str, object]) -> None:
    """Set each field (snake_case name -> value) in the TOML file at `path`."""
    lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
    # load_config reads the [broker] table when the file has one, else the top level.
    target = "broker" if any(_table(line) == "broker" for line in lines) else None
    section: str | None = None
    done: set[str] = set()
    for i, line in enumerate(lines):
        table = _table(line)
        if table is not None:
            section = table
            continue
        stripped = line.strip()
        if section != target or stripped.startswith("#") or "=" not in stripped:
            continue
        key = stripped.split("=", 1)[0].strip().strip('"')
        name = _CAMEL_ALIASES.get(key, key)
        if name in changes:
            lines[i] = f"{key} = {toml_value(changes[name])}\n"
            done.add(name)
    added = [f"{n} = {toml_value(v)}\n" for n, v in changes.items() if n not in done]
    if added:
        if target == "broker":
            at = next(i for i, line in enumerate(lines) if _table(line) == "broker") + 1
        else:
            # Top-level keys go before the first table, where TOML wants them.
            at = next((i for i, line in enumerate(lines) if _table(line) is not None), len(lines))
        if at > 0 and not lines[at - 1].endswith("\n"):
            lines[at - 1] += "\n"
        lines[at:at] = added
    text = "".join(lines)
    tomllib.loads(text)  # never leave a file the next start cannot read
    atomic_write(path, text.encode("utf-8"))
