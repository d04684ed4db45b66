"""Driving the third-party client scripts (js/*.js with node, cpp/*.py with the compat venv's
Python) from pytest: start them with a JSON config, collect their JSON event lines, and wait for
events with deadlines."""

from __future__ import annotations

import functools
import json
import os
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from ferrymq import AdminClient

COMPAT = Path(__file__).resolve().parent
JS_DIR = COMPAT / "js"
CPP_DIR = COMPAT / "cpp"
CPP_PYTHON = CPP_DIR / ".venv" / "bin" / "python"
PY5_DIR = COMPAT / "py5"
PY5_PYTHON = PY5_DIR / ".venv" / "bin" / "python"

Event = dict[str, Any]


def node_or_skip() -> str:
    node = shutil.which("node")
    if node is None:
        pytest.skip("node is not on PATH (ali-ons compat tests need Node >= 16)")
    if not (COMPAT / "node_modules" / "ali-ons").is_dir():
        pytest.skip("tests/compat/node_modules/ali-ons is missing: run `make node`")
    return node


@functools.cache
def _cpp_problem() -> str | None:
    if not CPP_PYTHON.exists():
        return "tests/compat/cpp/.venv is missing: run `make compat-cpp`"
    probe = subprocess.run([str(CPP_PYTHON), "-c", "import rocketmq.client"], capture_output=True, text=True,
                           timeout=60)
    if probe.returncode != 0:
        return f"PyPI rocketmq 0.4.4 does not load on this machine: {probe.stderr.strip()[-400:]}"
    return None


def cpp_python_or_skip() -> str:
    problem = _cpp_problem()
    if problem is not None:
        pytest.skip(problem)
    return str(CPP_PYTHON)


@functools.cache
def _py5_problem() -> str | None:
    if not PY5_PYTHON.exists():
        return "tests/compat/py5/.venv is missing: run `make compat-py5`"
    probe = subprocess.run([str(PY5_PYTHON), "-c", "import rocketmq.v5"], capture_output=True, text=True,
                           timeout=60)
    if probe.returncode != 0:
        return f"rocketmq-python-client does not load: {probe.stderr.strip()[-400:]}"
    return None


def py5_python_or_skip() -> str:
    problem = _py5_problem()
    if problem is not None:
        pytest.skip(problem)
    return str(PY5_PYTHON)


