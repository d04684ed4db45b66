"""Small files replaced whole so that a crash leaves the old or the new version, never a mix
(the store's metadata, the broker's topic and offset tables, the controller's state), and read
back with a fall-back on the previous version."""

from __future__ import annotations

import contextlib
import logging
import os
from pathlib import Path
from typing import Any

from . import jsonx

log = logging.getLogger("ferrymq.files")


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write(path: Path | str, data: bytes) -> None:
    """Replace `path` so that a crash leaves either the old or the new content, never a mix.
    The previous version is kept as `<path>.bak` for read_json_file to fall back on."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        view = memoryview(data)
        while view:
            n = os.write(fd, view)
            view = view[n:]
        os.fsync(fd)
    finally:
        os.close(fd)
    if path.exists():
        # A hard link keeps the old version under .bak without a window where neither exists.
        bak = path.with_name(path.name + ".bak")
        with contextlib.suppress(FileNotFoundError):
            bak.unlink()
        try:
            os.link(path, bak)
        except OSError as exc:
            log.debug("could not keep %s: %s", bak, exc)
    os.replace(tmp, path)
    fsync_dir(path.parent)


def read_json_file(path: Path | str, default: Any) -> Any:
    """The JSON in `path` (RocketMQ's fastjson dialect accepted); its .bak when the file is
    corrupt; `default` when the file does not exist or neither version parses."""
    path = Path(path)
    bak = path.with_name(path.name + ".bak")
    if not path.exists():
        return default
    for candidate in (path, bak):
        try:
            raw = candidate.read_bytes()
        except FileNotFoundError:
            continue
        try:
            return jsonx.loads(raw)
        except (ValueError, UnicodeDecodeError) as exc:
            log.error("%s is corrupt (%s); trying the previous version", candidate, exc)
    return default
