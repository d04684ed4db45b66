"""The consume thread pool under a backlog: listener calls of a slow (not blocked) listener
run on several threads, as RocketMQ's consumeThreadMin threads would take them."""

from __future__ import annotations

import threading
import time
from typing import Any

from scenario_util import FAST_CONSUMER, FAST_PRODUCER

from ferrymq import (
    AdminClient,
    ClientStateError,
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


def test_a_non_blocking_listener_consumes_on_the_client_thread_and_acknowledges(
    standalone: Any,
) -> None:
    """register_listener(..., blocking=False): every call runs on the consumer's I/O thread
    (none on a consume thread) and what it consumed is acknowledged: the group's lag is 0."""
    admin = AdminClient(standalone.namesrv)
    admin.create_topic("inline", 2)
    total = 200
    with Producer("p-inline", standalone.namesrv, **FAST_PRODUCER) as producer:
        producer.send_batch([Message("inline", f"m{i}".encode()) for i in range(total)])
    seen: list[bytes] = []
    threads: set[str] = set()

    refused: list[ClientStateError] = []

    def listener(msgs: list[MessageExt], ctx: Any) -> ConsumeStatus:
        threads.add(threading.current_thread().name)
        if any(m.body == b"late" for m in msgs):
            # A blocking call of the client from the loop it would wait on (sent once start()
            # returned, so the client has its loop): refused, saying what to change, rather
            # than a deadlock.
            try:
                consumer.assignment()
            except ClientStateError as exc:
                refused.append(exc)
        seen.extend(m.body for m in msgs)
        return ConsumeStatus.CONSUME_SUCCESS

    consumer = PushConsumer("g-inline", standalone.namesrv,
                            consume_from_where=ConsumeFromWhere.FIRST_OFFSET, **FAST_CONSUMER)
    consumer.subscribe("inline")
    consumer.register_listener(listener, blocking=False)
    with consumer:
        with Producer("p-inline", standalone.namesrv, **FAST_PRODUCER) as producer:
            producer.send(Message("inline", b"late"))
        wait_until(lambda: len(seen) >= total + 1, what="the messages")
    assert sorted(seen) == sorted([*(f"m{i}".encode() for i in range(total)), b"late"])
    assert threads and not any(name.startswith("ferrymq-consume-") for name in threads), threads
    assert refused and "without blocking=False" in str(refused[0]), refused
    assert sum(p.lag for p in admin.consume_stats("g-inline", "inline")) == 0
    admin.close()
