"""freeze_startup_heap: what is alive is exempt from later collections, garbage is not kept."""

from __future__ import annotations

import gc
import subprocess
import sys
import weakref
from collections.abc import Iterator
from pathlib import Path

import pytest

import ferrymq
from ferrymq.common.heap import SERVER_THRESHOLDS, freeze_startup_heap


class Node:
    def __init__(self) -> None:
        self.me = self  # a cycle: only the collector reclaims it


@pytest.fixture
def unfrozen() -> Iterator[None]:
    gc.unfreeze()
    yield
    gc.unfreeze()


def test_live_objects_leave_the_generations_and_garbage_is_collected_first(unfrozen: None) -> None:
    kept = Node()
    dropped = Node()
    gone = weakref.ref(dropped)
    del dropped
    frozen = freeze_startup_heap()
    assert gone() is None  # collected before the freeze, not made permanent
    # Not equal to a later gc.get_freeze_count(): frozen objects that die (other threads of
    # the test process run on) leave the count.
    assert frozen > 0 and gc.get_freeze_count() > 0
    assert not any(o is kept for g in range(3) for o in gc.get_objects(generation=g))
    gc.unfreeze()
    assert any(o is kept for o in gc.get_objects())


def test_exported_from_the_package() -> None:
    assert ferrymq.freeze_startup_heap is freeze_startup_heap


def test_a_server_process_runs_the_collector_with_the_server_thresholds(tmp_path: Path) -> None:
    """A started server (the name server, in a process of its own) has set them; the test
    process keeps the interpreter's defaults."""
    assert gc.get_threshold() != SERVER_THRESHOLDS
    script = tmp_path / "probe.py"
    script.write_text(
        "import asyncio, gc, sys\n"
        "from ferrymq import server_main\n"
        "async def start():\n"
        "    return 'ready'\n"
        "async def stop():\n"
        "    pass\n"
        "async def main():\n"
        "    task = asyncio.create_task(server_main._serve_until_signal(start, stop))\n"
        "    while gc.get_freeze_count() == 0:\n"
        "        await asyncio.sleep(0.01)\n"
        "    print(tuple(gc.get_threshold()), flush=True)\n"
        "    task.cancel()\n"
        "asyncio.run(main())\n")
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.splitlines()[-1] == str(SERVER_THRESHOLDS), out.stdout
