"""A push consumer in its own process, for the kill -9 scenario: prints `queue offset` for
every message it finished, and blocks forever on the message whose body is STUCK_BODY."""

from __future__ import annotations

import sys
import threading
import time
from typing import Any

from ferrymq import ConsumeFromWhere, ConsumeStatus, MessageExt, PushConsumer

namesrv, topic, group, stuck_body = sys.argv[1:5]
out_lock = threading.Lock()


def listener(msgs: list[MessageExt], ctx: Any) -> ConsumeStatus:
    for m in msgs:
        if m.body.decode() == stuck_body:
            with out_lock:
                print("STUCK", m.queue_id, m.queue_offset, flush=True)
            threading.Event().wait()  # a batch that never finishes
        time.sleep(0.003)  # work
        with out_lock:
            print(m.queue_id, m.queue_offset, flush=True)
    return ConsumeStatus.CONSUME_SUCCESS


consumer = PushConsumer(
    group,
    namesrv,
    consume_from_where=ConsumeFromWhere.FIRST_OFFSET,
    consume_threads=4,
    pull_batch_size=8,
    persist_interval=0.2,
    rebalance_interval=0.3,
    route_refresh_interval=0.3,
    pull_suspend_timeout=1.0,
)
consumer.subscribe(topic)
consumer.register_listener(listener)
consumer.start()
with out_lock:
    print("READY", flush=True)
threading.Event().wait()
