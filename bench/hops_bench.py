"""The thread hop a non-blocking listener saves, in the same run: one `ferrymq standalone`
server, a push consumer in this process with its listener registered as usual (called on a
consume thread) and with `blocking=False` (called on the client's I/O loop).

- consume + ack throughput, listener batch 1 (the default) and 32, 1 KiB messages from the
  first offset, and this process's CPU per message consumed (the consumer is all it runs);
- end-to-end latency p50 / p99 at 2,000 msg/s (the e2e bench's paced producer in its own
  process).

Runs alternate between the two kinds so drift on the machine hits both alike. `value` is the
non-blocking listener, the peer the thread-pool one."""

from __future__ import annotations

import resource
import statistics
import tempfile
from pathlib import Path
from typing import Any

from bench.e2e_bench import ferrymq_consume, ferrymq_latency, ferrymq_produce, percentile

from ferrymq import AdminClient
from ferrymq.embedded import standalone

RUNS = 3
TOPIC = "hops-bench"
RATE = 2000


def own_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def run(quick: bool) -> list[dict[str, Any]]:
    n = 5_000 if quick else 30_000
    seconds = 2.0 if quick else 5.0
    results: dict[tuple[str, bool], list[float]] = {}

    def add(what: str, inline: bool, value: float) -> None:
        results.setdefault((what, inline), []).append(value)

    with tempfile.TemporaryDirectory(prefix="ferrymq-hops-bench-") as tmp, \
            standalone(Path(tmp)) as server:
        namesrv = server.namesrv
        with AdminClient(namesrv) as admin:
            admin.create_topic(TOPIC, 4)
            for i in range(RUNS):  # a topic per latency run: a group new to an old topic
                for inline in (True, False):  # could be handed the earlier runs' messages
                    admin.create_topic(f"{TOPIC}-lat{i}-{inline}", 4)
        ferrymq_produce(namesrv, TOPIC, n)
        for i in range(RUNS):
            for inline in (i % 2 == 0, i % 2 != 0):
                for batch in (1, 32):
                    cpu = own_cpu()
                    add(f"consume{batch}", inline, ferrymq_consume(
                        namesrv, TOPIC, f"hops-{i}-{batch}-{inline}", n, batch,
                        blocking=not inline))
                    add(f"cpu{batch}", inline, (own_cpu() - cpu) / n * 1e6)
                lat = ferrymq_latency(namesrv, f"{TOPIC}-lat{i}-{inline}", f"hops-l{i}-{inline}", seconds,
                                      RATE, blocking=not inline)
                add("p50", inline, percentile(lat, 0.50))
                add("p99", inline, percentile(lat, 0.99))
    rows = []
    labels = {
        "consume1": ("consume with ack, listener batch 1", "msg/s"),
        "cpu1": ("consumer CPU per message, listener batch 1", "µs"),
        "consume32": ("consume with ack, listener batch 32", "msg/s"),
        "cpu32": ("consumer CPU per message, listener batch 32", "µs"),
        "p50": (f"end-to-end latency p50 at {RATE} msg/s", "ms"),
        "p99": (f"end-to-end latency p99 at {RATE} msg/s", "ms"),
    }
    for what, (label, unit) in labels.items():
        ours, peer = results[(what, True)], results[(what, False)]
        rows.append({"workload": "listener hop", "unit": unit,
                     "measurement": f"{label}, non-blocking listener",
                     "value": round(statistics.median(ours), 2), "runs": [round(v, 2) for v in ours],
                     "peer_name": "thread-pool listener",
                     "peer_value": round(statistics.median(peer), 2),
                     "peer_runs": [round(v, 2) for v in peer]})
    return rows


if __name__ == "__main__":
    import json
    import sys

    for r in run("--quick" in sys.argv):
        print(json.dumps(r))
