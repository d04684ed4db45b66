"""A server's port flags take port numbers only: 70000 or -1 (which argparse's int took) made
`ferrymq proxy --grpc-port` and every `--metrics-port` listen on the number modulo 65536
(4464, 65535) and print that in the ready line as if it had been asked for."""

from __future__ import annotations

import socket
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


def test_a_metrics_port_in_use_stops_the_start_with_one_line(tmp_path: Path) -> None:
    """As a gRPC port in use does: the port, its flag, "in use?", exit code 1 (it was the
    loop's `[Errno 98] error while attempting to bind on address ...`)."""
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = str(holder.getsockname()[1])
        for argv in (("namesrv", "--port", "0"),
                     ("proxy", *NS, "--grpc-port", "0"),
                     ("broker", *NS, "--broker-port", "0", "--ha-port", "0", "--grpc-port", "0",
                      "--store-dir", str(tmp_path / "broker")),
                     ("standalone", "--namesrv-port", "0", "--broker-port", "0", "--ha-port", "0",
                      "--grpc-port", "0", "--store-dir", str(tmp_path / "store"))):
            proc = run_ferrymq(*argv, "--metrics-port", port, timeout=60)
            assert proc.returncode == 1, (argv, proc.returncode, proc.stdout, proc.stderr)
            last = proc.stderr.strip().splitlines()[-1]
            assert last == f"ferrymq: cannot start: metrics port 127.0.0.1:{port} (--metrics-port) " \
                          "cannot be bound (in use?)", (argv, proc.stderr)
            assert "Traceback" not in proc.stderr and proc.stdout == "", (argv, proc.stdout, proc.stderr)


def test_a_grpc_port_in_use_names_its_flag(tmp_path: Path) -> None:
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = str(holder.getsockname()[1])
        for argv in (("proxy", *NS, "--grpc-port", port),
                     ("broker", *NS, "--broker-port", "0", "--ha-port", "0", "--grpc-port", port,
                      "--store-dir", str(tmp_path / "broker"))):
            proc = run_ferrymq(*argv, timeout=60)
            assert proc.returncode == 1, (argv, proc.returncode, proc.stdout, proc.stderr)
            last = proc.stderr.strip().splitlines()[-1]
            assert last == f"ferrymq: cannot start: gRPC port 127.0.0.1:{port} (--grpc-port) " \
                          "cannot be bound (in use?)", (argv, proc.stderr)
            assert "Traceback" not in proc.stderr and proc.stdout == "", (argv, proc.stdout, proc.stderr)


@pytest.mark.parametrize("value", ["-1", "nan", "inf", "ten"])
def test_a_send_isolation_that_is_no_duration_is_refused_before_the_start(value: str) -> None:
    proc = run_ferrymq("proxy", *NS, "--grpc-port", "0", "--send-isolation", value, timeout=30)
    assert proc.returncode == 2, (proc.returncode, proc.stdout, proc.stderr)
    assert "argument --send-isolation:" in proc.stderr and "seconds" in proc.stderr, proc.stderr
    assert proc.stdout == ""
