"""`python -m ferrymq ARGS` as a user runs it, with the start-up paid once per test session.

The command runs in a process of its own, forked from a zygote that has already imported the
package (cli_zygote.py): its own environment and argv, stdin from /dev/null, stdout and
stderr captured, its exit code returned, a SIGKILL at the timeout. Only Python's start-up
and the package import (about a second on a small machine) are skipped."""

from __future__ import annotations

import atexit
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

_zygote: subprocess.Popen[str] | None = None
_output = Path(tempfile.mkdtemp(prefix="ferrymq-cmd-"))


def _started() -> subprocess.Popen[str]:
    global _zygote
    if _zygote is None or _zygote.poll() is not None:
        _zygote = subprocess.Popen(
            [sys.executable, str(Path(__file__).with_name("cli_zygote.py"))],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        atexit.register(_zygote.kill)
    return _zygote


def run_ferrymq(
    *args: str, env: dict[str, str] | None = None, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    """`ferrymq ARGS` with `env` (default: this process's environment) as its environment."""
    zygote = _started()
    out, err = _output / "stdout", _output / "stderr"
    request = {
        "args": list(args),
        "env": dict(os.environ) if env is None else env,
        "stdout": str(out),
        "stderr": str(err),
        "timeout": timeout,
    }
    assert zygote.stdin is not None and zygote.stdout is not None
    zygote.stdin.write(json.dumps(request) + "\n")
    zygote.stdin.flush()
    reply = json.loads(zygote.stdout.readline())
    stdout, stderr = out.read_text(), err.read_text()
    if reply.get("timeout"):
        raise subprocess.TimeoutExpired(["ferrymq", *args], timeout, stdout, stderr)
    return subprocess.CompletedProcess(["ferrymq", *args], reply["rc"], stdout, stderr)
