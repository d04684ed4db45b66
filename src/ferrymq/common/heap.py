"""Keeping the cyclic garbage collector's full passes short.

A full collection scans every tracked object the process holds, and it holds the interpreter
lock while it does: a started broker (tens of thousands of objects from its modules, tables
and recovered queues) stalled every request in flight for 35-55 ms each time one ran, and a
client process for 10-30 ms. What a process builds to start lives as long as the process;
moved to the permanent generation (`gc.freeze`), it is no longer rescanned, and a full pass
costs what was allocated since (docs/hot-path.md, "Latency").

The servers call `freeze_startup_heap` once they are ready. A library must not do it behind
its host's back (a frozen object that later becomes cyclic garbage is never reclaimed), so
applications that want the same call it themselves, once their clients are started."""

from __future__ import annotations

import gc


def freeze_startup_heap() -> int:
    """Collect what is garbage now, then exempt everything still alive from later
    collections. Returns how many objects were frozen."""
    gc.collect()
    gc.freeze()
    return gc.get_freeze_count()
