"""Duplicates when a member joins a busy consumer group: ferrymq's queue hand-over (the new
owner starts from the old owner's release: broker/handover.py) against the same broker with
`handover_wait_ms = 0`, which answers at once as RocketMQ does, in the same run.

A push consumer (4 listener threads, a few ms of work per message) works through a backlog
of 1 KiB messages on 8 queues of a real `ferrymq standalone`; once it has consumed a fifth,
a second member joins; both drain the rest. Rows: messages consumed twice, and the time from
the join to the second member's first message (what the hand-over may cost in start-up).

`python bench/handover_bench.py [--quick]` prints the rows as JSON lines."""

from __future__ import annotations

import statistics
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

from ferrymq import AdminClient, ConsumeFromWhere, ConsumeStatus, Message, MessageExt, Producer, PushConsumer
from ferrymq.embedded import standalone

TOPIC = "handover"
QUEUES = 8
WORK_S = 0.001
THREADS = 4
MODES = {"handover": "", "immediate": "handover_wait_ms = 0\n"}


def _wait(predicate: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.005)


def experiment(mode: str, messages: int) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as d:
        conf = Path(d) / "broker.toml"
        conf.write_text(MODES[mode])
        with standalone(Path(d) / "store", "--config", str(conf)) as srv:
            with AdminClient(srv.namesrv) as admin:
                admin.create_topic(TOPIC, QUEUES)
            with Producer("handover-bench-p", srv.namesrv) as producer:
                for _ in range(messages // 32):
                    producer.send_batch([Message(TOPIC, b"x" * 1024) for _i in range(32)])
            counts: Counter[tuple[int, int]] = Counter()
            lock = threading.Lock()
            second_first: list[float] = []

            def listener_of(member: int) -> Any:
                def listener(msgs: list[MessageExt], ctx: Any) -> ConsumeStatus:
                    time.sleep(WORK_S)  # the work
                    with lock:
                        for m in msgs:
                            counts[(m.queue_id, m.queue_offset)] += 1
                        if member == 2 and not second_first:
                            second_first.append(time.monotonic())
                    return ConsumeStatus.CONSUME_SUCCESS
                return listener

            def member(n: int) -> PushConsumer:
                c = PushConsumer("handover-bench", srv.namesrv, consume_from_where=ConsumeFromWhere.FIRST_OFFSET,
                                 consume_threads=THREADS)
                c.subscribe(TOPIC)
                c.register_listener(listener_of(n))
                return c

            total = (messages // 32) * 32
            with member(1):
                _wait(lambda: len(counts) >= total // 5, 60, "the first member to consume a fifth")
                joined = time.monotonic()
                with member(2):
                    _wait(lambda: len(counts) >= total, 120, "every message")
                    with lock:  # before the members stop (a leaving member is another hand-over)
                        twice = sum(n - 1 for n in counts.values())
            left = sum(n - 1 for n in counts.values()) - twice
            if left:
                print(f"handover_bench: {left} more consumed twice as the members stopped", file=sys.stderr)
            return {"duplicates": float(twice),
                    "start_ms": (second_first[0] - joined) * 1000 if second_first else float("nan")}


def measure(quick: bool) -> dict[str, list[dict[str, float]]]:
    runs, messages = (3, 4000) if quick else (5, 16000)
    out: dict[str, list[dict[str, float]]] = {m: [] for m in MODES}
    for _ in range(runs):  # interleaved, so both modes see the same machine
        for mode in MODES:
            out[mode].append(experiment(mode, messages))
    return out


def rows(results: dict[str, list[dict[str, float]]]) -> list[dict[str, Any]]:
    def runs(mode: str, key: str) -> list[float]:
        return [r[key] for r in results[mode]]

    peer = "handover_wait_ms = 0 (RocketMQ: answered at once)"
    base = {"workload": "member joins a busy group"}
    return [
        {**base, "measurement": "messages consumed twice", "unit": "msgs",
         "value": statistics.median(runs("handover", "duplicates")), "runs": runs("handover", "duplicates"),
         "peer_name": peer, "peer_value": statistics.median(runs("immediate", "duplicates")),
         "peer_runs": runs("immediate", "duplicates"), "target": "0"},
        {**base, "measurement": "join to the new member's first message", "unit": "ms",
         "value": statistics.median(runs("handover", "start_ms")), "runs": runs("handover", "start_ms"),
         "peer_name": peer, "peer_value": statistics.median(runs("immediate", "start_ms")),
         "peer_runs": runs("immediate", "start_ms")},
    ]


def run(quick: bool) -> list[dict[str, Any]]:
    return rows(measure(quick))


if __name__ == "__main__":
    import json

    for r in run("--quick" in sys.argv):
        print(json.dumps(r))
