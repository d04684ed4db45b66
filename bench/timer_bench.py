"""Timer messages (RocketMQ 5's TIMER_DELIVER_MS) on a `ferrymq standalone` process:

- enqueue rate: timer messages sent with ferrymq's producer (send_batch of BATCH, each with its
  own delivery time) until all PENDING are accepted, in msgs/s;
- accuracy: those PENDING timers stay pending (due a minute later) while another PENDING are
  sent, due over SPREAD_S seconds from 8 s on; for each of these, its store time in the real
  topic (when the timer service wrote it there) minus the time asked for, p50 / p99 / max in
  ms, and how many came early (the target is p99 <= 100 ms).

`run(quick)` returns rows of the bench harness, the median of the runs of each measurement."""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.e2e_bench import percentile

from ferrymq import AdminClient, Message, Producer
from ferrymq.common.message import MessageQueue
from ferrymq.embedded import standalone

TOPIC = "timer-bench"
PENDING = 10_000
BATCH = 100
SPREAD_S = 10.0
BODY = b"t" * 128


def runs(quick: bool) -> int:
    return 1 if quick else 3


def one_run(store_dir: Path) -> dict[str, float]:
    with standalone(store_dir) as server:
        with AdminClient(server.namesrv) as admin:
            admin.create_topic(TOPIC, 1)
        with Producer("timer-bench", server.namesrv) as producer:
            first = int(time.time() * 1000) + 60_000
            msgs = [Message(TOPIC, BODY, deliver_time_ms=first + int(i * SPREAD_S * 1000 / PENDING))
                    for i in range(PENDING)]
            t0 = time.perf_counter()
            for k in range(0, PENDING, BATCH):
                producer.send_batch(msgs[k: k + BATCH])
            enqueue_rate = PENDING / (time.perf_counter() - t0)
        with Producer("timer-bench-2", server.namesrv) as producer:
            first = int(time.time() * 1000) + 8_000
            for k in range(0, PENDING, BATCH):
                producer.send_batch([Message(TOPIC, BODY, deliver_time_ms=first + int(
                    i * SPREAD_S * 1000 / PENDING)) for i in range(k, k + BATCH)])
        deltas = _collect(server.namesrv, PENDING, deadline=time.monotonic() + 8 + SPREAD_S + 60)
    return {"enqueue": enqueue_rate, "p50": percentile(deltas, 0.5), "p99": percentile(deltas, 0.99),
            "max": max(deltas), "early": float(sum(1 for d in deltas if d < 0))}


def _collect(namesrv: str, n: int, deadline: float) -> list[float]:
    deltas: list[float] = []
    mq = MessageQueue(TOPIC, "broker-a", 0)
    offset = 0
    with AdminClient(namesrv) as admin:
        while len(deltas) < n:
            if time.monotonic() > deadline:
                raise TimeoutError(f"{len(deltas)} of {n} timers delivered")
            result = admin.pull(mq, offset, 32)
            if not result.messages:
                time.sleep(0.05)
                continue
            for m in result.messages:
                out = m.timer_out_ms
                if out is not None:
                    deltas.append(float(m.store_timestamp - out))
            offset = result.next_begin_offset
    return deltas


def measure(quick: bool) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {}
    for run_no in range(runs(quick)):
        with tempfile.TemporaryDirectory(prefix="ferrymq-timer-bench-") as tmp:
            for key, value in one_run(Path(tmp)).items():
                out.setdefault(key, []).append(value)
        print(f"  timer_bench run {run_no + 1} done", file=sys.stderr, flush=True)
    return out


def _row(measurement: str, unit: str, values: list[float], **extra: Any) -> dict[str, Any]:
    return {"workload": "timer", "measurement": measurement, "unit": unit,
            "value": round(statistics.median(values), 1), "runs": [round(v, 1) for v in values],
            **extra}


def run(quick: bool) -> list[dict[str, Any]]:
    out = measure(quick)
    pending = f"{PENDING:,} timers pending over {SPREAD_S:.0f} s"
    return [
        _row(f"timer enqueue: send_batch {BATCH} timer messages", "msgs/s", out["enqueue"]),
        _row(f"timer accuracy, {pending}: delivered - asked, p50", "ms", out["p50"]),
        _row(f"timer accuracy, {pending}: delivered - asked, p99", "ms", out["p99"], target="<= 100 ms"),
        _row(f"timer accuracy, {pending}: delivered - asked, max", "ms", out["max"]),
        _row(f"timer accuracy, {pending}: delivered early", "msgs", out["early"]),
    ]


if __name__ == "__main__":
    for row in run("--quick" in sys.argv):
        print(row)
