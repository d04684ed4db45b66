from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

import pytest
import uvloop


def pytest_asyncio_loop_factories(config: pytest.Config, item: pytest.Item) -> Mapping[str, Any] | None:
    """Every transport test runs on both loops: the servers use uvloop, tools may not."""
    if "tests/remoting" not in str(item.path):
        return None
    return {"asyncio": asyncio.new_event_loop, "uvloop": uvloop.new_event_loop}
