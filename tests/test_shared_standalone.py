"""The `standalone` fixture in a module marked shared_standalone: its tests get the module's one
server, and a test also marked own_standalone gets one of its own."""

from __future__ import annotations

import pytest

from conftest import Standalone

pytestmark = pytest.mark.shared_standalone

_seen: list[Standalone] = []


@pytest.mark.parametrize("run", [1, 2])
def test_the_tests_of_a_module_share_its_server(standalone: Standalone, run: int) -> None:
    _seen.append(standalone)
    assert all(s is _seen[0] for s in _seen)
    assert standalone.namesrv and standalone.broker


@pytest.mark.own_standalone
def test_a_test_marked_own_standalone_gets_a_server_of_its_own(standalone: Standalone) -> None:
    assert all(s is not standalone and s.namesrv != standalone.namesrv for s in _seen)
    assert standalone.namesrv and standalone.broker
