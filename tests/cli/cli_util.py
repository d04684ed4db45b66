"""Running the `ferrymq` command as a user does: a child process against a real server."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any


def ferrymq(
    server: Any, *args: str, check: bool = True, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    full_env = dict(os.environ, FERRYMQ_NAMESRV=server.namesrv, **(env or {}))
    proc = subprocess.run(
        [sys.executable, "-m", "ferrymq", *args],
        capture_output=True,
        env=full_env,
        text=True,
        timeout=60,
    )
    if check and proc.returncode != 0:
        raise AssertionError(
            f"ferrymq {' '.join(args)} exited {proc.returncode}:\n{proc.stdout}\n{proc.stderr}"
        )
    return proc


def json_out(server: Any, *args: str) -> Any:
    return json.loads(ferrymq(server, *args, "--json").stdout)


def json_error(server: Any, *args: str, exit_code: int = 1) -> dict[str, Any]:
    """The error object a failing command prints with --json; the exit code is checked."""
    proc = ferrymq(server, *args, "--json", check=False)
    assert proc.returncode == exit_code, (proc.returncode, proc.stdout, proc.stderr)
    doc = json.loads(proc.stdout.strip().splitlines()[-1])
    assert set(doc) == {"error"}, doc
    error: dict[str, Any] = doc["error"]
    return error
