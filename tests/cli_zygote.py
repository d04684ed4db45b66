"""A pre-imported `ferrymq` command that forks one child per command.

Each CLI test runs the real command in a real process of its own, as a user does; what it
skips is Python's start-up and the import of the package (about a second each on a small
machine, paid ~150 times per suite). The zygote imports the CLI once and then, for each
request on its stdin, forks: the child takes the request's environment, argv and output
files and runs `ferrymq.cli.main.main` exactly as `python -m ferrymq` does. The zygote has
no threads and opens no sockets, so forking it is safe.

Protocol: one JSON object a line on stdin ({"args", "env", "stdout", "stderr", "timeout"}),
one JSON object a line on stdout ({"rc"} or {"timeout": true}).
"""

from __future__ import annotations

import json
import os
import select
import signal
import sys


def _child(request: dict[str, object]) -> None:
    out = os.open(str(request["stdout"]), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    err = os.open(str(request["stderr"]), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.dup2(out, 1)
    os.dup2(err, 2)
    os.environ.clear()
    os.environ.update(request["env"])  # type: ignore[arg-type]
    args = [str(a) for a in request["args"]]  # type: ignore[attr-defined]
    sys.argv = [sys.executable, *args]
    code = 1
    try:
        from ferrymq.cli.main import main

        code = main(args)
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except BaseException:
        import traceback

        traceback.print_exc()
        code = 1
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def _run(request: dict[str, object]) -> dict[str, object]:
    pid = os.fork()
    if pid == 0:
        _child(request)
    pidfd = os.pidfd_open(pid)
    try:
        exited, _, _ = select.select([pidfd], [], [], float(request["timeout"]))  # type: ignore[arg-type]
    finally:
        os.close(pidfd)
    if not exited:
        os.kill(pid, signal.SIGKILL)
    _, status = os.waitpid(pid, 0)
    return {"rc": os.waitstatus_to_exitcode(status)} if exited else {"timeout": True}


def serve() -> None:
    import ferrymq.cli.main  # noqa: F401  the import every child would otherwise pay

    for line in sys.stdin:
        sys.stdout.write(json.dumps(_run(json.loads(line))) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    serve()
