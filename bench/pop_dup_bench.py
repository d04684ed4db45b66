"""Duplicates after a consumer SIGKILL: pop (SimpleConsumer, per-message acknowledgement)
against the push consumer (offsets), the same experiment in the same run.

A consumer process works through a stream (a few ms per message) on a real `ferrymq
standalone`, printing each message it finished (and, for pop, each one it received); it is
SIGKILLed once half the stream is done. A new member of the group then drains the topic.
Rows: messages finished by both (processed twice) with pop, beside the push consumer with
ferrymq's precise acknowledgement and with plain 4.x offsets; and for pop, the messages
delivered again against those in flight at the kill (received, not acknowledged), the bound
they stay under.

`python bench/pop_dup_bench.py [--quick]` prints the rows as JSON lines."""

from __future__ import annotations

import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from ferrymq import (
    AdminClient,
    ConsumeFromWhere,
    ConsumeStatus,
    Message,
    MessageExt,
    Producer,
    PushConsumer,
    SimpleConsumer,
)
from ferrymq.embedded import standalone

Key = tuple[int, int]
TOPIC = "dups"
QUEUES = 4
WORK_S = 0.002  # per message
MODES = ("pop", "push", "push-4x")


# --- the consumer process ------------------------------------------------------------------------
def child(mode: str, namesrv: str, group: str) -> None:
    lock = threading.Lock()

    def say(*parts: object) -> None:
        with lock:
            print(*parts, flush=True)

    if mode == "pop":
        consumer = SimpleConsumer(group, namesrv, await_duration=1.0)
        consumer.subscribe(TOPIC)
        consumer.start()
        say("READY")
        while True:
            views = consumer.receive(16, 5.0)
            for v in views:
                say("RECV", v.message.queue_id, v.queue_offset)
            for v in views:
                time.sleep(WORK_S)
                consumer.ack(v)
                say("DONE", v.message.queue_id, v.queue_offset)

    def listener(msgs: list[MessageExt], ctx: Any) -> ConsumeStatus:
        for m in msgs:
            time.sleep(WORK_S)
            say("DONE", m.queue_id, m.queue_offset)
        return ConsumeStatus.CONSUME_SUCCESS

    push = PushConsumer(group, namesrv, consume_from_where=ConsumeFromWhere.FIRST_OFFSET,
                        precise_ack=(mode == "push"))
    push.subscribe(TOPIC)
    push.register_listener(listener)
    push.start()
    say("READY")
    threading.Event().wait()


# --- the experiment ------------------------------------------------------------------------------
def _drain(mode: str, namesrv: str, group: str, everything: set[Key], done: set[Key]) -> list[Key]:
    got: list[Key] = []
    deadline = time.monotonic() + 120
    if mode == "pop":
        with SimpleConsumer(group, namesrv, await_duration=0.5) as consumer:
            consumer.subscribe(TOPIC)
            while set(got) | done != everything and time.monotonic() < deadline:
                for v in consumer.receive(32, 30):
                    got.append((v.message.queue_id, v.queue_offset))
                    consumer.ack(v)
        return got
    lock = threading.Lock()

    def listener(msgs: list[MessageExt], ctx: Any) -> ConsumeStatus:
        with lock:
            got.extend((m.queue_id, m.queue_offset) for m in msgs)
        return ConsumeStatus.CONSUME_SUCCESS

    push = PushConsumer(group, namesrv, consume_from_where=ConsumeFromWhere.FIRST_OFFSET,
                        precise_ack=(mode == "push"), rebalance_interval=0.3,
                        pull_suspend_timeout=1.0)
    push.subscribe(TOPIC)
    push.register_listener(listener)
    with push:
        while time.monotonic() < deadline:
            with lock:
                if set(got) | done == everything:
                    break
            time.sleep(0.05)
        time.sleep(1.0)  # what else the survivor was going to get again
    with lock:
        return list(got)


