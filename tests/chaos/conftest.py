"""Chaos runs report what the checker found for every schedule, passed or not, at the end of
the pytest run (the oracle decides pass/fail; the numbers are worth reading either way)."""

from __future__ import annotations

import pytest

REPORT = pytest.StashKey[list[str]]()


def pytest_configure(config: pytest.Config) -> None:
    config.stash[REPORT] = []


@pytest.fixture
def chaos_report(request: pytest.FixtureRequest) -> list[str]:
    return request.config.stash[REPORT]


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter, exitstatus: int,
                            config: pytest.Config) -> None:
    lines = config.stash.get(REPORT, [])
    if lines:
        terminalreporter.section("chaos: what the checker found")
        for line in lines:
            terminalreporter.write_line(line)
