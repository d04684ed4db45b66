"""Topic creation as a broker's topic table grows (issue 24): the time `AdminClient.create_topic`
takes with 1,000 and 10,000 topics already on the broker, and the time 3,000 topics created
one at a time take on a fresh one, against a real `ferrymq standalone`.

The existing topics are written into the broker's config/topics.json before it starts (its own
format), so the table is there without creating it one topic at a time. The one-at-a-time run
stops at a time budget and reports how far it got (the rate row then says so).

`python bench/scale_bench.py [--quick]` prints the rows as JSON lines."""

from __future__ import annotations

import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from ferrymq import AdminClient
from ferrymq.embedded import standalone

SAMPLES = 3
ONE_AT_A_TIME_BUDGET_S = 300.0


def _seed(store: Path, count: int) -> None:
    table = {f"seed-{i:06d}": {"topicName": f"seed-{i:06d}", "readQueueNums": 4, "writeQueueNums": 4,
                               "perm": 6, "topicSysFlag": 0, "order": False,
                               "topicFilterType": "SINGLE_TAG"} for i in range(count)}
    (store / "config").mkdir(parents=True, exist_ok=True)
    (store / "config" / "topics.json").write_text(json.dumps(
        {"dataVersion": {"counter": 1, "timestamp": int(time.time() * 1000)}, "topicConfigTable": table}))


def one_creation_ms(existing: int) -> list[float]:
    """Each sample on its own broker, so every one sees exactly `existing` topics before."""
    samples = []
    for _ in range(SAMPLES):
        with tempfile.TemporaryDirectory() as d:
            store = Path(d) / "store"
            _seed(store, existing)
            with standalone(store, "--grpc-port", "-1") as srv, AdminClient(srv.namesrv) as admin:
                admin.create_topic("warm-up", 4)  # connections and the cluster lookup are made
                started = time.perf_counter()
                admin.create_topic("measured", 4)
                samples.append((time.perf_counter() - started) * 1000)
                admin.topic_route("measured")
    return samples


def one_at_a_time(count: int, budget_s: float) -> tuple[int, float]:
    """(topics created, seconds): stops early when the budget runs out."""
    with (tempfile.TemporaryDirectory() as d, standalone(Path(d) / "store", "--grpc-port", "-1") as srv,
          AdminClient(srv.namesrv) as admin):
        started = time.perf_counter()
        done = 0
        while done < count and time.perf_counter() - started < budget_s:
            admin.create_topic(f"t-{done:06d}", 4)
            done += 1
        return done, time.perf_counter() - started


def run(quick: bool) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for existing in ((1000,) if quick else (1000, 10_000)):
        samples = one_creation_ms(existing)
        rows.append({"workload": "scale", "measurement": f"create one topic, {existing:,} existing",
                     "unit": "ms", "value": statistics.median(samples), "runs": samples, "target": 20})
    count = 300 if quick else 3000
    budget = ONE_AT_A_TIME_BUDGET_S / (10 if quick else 1)
    runs = [one_at_a_time(count, budget) for _ in range(1 if quick else SAMPLES)]
    finished = [s for n, s in runs if n == count]
    if len(finished) == len(runs):
        rows.append({"workload": "scale", "measurement": f"{count:,} topics created one at a time",
                     "unit": "s", "value": statistics.median(finished), "runs": finished,
                     "target": 60 if not quick else None})
    else:
        reached = [n for n, _s in runs]
        rows.append({"workload": "scale",
                     "measurement": f"topics created one at a time within {budget:.0f} s (of {count:,})",
                     "unit": "topics", "value": statistics.median(reached), "runs": reached})
    return rows


if __name__ == "__main__":
    for row in run("--quick" in sys.argv):
        print(json.dumps(row))
