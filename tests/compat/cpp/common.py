"""Shared helpers for the rocketmq-client-cpp scripts (PyPI `rocketmq` 0.4.4).

Same calling convention as the ali-ons scripts in ../js: one JSON object of settings (argv[1],
else the FERRYMQ_COMPAT_CONFIG environment variable), one JSON object per line on stdout for each
event, anything else on stderr. These scripts run under tests/compat/cpp/.venv's Python, never the
project's, because the package's module name `rocketmq` clashes with other packages."""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from typing import Any

# librocketmq.so may print to fd 1 itself. Keep the real stdout for event lines only and send
# everything else written to fd 1 to stderr.
_EVENTS = os.fdopen(os.dup(1), "w", buffering=1, encoding="utf-8")
os.dup2(2, 1)
sys.stdout = sys.stderr
_LOCK = threading.Lock()


def emit(event: str, **fields: Any) -> None:
    line = json.dumps({"event": event, "ts": int(time.time() * 1000), **fields}, separators=(",", ":"))
    with _LOCK:
        _EVENTS.write(line + "\n")
        _EVENTS.flush()


def fatal(message: str, **fields: Any) -> None:
    emit("fatal", error=str(message), **fields)
    _EVENTS.flush()
    os._exit(2)


def load_config(defaults: dict[str, Any]) -> dict[str, Any]:
    raw = sys.argv[1] if len(sys.argv) > 1 and sys.argv[1] else os.environ.get("FERRYMQ_COMPAT_CONFIG", "{}")
    try:
        cfg = json.loads(raw)
    except ValueError as exc:
        fatal(f"config is not JSON: {exc}")
    if not isinstance(cfg, dict):
        fatal("config must be a JSON object")
    merged = {**defaults, **cfg}
    if not merged.get("namesrv"):
        fatal("config.namesrv (HOST:PORT) is required")
    return merged


def template(text: Any, index: int) -> str:
    return str(text).replace("{i}", str(index)).replace("{pid}", str(os.getpid()))


def pick(value: Any, index: int) -> Any:
    if isinstance(value, list):
        return value[index % len(value)] if value else None
    return value


def text(value: Any) -> str | None:
    """librocketmq returns char* as bytes (None for a null pointer)."""
    if value is None:
        return None
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return str(value)


def b(value: str) -> bytes:
    return value.encode("utf-8")


def error_fields(exc: BaseException) -> dict[str, Any]:
    return {"name": type(exc).__name__, "error": str(exc)}


def on_stop_line(stop: Any) -> None:
    """Call stop(reason) when the harness writes "stop" to stdin (or closes it). The harness
    also sends SIGTERM, but Python runs a signal handler only in the main thread between
    bytecodes, and a process whose handler never ran (once, in a full suite) would never
    stop; a line read by a thread of its own does not depend on that."""

    def read() -> None:
        for line in sys.stdin:
            if line.strip() == "stop":
                break
        stop("stdin")

    threading.Thread(target=read, daemon=True, name="stop-line").start()


LOG_LEVELS = {"fatal": 1, "error": 2, "warn": 3, "info": 4, "debug": 5, "trace": 6}


def exit_now(code: int) -> None:
    """Leave without running the wrapper's __del__ methods: destroying librocketmq objects during
    interpreter shutdown can crash, which would turn a clean run into a signal exit."""
    _EVENTS.flush()
    sys.stderr.flush()
    os._exit(code)
