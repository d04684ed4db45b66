"""How soon and how precisely a push consumer's progress reaches the broker: committed
promptly after a batch (not on the persist interval), with the ranges acknowledged above a
blocked message, and those ranges honoured when the group's next member takes over."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from scenario_util import FAST_CONSUMER, FAST_PRODUCER, Recorder

from conftest import start_standalone
from ferrymq import (
    AdminClient,
    ConsumeFromWhere,
    ConsumeStatus,
    Message,
    Producer,
    PushConsumer,
)
from waits import wait_until

# The tests here each use their own topics and groups: one server serves the module.
pytestmark = pytest.mark.shared_standalone

HERE = Path(__file__).parent


def test_group_progress_reads_true_soon_after_everything_was_consumed(standalone: Any) -> None:
    admin = AdminClient(standalone.namesrv)
    admin.create_topic("lag", 4)
    with Producer("p-lag", standalone.namesrv, **FAST_PRODUCER) as producer:
        for i in range(40):
            producer.send(Message("lag", f"m{i}".encode()))
    rec = Recorder()
    options = dict(FAST_CONSUMER, persist_interval=600.0, pull_suspend_timeout=15.0)
    consumer = PushConsumer(
        "g-lag", standalone.namesrv, consume_from_where=ConsumeFromWhere.FIRST_OFFSET, **options
    )
    consumer.subscribe("lag")
    consumer.register_listener(lambda msgs, ctx: rec.add(msgs) or ConsumeStatus.CONSUME_SUCCESS)
    with consumer:
        wait_until(lambda: rec.count() >= 40, what="every message")
        # Neither the persist interval nor the next held pull's piggy-back comes within this.
        wait_until(
            lambda: all(p.lag == 0 for p in admin.group_progress("g-lag") if p.topic == "lag"),
            timeout=5.0,
            what="lag 0 on every queue while the consumer runs",
        )
    admin.close()


def test_a_killed_consumer_redelivers_only_what_was_in_flight(standalone: Any) -> None:
    """Seed 002: 20 stuck on queue 0, everything else consumed; then kill -9. The broker has
    the ranges above 20, so the next member consumes 20 again and nothing else."""
    admin = AdminClient(standalone.namesrv)
    admin.create_topic("crash2", 2)
    total = 200
    with Producer("p", standalone.namesrv, **FAST_PRODUCER) as producer:
        for i in range(total):
            producer.send(Message("crash2", f"m{i}".encode()))
    queues = admin.message_queues("crash2")
    body_at = {
        (m.queue_id, m.queue_offset): m.body for mq in queues for m in admin.pull(mq, 0, 1000).messages
    }
    stuck = (0, 20)
    child = subprocess.Popen(
        [sys.executable, str(HERE / "crash_consumer.py"), standalone.namesrv, "crash2",
         "g-crash2", body_at[stuck].decode()],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert child.stdout is not None
    first: set[tuple[int, int]] = set()
    try:
        for line in child.stdout:
            parts = line.split()
            if parts[0] not in ("READY", "STUCK"):
                first.add((int(parts[0]), int(parts[1])))
            if len(first) == total - 1:
                break
        assert first == set(body_at) - {stuck}

        def broker_has_everything_but_the_stuck_one() -> bool:
            for mq in queues:
                offset, ranges = admin.acknowledged("g-crash2", mq)
                acked = {o for a, b in ranges for o in range(a, b)} | set(range(offset))
                held = {o for q, o in body_at if q == mq.queue_id} - acked
                if held != ({stuck[1]} if mq.queue_id == stuck[0] else set()):
                    return False
            return True

        wait_until(broker_has_everything_but_the_stuck_one, what="the progress on the broker")
    finally:
        child.kill()  # SIGKILL: no shutdown
        child.wait()

    rec = Recorder()
    survivor = PushConsumer(
        "g-crash2", standalone.namesrv, consume_from_where=ConsumeFromWhere.FIRST_OFFSET,
        **FAST_CONSUMER,
    )
    survivor.subscribe("crash2")
    survivor.register_listener(lambda msgs, ctx: rec.add(msgs) or ConsumeStatus.CONSUME_SUCCESS)
    with survivor:
        wait_until(lambda: rec.count() >= 1, what="the in-flight message again")
        # Give the survivor the time it needs to pull every queue once past the stuck one.
        wait_until(
            lambda: all(p.lag == 0 for p in admin.group_progress("g-crash2") if p.topic == "crash2"),
            what="the survivor's progress",
        )
    again = [(m.queue_id, m.queue_offset) for m in rec.snapshot()]
    assert again == [stuck]
    admin.close()


def test_a_last_offset_group_misses_nothing_after_a_broker_kill(tmp_path: Path) -> None:
    """Issue: offsets not yet flushed were lost with the broker, and the group, new again,
    started past a message sent meanwhile."""
    store = tmp_path / "store"
    server = start_standalone(store)
    ports = dict(
        namesrv_port=int(server.namesrv.rsplit(":", 1)[1]),
        broker_port=int(server.broker.rsplit(":", 1)[1]),
    )
    try:
        admin = AdminClient(server.namesrv)
        # An old queue: on a young one the group would start at "before", not past it.
        admin.update_broker_config({"accessMessageInMemoryMaxRatio": "0"})
        admin.create_topic("lastoff", 1)
        with Producer("p-lastoff", server.namesrv, **FAST_PRODUCER) as producer:
            producer.send(Message("lastoff", b"before"))
        rec = Recorder()
        consumer = PushConsumer("g-lastoff", server.namesrv, **FAST_CONSUMER)
        consumer.subscribe("lastoff")
        consumer.register_listener(lambda msgs, ctx: rec.add(msgs) or ConsumeStatus.CONSUME_SUCCESS)
        with consumer:
            mq = admin.message_queues("lastoff")[0]
            wait_until(lambda: admin.query_consumer_offset("g-lastoff", mq) == 1, what="the start")
        admin.close()
    finally:
        server.kill()  # SIGKILL: the broker writes no snapshot
    server = start_standalone(store, **ports)
    try:
        with Producer("p-lastoff", server.namesrv, **FAST_PRODUCER) as producer:
            producer.send(Message("lastoff", b"while the consumer was away"))
        consumer = PushConsumer("g-lastoff", server.namesrv, **FAST_CONSUMER)
        consumer.subscribe("lastoff")
        consumer.register_listener(lambda msgs, ctx: rec.add(msgs) or ConsumeStatus.CONSUME_SUCCESS)
        with consumer:
            wait_until(lambda: rec.count() >= 1, what="the message sent while it was away")
        assert rec.bodies() == [b"while the consumer was away"]
    finally:
        server.stop()
