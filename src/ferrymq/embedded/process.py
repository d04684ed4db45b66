"""One server child process (`ferrymq namesrv` or `ferrymq broker`) that can be started,
awaited until its ready line, and then crashed, stopped, frozen and brought back: the moves a
fault-injection test makes. Its stderr goes to a log file kept across restarts."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from ..common.errors import FerryMQError


class ServerNotReadyError(FerryMQError, RuntimeError):
    """The process exited, or printed no ready line within the deadline."""

    def __init__(self, name: str, returncode: int | None, log_tail: str) -> None:
        state = "hung" if returncode is None else f"exited {returncode}"
        super().__init__(f"{name} did not become ready ({state}); log tail:\n{log_tail}")
        self.name = name
        self.returncode = returncode
        self.log_tail = log_tail


def parse_ready_line(line: str) -> dict[str, str]:
    """`namesrv=H:P` or `broker=H:P ha=H:P` -> {"namesrv": "H:P"} ..."""
    return dict(part.split("=", 1) for part in line.split() if "=" in part)


class ServerProcess:
    """A `ferrymq` server command. `argv` is called at every (re)start, so a restart can pass
    the ports the first run was given by the OS."""

    def __init__(self, name: str, argv: Callable[[], Sequence[str]], log_path: Path, ready_key: str,
                 *, timeout: float = 30.0) -> None:
        self.name = name
        self.log_path = log_path
        self.ready: dict[str, str] = {}
        self.starts = 0
        self._argv = argv
        self._ready_key = ready_key
        self._timeout = timeout
        self._proc: subprocess.Popen[str] | None = None
        self._paused = False

    # --- life -------------------------------------------------------------------------------
    def start(self) -> dict[str, str]:
        """Start the process and wait for its ready line; returns the line's fields."""
        if self.running:
            raise RuntimeError(f"{self.name} is already running (pid {self.pid})")
        argv = [sys.executable, "-m", "ferrymq", *self._argv()]
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "a", encoding="utf-8") as log:
            log.write(f"--- {time.strftime('%H:%M:%S')} start #{self.starts + 1}: {' '.join(argv[2:])}\n")
            log.flush()
            env = dict(os.environ, PYTHONUNBUFFERED="1")
            proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=log, text=True, env=env)
        self._proc = proc
        self._paused = False
        self.starts += 1
        found: list[dict[str, str]] = []
        seen = threading.Event()

        def read_stdout() -> None:
            # Keeps draining after the ready line, so a chatty server never blocks on stdout.
            assert proc.stdout is not None
            for line in proc.stdout:
                if not found and line.startswith(self._ready_key + "="):
                    found.append(parse_ready_line(line))
                    seen.set()
            seen.set()

        threading.Thread(target=read_stdout, name=f"{self.name}-stdout", daemon=True).start()
        seen.wait(self._timeout)
        if not found:
            self._reap(kill=True)
            raise ServerNotReadyError(self.name, proc.returncode, self.log_tail())
        self.ready = found[0]
        return self.ready

    def kill(self) -> None:
        """SIGKILL: a crash, nothing flushed or unregistered."""
        self._reap(kill=True)

    def stop(self, timeout: float = 30.0) -> int | None:
        """SIGTERM and wait; a process still there at the deadline is killed and
        TimeoutExpired raised."""
        proc = self._proc
        if proc is None or proc.poll() is not None:
            return None if proc is None else proc.returncode
        proc.send_signal(signal.SIGTERM)
        if self._paused:
            # A stopped process keeps SIGTERM pending until it runs again.
            proc.send_signal(signal.SIGCONT)
            self._paused = False
        try:
            return proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self._reap(kill=True)
            raise

    def pause(self) -> None:
        """SIGSTOP: the process holds its sockets but answers nothing, like a long GC pause."""
        proc = self._require_running("pause")
        proc.send_signal(signal.SIGSTOP)
        self._paused = True

    def resume(self) -> None:
        proc = self._require_running("resume")
        proc.send_signal(signal.SIGCONT)
        self._paused = False

    def restart(self, *, crash: bool = False) -> dict[str, str]:
        """Stop (SIGTERM, or SIGKILL with crash=True) if running, then start again."""
        if crash:
            self.kill()
        else:
            self.stop()
        return self.start()

    # --- state ------------------------------------------------------------------------------
    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    @property
    def paused(self) -> bool:
        return self._paused and self.running

    @property
    def pid(self) -> int | None:
        return None if self._proc is None else self._proc.pid

    @property
    def returncode(self) -> int | None:
        return None if self._proc is None else self._proc.poll()

    def log_tail(self, lines: int = 40) -> str:
        try:
            text = self.log_path.read_text(encoding="utf-8", errors="replace")
        except FileNotFoundError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def _require_running(self, action: str) -> subprocess.Popen[str]:
        if self._proc is None or self._proc.poll() is not None:
            raise RuntimeError(f"cannot {action} {self.name}: not running")
        return self._proc

    def _reap(self, *, kill: bool) -> None:
        proc = self._proc
        if proc is None:
            return
        if proc.poll() is None and kill:
            proc.kill()  # SIGKILL works on a stopped process too
        proc.wait()
        self._paused = False

    def __repr__(self) -> str:
        state = "paused" if self.paused else "running" if self.running else "down"
        return f"ServerProcess({self.name!r}, {state}, {self.ready})"