def experiment(mode: str, messages: int) -> dict[str, int]:
    with tempfile.TemporaryDirectory(prefix="ferrymq-dups-") as tmp, \
            standalone(Path(tmp) / "store") as server:
        admin = AdminClient(server.namesrv)
        admin.create_topic(TOPIC, QUEUES)
        with Producer("p-dups", server.namesrv) as producer:
            for i in range(messages):
                producer.send(Message(TOPIC, f"m{i}".encode()))
        everything = {(mq.queue_id, o) for mq in admin.message_queues(TOPIC)
                      for o in range(admin.max_offset(mq))}
        admin.close()
        group = f"g-{mode}"
        proc = subprocess.Popen([sys.executable, __file__, "--child", mode, server.namesrv, group],
                                stdout=subprocess.PIPE, text=True)
        received: set[Key] = set()
        done: set[Key] = set()
        assert proc.stdout is not None

        def note(line: str) -> None:
            parts = line.split()
            if len(parts) == 3 and parts[0] in ("RECV", "DONE"):
                (received if parts[0] == "RECV" else done).add((int(parts[1]), int(parts[2])))

        try:
            for line in proc.stdout:
                note(line)
                if len(done) >= messages // 2 + 3:
                    break
        finally:
            proc.kill()  # SIGKILL mid-stream
        # What it finished between the last line read and the kill is in the pipe: with
        # acknowledgements sent within a millisecond, the broker may have it as consumed.
        for line in proc.stdout:
            note(line)
        proc.wait()
        second = _drain(mode, server.namesrv, group, everything, done)
        lost = everything - done - set(second)
        return {"done": len(done), "in_flight": len(received - done),
                "again": len(set(second) & received),
                "duplicates": len(set(second) & done) + (len(second) - len(set(second))),
                "lost": len(lost)}


def measure(quick: bool) -> dict[str, list[dict[str, int]]]:
    runs, messages = (1, 1000) if quick else (3, 4000)
    return {mode: [experiment(mode, messages) for _ in range(runs)] for mode in MODES}


def rows(results: dict[str, list[dict[str, int]]]) -> list[dict[str, Any]]:
    def med(mode: str, key: str) -> float:
        return float(statistics.median(r[key] for r in results[mode]))

    def runs(mode: str, key: str) -> list[int]:
        return [r[key] for r in results[mode]]

    base = {"workload": "consumer SIGKILL", "unit": "msgs"}
    return [
        {**base, "measurement": "finished twice: pop vs push (precise ack)",
         "value": med("pop", "duplicates"), "runs": runs("pop", "duplicates"),
         "peer_name": "PushConsumer (precise ack)",
         "peer_value": med("push", "duplicates"), "peer_runs": runs("push", "duplicates")},
        {**base, "measurement": "finished twice: pop vs push (4.x offsets)",
         "value": med("pop", "duplicates"), "runs": runs("pop", "duplicates"),
         "peer_name": "PushConsumer (precise_ack=False)",
         "peer_value": med("push-4x", "duplicates"), "peer_runs": runs("push-4x", "duplicates")},
        {**base, "measurement": "pop: delivered again", "value": med("pop", "again"),
         "runs": runs("pop", "again"), "target": "<= in flight at the kill"},
        {**base, "measurement": "pop: in flight at the kill", "value": med("pop", "in_flight"),
         "runs": runs("pop", "in_flight")},
        {**base, "measurement": "lost (every mode)",
         "value": float(sum(r["lost"] for m in MODES for r in results[m])), "runs": [],
         "target": "0"},
    ]


def run(quick: bool) -> list[dict[str, Any]]:
    return rows(measure(quick))


if __name__ == "__main__":
    if sys.argv[1:2] == ["--child"]:
        child(sys.argv[2], sys.argv[3], sys.argv[4])
    else:
        import json

        for r in run("--quick" in sys.argv):
            print(json.dumps(r))
