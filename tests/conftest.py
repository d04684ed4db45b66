"""Shared fixtures: a real `ferrymq standalone` process on loopback ports picked by the OS."""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, settings

from ferrymq.embedded import StandaloneProcess
from ferrymq.embedded import start_standalone as _start
from waits import wait_until as wait_until  # tests/store imports it from here

# Hypothesis's timing checks (an example's deadline, slow input generation) fail a property
# test when the machine stalls it, not when the property is false: timings are never part of
# pass/fail here. Every other health check stays.
settings.register_profile(
    "ferrymq", deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.load_profile("ferrymq")

# Short delay levels so retry paths run in tests within seconds; the order of levels is kept.
TEST_DELAY_LEVELS = "100ms 200ms 300ms 400ms 500ms 600ms 700ms 800ms 900ms 1s 1s 1s 1s 1s 1s 1s 1s 1s"


Standalone = StandaloneProcess


@contextlib.contextmanager
def small_tmpfs(path: Path, size: str) -> Iterator[Path]:
    """A real file system of `size` at `path`, for full-disk tests (ENOSPC from the kernel)."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root; the injected-error tests cover ENOSPC")
    path.mkdir(parents=True)
    proc = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)],
                          capture_output=True, text=True)
    if proc.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {proc.stderr.strip()}")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)


def start_standalone(store_dir: Path, *extra: str, namesrv_port: int = 0, broker_port: int = 0,
                     timeout: float = 30.0) -> Standalone:
    """A server with the short test delay levels; its log is kept in `log_lines`."""
    return _start(store_dir, "--message-delay-level", TEST_DELAY_LEVELS, *extra,
                  namesrv_port=namesrv_port, broker_port=broker_port, log=None, timeout=timeout)


@pytest.fixture
def standalone(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Standalone]:
    """A server of the test's own; for a test marked `shared_standalone` (and not
    `own_standalone`), its module's one server."""
    marks = {m.name for m in request.node.iter_markers()}
    if "shared_standalone" in marks and "own_standalone" not in marks:
        yield request.getfixturevalue("_module_standalone")
        return
    server = start_standalone(tmp_path / "store")
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def _module_standalone(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Standalone]:
    server = start_standalone(tmp_path_factory.mktemp("shared") / "store")
    try:
        yield server
    finally:
        server.stop()


_REPORT = pytest.StashKey[list[str]]()


@pytest.fixture
def run_report(request: pytest.FixtureRequest) -> list[str]:
    """Lines a test wants read whether it passes or not (the chaos runs' checker results),
    printed at the end of the run."""
    return request.config.stash.setdefault(_REPORT, [])


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter, exitstatus: int,
                            config: pytest.Config) -> None:
    lines = config.stash.get(_REPORT, [])
    if lines:
        terminalreporter.section("reported by the tests")
        for line in lines:
            terminalreporter.write_line(line)


def pytest_asyncio_loop_factories(config: pytest.Config, item: pytest.Item) -> Mapping[str, Any] | None:
    """Transport tests (remoting, and the replication stream's test_ha_* files) run on both
    loops (the servers use uvloop, tools may not); the rest on the default loop."""
    if "remoting" not in item.path.parts and not item.path.name.startswith("test_ha_"):
        return {"asyncio": asyncio.new_event_loop}
    import uvloop

    return {"asyncio": asyncio.new_event_loop, "uvloop": uvloop.new_event_loop}


# Whole directories whose files each run for minutes (real Spark drivers, fault rounds, third-
# party clients). Collected first, so that `make test`'s two workers (one file at a time each)
# start them early and fill the rest of the run with the short files, instead of ending on one.
_LONG_FIRST = ("spark", "chaos", "compat")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    def rank(item: pytest.Item) -> int:
        parts = Path(str(item.path)).relative_to(Path(__file__).parent).parts
        return _LONG_FIRST.index(parts[0]) if parts and parts[0] in _LONG_FIRST else len(_LONG_FIRST)

    items.sort(key=rank)  # stable: each file's own order is kept
