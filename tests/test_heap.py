"""freeze_startup_heap: what is alive is exempt from later collections, garbage is not kept."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator

import pytest

import ferrymq
from ferrymq.common.heap import freeze_startup_heap


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
