"""Shared fixtures: a real `ferrymq standalone` process on loopback ports picked by the OS."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

# Short delay levels so retry paths run in tests within seconds; the order of levels is kept.
TEST_DELAY_LEVELS = "100ms 200ms 300ms 400ms 500ms 600ms 700ms 800ms 900ms 1s 1s 1s 1s 1s 1s 1s 1s 1s"


@dataclass
class Standalone:
    proc: subprocess.Popen[str]
    namesrv: str
    broker: str
    store_dir: Path
    log_lines: list[str] = field(default_factory=list)

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 20.0) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                return self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
                raise
        return self.proc.returncode

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


def start_standalone(store_dir: Path, *extra: str, namesrv_port: int = 0, broker_port: int = 0,
                     timeout: float = 30.0) -> Standalone:
    cmd = [
        sys.executable, "-m", "ferrymq", "standalone",
        "--namesrv-port", str(namesrv_port), "--broker-port", str(broker_port),
        "--store-dir", str(store_dir), "--message-delay-level", TEST_DELAY_LEVELS, *extra,
    ]
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    assert proc.stdout is not None and proc.stderr is not None
    log_lines: list[str] = []

    def drain_stderr() -> None:
        assert proc.stderr is not None
        for line in proc.stderr:
            log_lines.append(line)

    threading.Thread(target=drain_stderr, daemon=True).start()
    ready: list[str] = []

    def read_ready() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            if line.startswith("namesrv="):
                ready.append(line.strip())
                break

    reader = threading.Thread(target=read_ready, daemon=True)
    reader.start()
    reader.join(timeout)
    if not ready:
        proc.kill()
        proc.wait()
        raise RuntimeError("standalone did not become ready:\n" + "".join(log_lines[-40:]))
    parts = dict(p.split("=", 1) for p in ready[0].split())
    return Standalone(proc, parts["namesrv"], parts["broker"], store_dir, log_lines)


@pytest.fixture
def standalone(tmp_path: Path) -> Iterator[Standalone]:
    server = start_standalone(tmp_path / "store")
    try:
        yield server
    finally:
        server.stop()


def wait_until(predicate, timeout: float = 10.0, interval: float = 0.02, message: str = "condition"):  # type: ignore[no-untyped-def]
    """Poll `predicate` until it returns a truthy value or the deadline passes."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {message}")
        time.sleep(interval)


def pytest_asyncio_loop_factories(config: pytest.Config, item: pytest.Item) -> Mapping[str, Any] | None:
    """Transport tests run on both loops (the servers use uvloop, tools may not); the rest on
    the default loop."""
    if "remoting" not in item.path.parts:
        return {"asyncio": asyncio.new_event_loop}
    import uvloop

    return {"asyncio": asyncio.new_event_loop, "uvloop": uvloop.new_event_loop}
