"""The consume thread pool under a backlog: listener calls of a slow (not blocked) listener
run on several threads, as RocketMQ's consumeThreadMin threads would take them."""

from __future__ import annotations

import threading
import time
from typing import Any

from scenario_util import FAST_CONSUMER, FAST_PRODUCER

from ferrymq import (
    AdminClient,
    ConsumeFromWhere,
    ConsumeStatus,
    Message,
    MessageExt,
    Producer,
    PushConsumer,
)
from waits import wait_until


def test_a_backlog_for_a_slow_listener_spreads_over_the_consume_threads(standalone: Any) -> None:
    admin = AdminClient(standalone.namesrv)
    admin.create_topic("slow", 1)
    total = 300
    with Producer("p-slow", standalone.namesrv, **FAST_PRODUCER) as producer:
        for start in range(0, total, 30):
            producer.send_batch([Message("slow", f"m{i}".encode()) for i in range(start, start + 30)])
    lock = threading.Lock()
    active = [0]
    most = [0]
    done = [0]

    def listener(msgs: list[MessageExt], ctx: Any) -> ConsumeStatus:
        with lock:
            active[0] += 1
            most[0] = max(most[0], active[0])
        time.sleep(0.0003)  # the work: short, but never finished when the next one waits
        with lock:
            active[0] -= 1
            done[0] += len(msgs)
        return ConsumeStatus.CONSUME_SUCCESS

    consumer = PushConsumer(
        "g-slow",
        standalone.namesrv,
        consume_from_where=ConsumeFromWhere.FIRST_OFFSET,
        consume_threads=8,
        **FAST_CONSUMER,
    )
    consumer.subscribe("slow")
    consumer.register_listener(listener)
    with consumer:
        wait_until(lambda: done[0] >= total, what="the backlog")
    assert most[0] >= 2
    admin.close()
