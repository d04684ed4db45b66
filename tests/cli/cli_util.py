"""Running the `ferrymq` command as a user does: a child process (ferrymq_cmd.py) against a
real server."""

from __future__ import annotations

import json
import os
import subprocess
from typing import Any

from ferrymq_cmd import run_ferrymq


def ferrymq(
    server: Any, *args: str, check: bool = True, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    full_env = dict(os.environ, FERRYMQ_NAMESRV=server.namesrv, **(env or {}))
    proc = run_ferrymq(*args, env=full_env)
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


def ferrymq_at(namesrv: str, *args: str) -> tuple[int, str, str]:
    """`ferrymq ARGS --namesrv NAMESRV` in a process of its own (ferrymq_cmd.py): exit code,
    stdout, stderr."""
    proc = run_ferrymq(*args, "--namesrv", namesrv)
    return proc.returncode, proc.stdout, proc.stderr


def json_at(namesrv: str, *args: str, exit_code: int = 0) -> Any:
    """The --json document of `ferrymq_at`; its exit code is checked."""
    code, out, err = ferrymq_at(namesrv, *args, "--json")
    assert code == exit_code, (code, out, err)
    return json.loads(out.strip().splitlines()[-1])
