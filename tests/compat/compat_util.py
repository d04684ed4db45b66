"""The harness every third-party client suite uses: the server fixtures, the client scripts
(js/*.js with node, cpp/*.py and py5/sdk.py with their venvs' Pythons) started with a JSON config,
their JSON event lines collected and waited for with deadlines, and the broker-side checks.

A suite defines its module-scoped `server` (with `serve`) and imports the shared fixtures under
their own names, which is how pytest registers them for the module:
`from compat_util import admin as admin, clients as clients`."""

from __future__ import annotations

import contextlib
import functools
import json
import os
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from conftest import Standalone, start_standalone
from ferrymq import AdminClient, ConsumeFromWhere, ConsumeStatus, MessageExt, PushConsumer
from waits import WaitTimedOut, wait_until

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


@contextlib.contextmanager
def serve(tmp_path_factory: pytest.TempPathFactory, name: str, *args: str,
          needs: Callable[[], object] | None = None) -> Iterator[Standalone]:
    """For a suite's module-scoped `server` fixture: one standalone (with the tests' short delay
    levels and `args`) for the module, whose tests use their own topics and groups. `needs`
    skips the module before a server is started for nothing."""
    if needs is not None:
        needs()
    server = start_standalone(tmp_path_factory.mktemp(name) / "store", *args)
    try:
        yield server
    finally:
        server.stop()


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
            [*argv, json.dumps(config)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, text=True, env=full_env, cwd=str(COMPAT),
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
        return self.wait_any((kind,), timeout, f"a {kind!r} event")

    def wait_any(self, kinds: tuple[str, ...], timeout: float, what: str) -> Event:
        """The first event of any of `kinds` (a run's end, say, whether it succeeded or not)."""
        return self.wait_for(lambda evs: next((e for e in evs if e.get("event") in kinds), None), timeout, what)

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
        """Clean shutdown: the client persists offsets and unregisters, then exits. Asked twice:
        a "stop" line on stdin (clients that read it: tests/compat/cpp) and SIGTERM."""
        if self.proc.poll() is None:
            assert self.proc.stdin is not None
            with contextlib.suppress(OSError):  # it may have exited meanwhile
                self.proc.stdin.write("stop\n")
                self.proc.stdin.close()
            self.proc.send_signal(signal.SIGTERM)
        rc = self.wait_exit(timeout)
        # Let the reader thread take the last lines.
        with self._cond:
            self._cond.wait_for(lambda: self._closed, 5)
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


@pytest.fixture(scope="module")
def admin(server: Standalone) -> Iterator[AdminClient]:
    with AdminClient(server.namesrv) as client:
        yield client


@pytest.fixture
def clients(server: Any, tmp_path: Path) -> Iterator[Clients]:
    c = Clients(server, tmp_path)
    try:
        yield c
    finally:
        c.close()


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


def wait_group_started(admin: AdminClient, group: str, topic: str) -> None:
    """A new gRPC group starts at the queues' ends (ConsumeInitMode.MAX) at its first receive:
    wait until the broker has that start for every queue before sending."""
    mqs = admin.message_queues(topic)
    wait_until(lambda: all(admin.query_consumer_offset(group, mq) >= 0 for mq in mqs), 30,
               what=f"group {group} started on {topic}")


def wait_members(admin: AdminClient, group: str, count: int, timeout: float = 20.0) -> list[str]:
    """The broker lists `count` consumers of `group`."""
    return wait_until(lambda: (lambda ids: ids if len(ids) == count else None)(admin.consumer_ids(group)),
                      timeout, f"{count} consumers of {group} at the broker")


class Split:
    """Consumers of one group, by name: which of them received which bodies from which queue."""

    def __init__(self, **consumers: ClientProcess) -> None:
        self.consumers = consumers

    def _owners(self, bodies: list[str]) -> dict[int, set[str]] | None:
        received: dict[str, list[tuple[int, str]]] = {}
        for who, proc in self.consumers.items():
            for e in proc.received():
                received.setdefault(e["body"], []).append((int(e["queueId"]), who))
        if not all(b in received for b in bodies):
            return None
        owners: dict[int, set[str]] = {}
        for b in bodies:
            for queue_id, who in received[b]:
                owners.setdefault(queue_id, set()).add(who)
        return owners

    def owners(self, bodies: list[str], timeout: float = 20.0) -> dict[int, set[str]]:
        """Once every body was received: per queue, the consumers its bodies went to."""
        try:
            return wait_until(lambda: self._owners(bodies), timeout, f"{bodies[0]}... delivered")
        except WaitTimedOut as e:
            raise AssertionError("\n".join([str(e), *(p.diag() for p in self.consumers.values())])) from None


def consume_with_ferrymq(server: Any, topic: str, group: str, count: int, timeout: float = 30.0) -> list[MessageExt]:
    """ferrymq's 4.x PushConsumer reads the topic from its start until it has `count` distinct
    messages; every delivery is returned."""
    got: list[MessageExt] = []
    lock = threading.Lock()
    all_in = threading.Event()

    def listener(msgs: list[MessageExt], _ctx: object) -> ConsumeStatus:
        with lock:
            got.extend(msgs)
            if len({m.msg_id for m in got}) >= count:
                all_in.set()
        return ConsumeStatus.CONSUME_SUCCESS

    consumer = PushConsumer(group, server.namesrv, consume_from_where=ConsumeFromWhere.FIRST_OFFSET)
    consumer.subscribe(topic)
    consumer.register_listener(listener)
    consumer.start()
    try:
        assert all_in.wait(timeout), f"ferrymq consumer got {len({m.msg_id for m in got})} of {count}"
    finally:
        consumer.shutdown()
    with lock:
        return list(got)
