"""Members joining, leaving and dying under load."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest
from scenario_util import FAST_CONSUMER, FAST_PRODUCER, Recorder

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
from waits import wait_until

# The tests here each use their own topics and groups: one server serves the module.
pytestmark = pytest.mark.shared_standalone

HERE = Path(__file__).parent


class Load(threading.Thread):
    """Sends `total` messages at a modest pace while the group changes around it."""

    def __init__(self, namesrv: str, topic: str, total: int, *, keys: int = 0) -> None:
        super().__init__(daemon=True)
        self.namesrv, self.topic, self.total, self.keys = namesrv, topic, total, keys
        self.sent = 0
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            with Producer("p-load", self.namesrv, **FAST_PRODUCER) as producer:
                for i in range(self.total):
                    if self.keys:
                        key = f"k{i % self.keys}"
                        producer.send_orderly(
                            Message(self.topic, f"{key}:{i // self.keys}".encode()), key
                        )
                    else:
                        producer.send(Message(self.topic, f"m{i}".encode()))
                    self.sent += 1
                    time.sleep(0.001)  # pacing of the load, not synchronisation
        except BaseException as exc:
            self.error = exc


def _churn(make: Any, rec: Recorder, total: int) -> None:
    """Three members: join at 1/6 and 2/6 of the load, the first two leave at 3/6 and 4/6."""
    members = [make("a").start()]
    wait_until(lambda: rec.count() >= total // 6, what="first sixth")
    members.append(make("b").start())
    wait_until(lambda: rec.count() >= 2 * total // 6, what="second sixth")
    members.append(make("c").start())
    wait_until(lambda: rec.count() >= 3 * total // 6, what="half")
    members.pop(0).shutdown()
    wait_until(lambda: rec.count() >= 4 * total // 6, what="two thirds")
    members.pop(0).shutdown()
    try:
        wait_until(
            lambda: len({m.body for m in rec.snapshot()}) >= total, timeout=60, what="every message"
        )
    finally:
        for m in members:
            m.shutdown()


def test_membership_churn_delivers_every_message_at_least_once(standalone: Any) -> None:
    admin = AdminClient(standalone.namesrv)
    admin.create_topic("churn", 8)
    total = 600
    rec = Recorder()

    def make(name: str) -> PushConsumer:
        c = PushConsumer(
            "g-churn",
            standalone.namesrv,
            consume_from_where=ConsumeFromWhere.FIRST_OFFSET,
            **FAST_CONSUMER,
        )
        c.subscribe("churn")
        c.register_listener(lambda msgs, ctx: rec.add(msgs) or ConsumeStatus.CONSUME_SUCCESS)
        return c

    load = Load(standalone.namesrv, "churn", total)
    load.start()
    _churn(make, rec, total)
    load.join(30)
    assert load.error is None and load.sent == total
    assert {m.body for m in rec.snapshot()} == {f"m{i}".encode() for i in range(total)}
    admin.close()


def test_orderly_churn_never_has_one_queue_on_two_members(standalone: Any) -> None:
    admin = AdminClient(standalone.namesrv)
    admin.create_topic("ochurn", 8)
    total, keys = 640, 16
    rec = Recorder()
    lock = threading.Lock()
    active: dict[int, str] = {}
    violations: list[str] = []
    per_key: dict[str, list[int]] = defaultdict(list)

    def make(name: str) -> PushConsumer:
        def listener(msgs: list[MessageExt], ctx: Any) -> ConsumeOrderlyStatus:
            q = ctx.message_queue.queue_id
            with lock:
                holder = active.get(q)
                if holder is not None and holder != name:
                    violations.append(f"queue {q}: {name} while {holder}")
                active[q] = name
                for m in msgs:
                    key, seq = m.body.decode().split(":")
                    per_key[key].append(int(seq))
            time.sleep(0.001)
            rec.add(msgs)
            with lock:
                active.pop(q, None)
            return ConsumeOrderlyStatus.SUCCESS

        c = PushConsumer(
            "g-ochurn",
            standalone.namesrv,
            consume_from_where=ConsumeFromWhere.FIRST_OFFSET,
            **FAST_CONSUMER,
        )
        c.subscribe("ochurn")
        c.register_listener(listener, orderly=True)
        return c

    load = Load(standalone.namesrv, "ochurn", total, keys=keys)
    load.start()
    _churn(make, rec, total)
    load.join(30)
    assert load.error is None
    assert violations == []
    for key, seqs in per_key.items():
        high = -1
        for s in seqs:  # a re-delivery may go back, but never skip ahead
            assert s <= high + 1, f"{key}: {s} after {high}"
            high = max(high, s)
        assert high == total // keys - 1
    admin.close()


def test_killed_consumer_loses_nothing_and_redelivers_only_uncommitted_messages(
    standalone: Any,
) -> None:
    admin = AdminClient(standalone.namesrv)
    admin.create_topic("crash", 2)
    total = 200
    with Producer("p", standalone.namesrv, **FAST_PRODUCER) as producer:
        for i in range(total):
            producer.send(Message("crash", f"m{i}".encode()))
    queues = admin.message_queues("crash")
    body_at = {
        (m.queue_id, m.queue_offset): m.body
        for mq in queues
        for m in admin.pull(mq, 0, 1000).messages
    }
    assert len(body_at) == total
    stuck = body_at[(0, 20)].decode()
    child = subprocess.Popen(
        [
            sys.executable,
            str(HERE / "crash_consumer.py"),
            standalone.namesrv,
            "crash",
            "g-crash",
            stuck,
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert child.stdout is not None
    first: set[tuple[int, int]] = set()
    saw_stuck = False
    try:
        for line in child.stdout:
            parts = line.split()
            if parts[0] == "STUCK":
                saw_stuck = True
            elif parts[0] != "READY":
                first.add((int(parts[0]), int(parts[1])))
            if saw_stuck and len(first) >= 100:
                break
    finally:
        child.kill()  # SIGKILL: no shutdown, nothing persisted from here on
        child.wait()
    assert saw_stuck
    committed = {mq.queue_id: max(admin.query_consumer_offset("g-crash", mq), 0) for mq in queues}
    assert committed[0] <= 20  # the stuck message holds queue 0's offset

    rec = Recorder()
    survivor = PushConsumer(
        "g-crash",
        standalone.namesrv,
        consume_from_where=ConsumeFromWhere.FIRST_OFFSET,
        **FAST_CONSUMER,
    )
    survivor.subscribe("crash")
    survivor.register_listener(lambda msgs, ctx: rec.add(msgs) or ConsumeStatus.CONSUME_SUCCESS)
    with survivor:
        wait_until(
            lambda: first | {(m.queue_id, m.queue_offset) for m in rec.snapshot()} >= set(body_at),
            what="every message after the crash",
        )
    second = {(m.queue_id, m.queue_offset) for m in rec.snapshot()}
    assert first | second == set(body_at)  # nothing lost
    redelivered = first & second
    assert all(off >= committed[q] for q, off in redelivered)  # only the uncommitted window
    assert all(off >= committed[q] for q, off in second)
    admin.close()