class ClientProcess:
    """One client script run: its events (parsed stdout lines) and its stderr, both read by
    background threads; waits poll the event list under a condition variable."""

    def __init__(self, name: str, argv: list[str], config: dict[str, Any], env: dict[str, str] | None = None,
                 extra_diag: Callable[[], str] | None = None) -> None:
        self.name = name
        self.extra_diag = extra_diag
        self.config = config
        self.events: list[Event] = []
        self.stderr: list[str] = []
        self.bad_lines: list[str] = []
        self._cond = threading.Condition()
        self._closed = False
        full_env = dict(os.environ, **(env or {}))
        self.proc = subprocess.Popen(
            [*argv, json.dumps(config)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            env=full_env, cwd=str(COMPAT),
        )
        threading.Thread(target=self._read_stdout, daemon=True).start()
        threading.Thread(target=self._read_stderr, daemon=True).start()

    def _read_stdout(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            line = line.strip()
            if not line:
                continue
            try:
                event = json.loads(line)
            except ValueError:
                with self._cond:
                    self.bad_lines.append(line)
                continue
            with self._cond:
                self.events.append(event)
                self._cond.notify_all()
        with self._cond:
            self._closed = True
            self._cond.notify_all()

    def _read_stderr(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            with self._cond:
                self.stderr.append(line.rstrip("\n"))

    # ---- reading events ------------------------------------------------------------------
    def of(self, kind: str) -> list[Event]:
        with self._cond:
            return [e for e in self.events if e.get("event") == kind]

    def received(self) -> list[Event]:
        return self.of("received")

    def wait_for(self, predicate: Callable[[list[Event]], Any], timeout: float, what: str) -> Any:
        """Wait until predicate(events) is truthy; fail (with the client's recent output) at the
        deadline, or as soon as the process has exited without satisfying it."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                value = predicate(self.events)
                if value:
                    return value
                fatal = [e for e in self.events if e.get("event") == "fatal"]
                if fatal:
                    raise AssertionError(f"{self.name}: fatal while waiting for {what}: {fatal[0]}\n{self.diag()}")
                if self._closed and self.proc.poll() is not None:
                    raise AssertionError(f"{self.name} exited (rc={self.proc.returncode}) before {what}\n"
                                         f"{self.diag()}")
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError(f"{self.name}: timed out after {timeout}s waiting for {what}\n{self.diag()}")
                self._cond.wait(min(left, 0.2))

    def wait_event(self, kind: str, timeout: float = 30.0) -> Event:
        return self.wait_for(lambda evs: next((e for e in evs if e.get("event") == kind), None), timeout,
                             f"a {kind!r} event")

    def wait_received(self, predicate: Callable[[list[Event]], Any], timeout: float, what: str) -> Any:
        return self.wait_for(lambda evs: predicate([e for e in evs if e.get("event") == "received"]), timeout,
                             what)

    def diag(self, lines: int = 25) -> str:
        with self._cond:
            tail = self.events[-8:]
            err = self.stderr[-lines:]
            bad = self.bad_lines[-5:]
        out = [f"--- {self.name} last events: {json.dumps(tail)[:3000]}"]
        if bad:
            out.append(f"--- {self.name} non-JSON stdout: {bad}")
        if err:
            out.append(f"--- {self.name} stderr tail:\n" + "\n".join(err))
        if self.extra_diag is not None:
            out.append(self.extra_diag())
        return "\n".join(out)

    # ---- lifecycle -----------------------------------------------------------------------
    def wait_exit(self, timeout: float = 30.0) -> int:
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"{self.name} did not exit within {timeout}s\n{self.diag()}") from None

    def stop(self, timeout: float = 30.0) -> int:
        """Clean shutdown (SIGTERM): the client persists offsets and unregisters, then exits."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        rc = self.wait_exit(timeout)
        # Let the reader thread take the last lines.
        with self._cond:
            end = time.monotonic() + 5
            while not self._closed and time.monotonic() < end:
                self._cond.wait(0.1)
        return rc

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


class Clients:
    """Starts client processes for one test and kills whatever is left at its end."""

    def __init__(self, server: Any, home: Path) -> None:
        self.server = server
        self.namesrv: str = server.namesrv
        self.home = home
        self.started: list[ClientProcess] = []
        self._n = 0

    def _start(self, name: str, argv: list[str], config: dict[str, Any], env: dict[str, str] | None = None
               ) -> ClientProcess:
        self._n += 1
        cfg = {"namesrv": self.namesrv, **config}
        proc = ClientProcess(f"{name}#{self._n}", argv, cfg, env, lambda: broker_log_tail(self.server))
        self.started.append(proc)
        return proc

    def ons_producer(self, **config: Any) -> ClientProcess:
        return self._start("ali-ons producer", [node_or_skip(), str(JS_DIR / "producer.js")], config)

    def ons_consumer(self, **config: Any) -> ClientProcess:
        return self._start("ali-ons consumer", [node_or_skip(), str(JS_DIR / "consumer.js")], config)

    def _cpp_env(self) -> dict[str, str]:
        # librocketmq writes its logs under $HOME/logs/rocketmq-cpp: keep them in the test's dir.
        home = self.home / "cpp-home"
        home.mkdir(parents=True, exist_ok=True)
        return {"HOME": str(home), "PYTHONUNBUFFERED": "1"}

    def cpp_producer(self, **config: Any) -> ClientProcess:
        return self._start("cpp producer", [cpp_python_or_skip(), str(CPP_DIR / "producer.py")], config,
                           self._cpp_env())

    def cpp_consumer(self, **config: Any) -> ClientProcess:
        return self._start("cpp consumer", [cpp_python_or_skip(), str(CPP_DIR / "consumer.py")], config,
                           self._cpp_env())

    def sdk5(self, mode: str, **config: Any) -> ClientProcess:
        """The official RocketMQ 5 Python SDK (py5/sdk.py) against the server's gRPC endpoint."""
        return self._start(f"sdk5 {mode}", [py5_python_or_skip(), str(PY5_DIR / "sdk.py")],
                           {"endpoint": self.server.grpc, "mode": mode, **config},
                           {"PYTHONUNBUFFERED": "1", "HOME": str(self.home)})

    def cpp_logs(self, lines: int = 60) -> str:
        logdir = self.home / "cpp-home" / "logs" / "rocketmq-cpp"
        out = []
        for f in sorted(logdir.glob("*")) if logdir.is_dir() else []:
            text = f.read_text(errors="replace").splitlines()
            out.append(f"--- {f.name} (last {lines} lines)\n" + "\n".join(text[-lines:]))
        return "\n".join(out)

    def close(self) -> None:
        for p in self.started:
            p.kill()


def run_producer(proc: ClientProcess, count: int, timeout: float = 60.0) -> list[Event]:
    """Wait for a producer run to finish; every send must have succeeded."""
    done = proc.wait_event("done", timeout)
    sent = proc.of("sent")
    errors = proc.of("send_error")
    assert not errors and done["failed"] == 0, f"{proc.name}: sends failed: {errors[:3]}\n{proc.diag()}"
    assert done["sent"] == count == len(sent), f"{proc.name}: sent {done['sent']} of {count}\n{proc.diag()}"
    rc = proc.wait_exit(30)
    assert rc == 0, f"{proc.name} exited {rc}\n{proc.diag()}"
    return sent


def by_body(events: list[Event]) -> dict[str, list[Event]]:
    out: dict[str, list[Event]] = {}
    for e in events:
        out.setdefault(e["body"], []).append(e)
    return out


def broker_log_tail(server: Any, lines: int = 30) -> str:
    return "--- broker log tail:\n" + "".join(server.log_lines[-lines:])


# --- broker-side checks shared by the client suites ----------------------------------------
def committed(admin: AdminClient, group: str, topic: str) -> dict[int, int]:
    return {mq.queue_id: admin.query_consumer_offset(group, mq) for mq in admin.message_queues(topic)}


def max_offsets(admin: AdminClient, topic: str) -> dict[int, int]:
    return {mq.queue_id: admin.max_offset(mq) for mq in admin.message_queues(topic)}


def bodies_received(want: set[str]) -> Any:
    return lambda evs: want <= {e["body"] for e in evs}
