"""A push consumer SIGKILLed mid-stream: the next member of its group consumes again what was
inside the listener at the kill, and little else (issue 28: 138-238 consumed again against at
most 20 inside the listener, because a finished message reached the broker only with the
next awaited commit round, 20 ms plus a round trip and an fsync after it finished)."""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
from pathlib import Path
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

HERE = Path(__file__).parent
Key = tuple[int, int]  # queue id, queue offset

TOPIC = "kill-inflight"
MESSAGES = 800
THREADS = 20  # inflight_consumer.py's consume threads
WORK_MS = 3  # per message, in the child's listener
KILLS = 5
# A finished message is acknowledged on the broker once the consumer's event loop has taken
# it back from its thread and sent the next round (commit_delay, 1 ms, after the previous
# one). The allowance is two listener calls' worth per thread and kill (6 ms of messages), over
# the kills together. Measured here: 1-2 ms of them on a quiet machine, about 3.5 ms with the
# suite on two workers beside the servers on 2 cores (the loop waits for the interpreter lock
# behind the consume threads); rounds that leave 20 ms after a completion, as the awaited
# rounds of issue 28 did, about 10 ms, above it whatever the load.
ALLOWANCE = 2 * THREADS


def _kill_mid_stream(namesrv: str, group: str) -> tuple[set[Key], set[Key]]:
    """Run the child until half the messages finished its listener, SIGKILL it, and return
    (entered, finished): every message that entered the listener, and those that left it."""
    child = subprocess.Popen(
        [sys.executable, str(HERE / "inflight_consumer.py"), namesrv, TOPIC, group, str(WORK_MS)],
        stdout=subprocess.PIPE,
    )
    assert child.stdout is not None
    entered: set[Key] = set()
    finished: set[Key] = set()

    def note(line: bytes) -> None:
        kind, *rest = line.split()
        if kind in (b"IN", b"OUT"):
            (entered if kind == b"IN" else finished).add((int(rest[0]), int(rest[1])))

    try:
        for line in child.stdout:
            note(line)
            if len(finished) >= MESSAGES // 2:
                break
    finally:
        child.send_signal(signal.SIGKILL)
    # What it wrote before it died is all in the pipe.
    for line in child.stdout:
        note(line)
    child.wait()
    return entered, finished


def _drain(namesrv: str, admin: AdminClient, group: str, needed: set[Key]) -> list[Key]:
    """A new member of the group consumes until `needed` came and the group's progress is at
    the end of every queue; returns what it consumed, repeats included."""
    got: list[Key] = []
    lock = threading.Lock()

    def listener(msgs: list[MessageExt], ctx: Any) -> ConsumeStatus:
        with lock:
            got.extend((m.queue_id, m.queue_offset) for m in msgs)
        return ConsumeStatus.CONSUME_SUCCESS

    def done() -> bool:
        with lock:
            if not needed <= set(got):
                return False
        return all(p.lag == 0 for p in admin.group_progress(group) if p.topic == TOPIC)

    consumer = PushConsumer(group, namesrv, consume_from_where=ConsumeFromWhere.FIRST_OFFSET,
                            **FAST_CONSUMER)
    consumer.subscribe(TOPIC)
    consumer.register_listener(listener)
    with consumer:
        wait_until(done, timeout=60.0, what="the rest of the stream")
    with lock:
        return list(got)


def test_a_consumer_killed_mid_stream_redelivers_what_was_inside_its_listener(standalone: Any) -> None:
    admin = AdminClient(standalone.namesrv)
    admin.create_topic(TOPIC, 4)
    with Producer("p-kill-inflight", standalone.namesrv, **FAST_PRODUCER) as producer:
        for i in range(MESSAGES):
            producer.send(Message(TOPIC, f"m{i}".encode()))
    everything = {(mq.queue_id, o) for mq in admin.message_queues(TOPIC)
                  for o in range(admin.max_offset(mq))}
    assert len(everything) == MESSAGES
    # Several kills, each of a group of its own: a kill lands anywhere between two commit
    # rounds, and before the fix one landing just after a round redelivered little by chance.
    inside_total = twice_total = 0
    for kill in range(KILLS):
        group = f"g-kill-inflight-{kill}"
        entered, finished = _kill_mid_stream(standalone.namesrv, group)
        inside = entered - finished
        assert len(inside) <= THREADS
        again = _drain(standalone.namesrv, admin, group, everything - finished)
        assert len(again) == len(set(again))  # the new member consumes each message once
        assert everything <= finished | set(again)  # nothing lost
        twice = set(again) & entered
        assert inside <= twice  # what was inside the listener comes again, as it must
        inside_total += len(inside)
        twice_total += len(twice)
    assert twice_total <= inside_total + KILLS * ALLOWANCE, (
        f"{twice_total} consumed again over {KILLS} kills, {inside_total} inside the listener")
    admin.close()
