"""Keeping the cyclic garbage collector's full passes short.

A full collection scans every tracked object the process holds, and it holds the interpreter
lock while it does: a started broker (tens of thousands of objects from its modules, tables
and recovered queues) stalled every request in flight for 35-55 ms each time one ran, and a
client process for 10-30 ms. What a process builds to start lives as long as the process;
moved to the permanent generation (`gc.freeze`), it is no longer rescanned, and a full pass
costs what was allocated since (docs/hot-path.md, "Latency").

The servers call `freeze_startup_heap` once they are ready, then `use_server_thresholds`. A
library must not freeze behind its host's back (a frozen object that later becomes cyclic
garbage is never reclaimed), so applications that want the same call it themselves, once their
clients are started."""

from __future__ import annotations

import gc


def freeze_startup_heap() -> int:
    """Collect what is garbage now, then exempt everything still alive from later
    collections. Returns how many objects were frozen."""
    gc.collect()
    gc.freeze()
    return gc.get_freeze_count()


# A server allocates a few tracked objects per message (a batch put of 512 makes about 1,500),
# so with the interpreter's default first threshold (700) it ran a young collection every
# couple of hundred messages, each scanning what the requests in flight hold. Most of that is
# freed by reference counting within the request: a larger threshold lets it go first.
SERVER_THRESHOLDS = (50_000, 20, 20)


def use_server_thresholds() -> None:
    """The collector's thresholds for a server process (SERVER_THRESHOLDS); as with the
    freeze, a library does not change them behind its host's back."""
    gc.set_threshold(*SERVER_THRESHOLDS)
