"""A server's port flags take port numbers only: 70000 or -1 (which argparse's int took) made
`ferrymq proxy --grpc-port` and every `--metrics-port` listen on the number modulo 65536
(4464, 65535) and print that in the ready line as if it had been asked for."""

from __future__ import annotations

from pathlib import Path

import pytest

from ferrymq_cmd import run_ferrymq

NS = ("--namesrv", "127.0.0.1:1")


@pytest.mark.parametrize("argv", [
    ("proxy", *NS, "--grpc-port", "70000"),
    ("proxy", *NS, "--grpc-port", "-1"),
    ("proxy", *NS, "--grpc-port", "0", "--metrics-port", "70000"),
    ("broker", *NS, "--broker-port", "0", "--metrics-port", "-5", "--store-dir", "{tmp}"),
    ("namesrv", "--port", "0", "--metrics-port", "65536"),
])
def test_a_port_out_of_range_is_refused_before_the_start(argv: tuple[str, ...], tmp_path: Path) -> None:
    proc = run_ferrymq(*(a.format(tmp=tmp_path) for a in argv), timeout=30)
    assert proc.returncode == 2, (proc.returncode, proc.stdout, proc.stderr)
    assert "not a port number (0-65535, 0 picks a free one)" in proc.stderr, proc.stderr
    assert proc.stdout == ""
