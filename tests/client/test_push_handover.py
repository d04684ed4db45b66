"""Queues moving between members: what the old owner still had buffered or in its listener
must not be consumed twice beyond what was truly in flight."""

from __future__ import annotations

import threading
import time
from collections import Counter
from typing import Any

from scenario_util import FAST_CONSUMER, FAST_PRODUCER, wait_for

from ferrymq import (
    AdminClient,
    ConsumeFromWhere,
    ConsumeOrderlyStatus,
    ConsumeStatus,
    Message,
    MessageExt,
    Producer,
    PushConsumer,
)


class Seen:
    """(queue, offset) of every message any member's listener finished."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.counts: Counter[tuple[int, int]] = Counter()

    def add(self, msgs: list[MessageExt]) -> None:
        with self.lock:
            for m in msgs:
                self.counts[(m.queue_id, m.queue_offset)] += 1

    def distinct(self) -> int:
        with self.lock:
            return len(self.counts)

    def total(self) -> int:
        with self.lock:
            return sum(self.counts.values())

    def duplicates(self) -> int:
        with self.lock:
            return sum(n - 1 for n in self.counts.values())


def _produce(namesrv: str, topic: str, n: int) -> None:
    with Producer("p-handover", namesrv, **FAST_PRODUCER) as producer:
        for start in range(0, n, 32):
            producer.send_batch([Message(topic, f"m{i}".encode()) for i in range(start, start + 32)])


def test_a_member_joining_costs_no_more_duplicates_than_were_in_the_listener(
    standalone: Any,
) -> None:
    admin = AdminClient(standalone.namesrv)
    admin.create_topic("handover", 4)
    total = 3200
    _produce(standalone.namesrv, "handover", total)
    seen = Seen()
    threads = 2

    def listener(msgs: list[MessageExt], ctx: Any) -> ConsumeStatus:
        time.sleep(0.001)  # the work; the first member's buffers fill meanwhile
        seen.add(msgs)
        return ConsumeStatus.CONSUME_SUCCESS

    def member() -> PushConsumer:
        c = PushConsumer(
            "g-handover",
            standalone.namesrv,
            consume_from_where=ConsumeFromWhere.FIRST_OFFSET,
            consume_threads=threads,
            **FAST_CONSUMER,
        )
        c.subscribe("handover")
        c.register_listener(listener)
        return c

    with member():
        # Every queue is pulled up to its buffer before the second member comes.
        wait_for(lambda: seen.total() >= 200, what="the first member to be consuming")
        with member() as second:
            wait_for(lambda: len(second.assignment()) >= 2, what="the second member's queues")
            moved = len(second.assignment())
            wait_for(lambda: seen.distinct() >= total, timeout=60, what="every message")
    # The new owner starts from what the old owner released (broker/handover.py): everything
    # the old owner finished, committed or acknowledged in ranges, is skipped. Only a listener
    # call still running on a queue when it was given up is consumed again: at most one per
    # listener thread for each queue moved (batches of 1). Measured: 0 to 4; before the
    # hand-over waited for the release, 41 to 100 (what the old owner had finished but not yet
    # committed when the new owner read the offset).
    assert seen.duplicates() <= threads * moved, (seen.duplicates(), moved)
    admin.close()


def test_orderly_handover_while_the_old_owner_is_busy_consumes_nothing_twice(
    standalone: Any,
) -> None:
    admin = AdminClient(standalone.namesrv)
    admin.create_topic("ohandover", 2)
    total = 400
    with Producer("p-ohandover", standalone.namesrv, **FAST_PRODUCER) as producer:
        for i in range(total):
            producer.send_orderly(Message("ohandover", f"k{i % 2}:{i}".encode()), f"k{i % 2}")
    seen = Seen()
    hold = threading.Event()
    release = threading.Event()
    blocked: set[int] = set()
    lock = threading.Lock()

    def listener(msgs: list[MessageExt], ctx: Any) -> ConsumeOrderlyStatus:
        if hold.is_set():
            with lock:
                blocked.add(ctx.message_queue.queue_id)
            release.wait(30)  # busy on this batch while the queue is handed over
        time.sleep(0.002)  # the work
        seen.add(msgs)
        return ConsumeOrderlyStatus.SUCCESS

    def member() -> PushConsumer:
        c = PushConsumer(
            "g-ohandover",
            standalone.namesrv,
            consume_from_where=ConsumeFromWhere.FIRST_OFFSET,
            consume_message_batch_max_size=1,
            **FAST_CONSUMER,
        )
        c.subscribe("ohandover")
        c.register_listener(listener, orderly=True)
        return c

    with member() as first:
        wait_for(lambda: seen.total() >= 10, what="the first member to be consuming")
        hold.set()
        wait_for(lambda: len(blocked) == 2, what="both queues busy in the listener")
        with member() as second:
            # The first member gave one queue up but keeps its lock until the batch ends.
            wait_for(
                lambda: len([q for q in first.assignment() if q.topic == "ohandover"]) == 1,
                what="one queue handed over",
            )
            assert not [q for q in second.assignment() if q.topic == "ohandover"]
            release.set()
            wait_for(lambda: seen.distinct() >= total, timeout=60, what="every message")
            wait_for(
                lambda: len([q for q in second.assignment() if q.topic == "ohandover"]) == 1,
                what="the second member to own its queue",
            )
    assert seen.duplicates() == 0
    admin.close()
