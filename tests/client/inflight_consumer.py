"""A push consumer in its own process for the kill -9 duplicates test: 20 consume threads, a
listener taking WORK_MS per message, printing `IN queue offset` when a message enters the
listener and `OUT queue offset` just before the listener returns with its success. A line is
one write to the pipe, so what was printed before a SIGKILL is all there for the parent."""

from __future__ import annotations

import os
import sys
import threading
import time
from typing import Any

from ferrymq import ConsumeFromWhere, ConsumeStatus, MessageExt, PushConsumer

namesrv, topic, group, work_ms = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])
THREADS = 20


def say(line: str) -> None:
    os.write(1, line.encode() + b"\n")  # one write: never torn, never left in a buffer


def listener(msgs: list[MessageExt], ctx: Any) -> ConsumeStatus:
    for m in msgs:
        say(f"IN {m.queue_id} {m.queue_offset}")
    time.sleep(work_ms / 1000 * len(msgs))
    for m in msgs:
        say(f"OUT {m.queue_id} {m.queue_offset}")
    return ConsumeStatus.CONSUME_SUCCESS


consumer = PushConsumer(
    group,
    namesrv,
    consume_from_where=ConsumeFromWhere.FIRST_OFFSET,
    consume_threads=THREADS,
    rebalance_interval=0.3,
    route_refresh_interval=0.3,
    pull_suspend_timeout=1.0,
)
consumer.subscribe(topic)
consumer.register_listener(listener)
consumer.start()
say("READY")
threading.Event().wait()
