"""`ferrymq standalone` as a child process: started, awaited until it prints its ready line,
and stopped cleanly. What tests, benchmarks and the demo pipeline run their broker with."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from ..common.paths import StrPath, as_path


@dataclass
class StandaloneProcess:
    proc: subprocess.Popen[str]
    namesrv: str
    broker: str
    store_dir: Path
    # The gRPC endpoint (apache.rocketmq.v2), "" when it is off.
    grpc: str = ""
    # The server's stderr, when it was asked to be collected (log=None).
    log_lines: list[str] = field(default_factory=list)
    # The Prometheus endpoint (HOST:PORT, path /metrics), "" unless --metrics-port was given.
    metrics: str = ""

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 30.0) -> int:
        """Signal the server and wait for it; one that does not stop in time is killed and
        TimeoutExpired raised, since a clean stop is what callers rely on."""
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                return self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.kill()
                raise
        return self.proc.returncode

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


def start_standalone(store_dir: StrPath, *extra: str, namesrv_port: int = 0, broker_port: int = 0,
                     grpc_port: int = 0, ha_port: int = 0,
                     log: IO[str] | int | None = subprocess.DEVNULL,
                     timeout: float = 30.0) -> StandaloneProcess:
    """Start the server on loopback (ports 0: picked by the OS; grpc_port -1: no gRPC endpoint)
    with `extra` flags; returns
    once it is ready. `log` takes its stderr: a file, DEVNULL, or None to collect the lines
    in `log_lines` (the last of which go into the error when it does not start)."""
    root = as_path(store_dir)
    cmd = [
        sys.executable, "-m", "ferrymq", "standalone",
        "--namesrv-port", str(namesrv_port), "--broker-port", str(broker_port),
        # The replication port too is picked freely: its default (the broker port + 1) is not
        # reserved when a restart reuses a picked broker port, and a client's outgoing
        # connection may hold it by then.
        "--grpc-port", str(grpc_port), "--ha-port", str(ha_port), "--store-dir", str(root),
        *extra,
    ]
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    stderr = subprocess.PIPE if log is None else log
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=stderr, text=True, env=env)
    log_lines: list[str] = []
    drainer: threading.Thread | None = None
    if log is None:
        def drain_stderr() -> None:
            assert proc.stderr is not None
            for line in proc.stderr:
                log_lines.append(line)

        drainer = threading.Thread(target=drain_stderr, daemon=True)
        drainer.start()
    ready: list[str] = []

    def read_ready() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:  # "namesrv=HOST:PORT broker=HOST:PORT ha=... grpc=..."
            if line.startswith("namesrv="):
                ready.append(line.strip())
                break

    # A thread, so a server that hangs before its ready line still fails at the deadline.
    reader = threading.Thread(target=read_ready, daemon=True)
    reader.start()
    reader.join(timeout)
    if not ready:
        proc.kill()
        proc.wait()
        if drainer is not None:  # the server's last words (why it did not start) are read
            drainer.join(5)
        raise RuntimeError("ferrymq standalone did not become ready:\n" + "".join(log_lines[-40:]))
    parts = dict(p.split("=", 1) for p in ready[0].split())
    return StandaloneProcess(proc, parts["namesrv"], parts["broker"], root, parts.get("grpc", ""),
                             log_lines, parts.get("metrics", ""))


@contextlib.contextmanager
def standalone(store_dir: StrPath, *extra: str, log: IO[str] | int | None = subprocess.DEVNULL,
               timeout: float = 30.0) -> Iterator[StandaloneProcess]:
    """start_standalone for a `with` block; the server is stopped when the block ends."""
    server = start_standalone(store_dir, *extra, log=log, timeout=timeout)
    try:
        yield server
    finally:
        try:
            server.stop()
        except subprocess.TimeoutExpired:
            pass  # killed by stop(); leaving the block must not hide the block's own error
