"""A --timeout given to `ferrymq send` or `ferrymq consume` bounds the whole command, against a
hung broker (a real one, SIGSTOPped: it keeps its sockets and answers nothing) and against a
name server address where nothing listens.

The bounds are upper bounds with a generous margin over the child's own start-up cost, which
is measured first on the same machine: a command that fails at once."""

from __future__ import annotations

import socket
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from cli_util import ferrymq

from ferrymq.embedded import start_cluster

TIMEOUT = 4.0
MARGIN = 2.0


def _closed_port() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{s.getsockname()[1]}"


def _timed(server: Any, *args: str) -> tuple[float, Any]:
    began = time.monotonic()
    proc = ferrymq(server, *args, check=False)
    return time.monotonic() - began, proc


def test_timeouts_bound_send_and_consume_against_a_hung_broker(tmp_path: Path) -> None:
    with start_cluster(tmp_path, slaves=0, role="ASYNC_MASTER") as cluster:
        server = SimpleNamespace(namesrv=cluster.namesrv.addr)
        ferrymq(server, "topic", "create", "hung", "--queues", "1")
        ferrymq(server, "send", "hung", "before")
        startup, proc = _timed(SimpleNamespace(namesrv=_closed_port()), "send", "hung", "x")
        assert proc.returncode == 1
        bound = TIMEOUT + startup + MARGIN
        cluster.static_master().pause()
        try:
            took, proc = _timed(server, "send", "hung", "late", "--timeout", f"{TIMEOUT:g}")
            assert proc.returncode == 1, (proc.stdout, proc.stderr)
            assert "send to topic hung failed" in proc.stderr, proc.stderr
            assert "did not answer SEND_MESSAGE_V2" in proc.stderr, proc.stderr
            assert took < bound, (took, bound, proc.stderr)

            for extra in ((), ("--count", "1")):
                took, proc = _timed(server, "consume", "hung", "--group", "g-hung", "--timeout",
                                    f"{TIMEOUT:g}", *extra)
                assert proc.returncode == 1, (proc.stdout, proc.stderr)
                assert f"consume did not finish within {TIMEOUT:g}s: still joining group g-hung" \
                    in proc.stderr, proc.stderr
                assert took < bound, (extra, took, bound, proc.stderr)
        finally:
            cluster.static_master().resume()


def test_consume_says_why_nothing_came_when_no_name_server_listens() -> None:
    nowhere = SimpleNamespace(namesrv=_closed_port())
    proc = ferrymq(nowhere, "consume", "t", "--group", "g", "--count", "1", "--timeout", "1",
                   check=False)
    assert proc.returncode == 1
    assert f"received 0 of 1 message(s) within 1.0s (name server {nowhere.namesrv}:" in proc.stderr
    assert f"connect to {nowhere.namesrv} failed" in proc.stderr
