"""Replication costs and failover, with ferrymq's Python producer against brokers started as
separate processes in the same run (ferrymq.embedded.start_cluster):

- (a) one ASYNC_MASTER, (b) ASYNC_MASTER + 1 slave, (c) SYNC_MASTER + 1 slave: send
  throughput and p99 latency of send_batch (32 x 1 KiB, BATCH_THREADS requests in flight) and
  of single sends (send_async, WINDOW in flight); the peer of (b) and (c) is (a), so the ratio
  column is what replication costs (goal for (c) batched: >= 0.70x);
- replication lag at ~RATE msg/s: the master's runtime table (`haSlaves` lagMs / lagBytes)
  sampled every SAMPLE_EVERY seconds while a paced producer runs; the largest sample (goal
  <= 100 ms);
- failover in controller mode: SIGKILL the master, time until a send succeeds on the replica
  the controller elects (goal <= 10 s).

`run(quick)` returns rows of the bench harness, the median of the runs of each measurement."""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.e2e_bench import percentile
from bench.proc import process_cpu

from ferrymq import AdminClient, Message, Producer
from ferrymq.client.admin_results import BrokerStatus
from ferrymq.embedded import LocalCluster, start_cluster

BODY = b"x" * 1024
BATCH = 32
BATCH_THREADS = 4
WINDOW = 256
RATE = 10_000
SAMPLE_EVERY = 0.05
TOPIC = "ha-bench"
QUEUES = 4
LEASE_MS = 1000
CONFIGS = {
    "a": ("ASYNC_MASTER", 0, "1 ASYNC_MASTER"),
    "b": ("ASYNC_MASTER", 1, "ASYNC_MASTER + 1 slave"),
    "c": ("SYNC_MASTER", 1, "SYNC_MASTER + 1 slave"),
}
BROKER_CONFIG: dict[str, str | int | float | bool] = {
    "ha_heartbeat_interval_ms": 100,
    "controller_heartbeat_interval_ms": 200,
}


def runs(quick: bool) -> int:
    return 2 if quick else 3


def _wait(predicate: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.05)


def _master_status(admin: AdminClient) -> BrokerStatus:
    return next(b for b in admin.cluster_list() if b.broker_id == 0)


def _ready(cluster: LocalCluster, slaves: int) -> None:
    """The topic exists and, with a slave, the slave is in sync (a SYNC_MASTER refuses before)
    and has a message of the topic (a replica elected before that would not know it)."""
    with AdminClient(cluster.namesrv.addr, timeout=3.0) as admin:
        admin.create_topic(TOPIC, QUEUES)
        if not slaves:
            return
        _wait(lambda: bool(_master_status(admin).replication.in_sync_slaves), 30, "an in-sync slave")
        with Producer("ha-bench-warm", cluster.namesrv.addr) as producer:
            producer.send(Message(TOPIC, BODY))

        def caught_up() -> bool:
            listed = admin.cluster_list()
            ends = {b.runtime.get("commitLogMaxOffset") for b in listed}
            return len(listed) == slaves + 1 and len(ends) == 1

        _wait(caught_up, 30, "the slave to have the first message")


def _pid(cluster: LocalCluster, broker_id: int) -> int:
    pid = cluster.broker(broker_id).pid
    if pid is None:
        raise RuntimeError(f"broker {broker_id} is not running")
    return pid


def batched(namesrv: str, seconds: float) -> tuple[float, float, int]:
    """(msgs/s, p99 ms per request, messages sent) of send_batch from BATCH_THREADS threads."""
    latencies: list[float] = []
    lock = threading.Lock()
    stop = time.perf_counter() + seconds
    with Producer("ha-bench-b", namesrv) as producer:
        producer.send_batch([Message(TOPIC, BODY) for _ in range(BATCH)])  # route, connection

        def worker() -> None:
            mine = []
            while time.perf_counter() < stop:
                t0 = time.perf_counter()
                producer.send_batch([Message(TOPIC, BODY) for _ in range(BATCH)])
                mine.append((time.perf_counter() - t0) * 1000)
            with lock:
                latencies.extend(mine)

        began = time.perf_counter()
        threads = [threading.Thread(target=worker) for _ in range(BATCH_THREADS)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        elapsed = time.perf_counter() - began
    return len(latencies) * BATCH / elapsed, percentile(latencies, 0.99), len(latencies) * BATCH


def single(namesrv: str, n: int) -> tuple[float, float]:
    """(msgs/s, p99 ms per send) of send_async with WINDOW sends in flight."""
    latencies: list[float] = []
    errors: list[BaseException] = []
    sem = threading.Semaphore(WINDOW)
    with Producer("ha-bench-s", namesrv) as producer:
        producer.send(Message(TOPIC, BODY))

        def sent(t0: float) -> Callable[[Any], None]:
            def done(f: Any) -> None:
                latencies.append((time.perf_counter() - t0) * 1000)
                if f.exception() is not None:
                    errors.append(f.exception())
                sem.release()
            return done

        began = time.perf_counter()
        for _ in range(n):
            sem.acquire()
            producer.send_async(Message(TOPIC, BODY)).add_done_callback(sent(time.perf_counter()))
        for _ in range(WINDOW):
            sem.acquire()
        elapsed = time.perf_counter() - began
    if errors:
        raise RuntimeError(f"{len(errors)} of {n} sends failed: {errors[0]}")
    return n / elapsed, percentile(latencies, 0.99)


def lag_at_rate(namesrv: str, seconds: float) -> tuple[float, float, float]:
    """(largest lagMs, largest lagBytes, achieved msg/s) while batches are sent at RATE."""
    samples: list[tuple[int, int]] = []
    done = threading.Event()

    def sample() -> None:
        with AdminClient(namesrv, timeout=3.0) as admin:
            while not done.is_set():
                for s in _master_status(admin).replication.ha_slaves or ():
                    samples.append((int(s.get("lagMs", 0)), int(s.get("lagBytes", 0))))
                done.wait(SAMPLE_EVERY)

    sampler = threading.Thread(target=sample)
    sent = 0
    with Producer("ha-bench-lag", namesrv) as producer:
        producer.send(Message(TOPIC, BODY))
        sampler.start()
        began = time.perf_counter()
        batches = int(seconds * RATE / BATCH)
        for i in range(batches):
            delay = began + i * BATCH / RATE - time.perf_counter()
            if delay > 0:
                time.sleep(delay)
            producer.send_batch([Message(TOPIC, BODY) for _ in range(BATCH)])
            sent += BATCH
        elapsed = time.perf_counter() - began
        done.set()
        sampler.join()
    if not samples:
        raise RuntimeError("the master reported no slave while sending")
    return max(s[0] for s in samples), max(s[1] for s in samples), sent / elapsed


def failover(base: Path) -> float:
    """Seconds from the master's SIGKILL to the first send that succeeds afterwards."""
    with start_cluster(base, slaves=1, role="ASYNC_MASTER", controller=True, controller_lease_ms=LEASE_MS,
                       broker_config=BROKER_CONFIG) as cluster:
        old = cluster.wait_master()
        _ready(cluster, 1)
        with Producer("ha-bench-fo", cluster.namesrv.addr, send_timeout=1.0,
                      retry_times_when_send_failed=0) as producer:
            producer.send(Message(TOPIC, BODY))
            old.kill()
            killed = time.monotonic()
            while time.monotonic() - killed < 60:
                try:
                    producer.send(Message(TOPIC, BODY))
                    return time.monotonic() - killed
                except Exception:
                    time.sleep(0.02)
    raise RuntimeError("no send succeeded within 60 s of the master's SIGKILL")


def measure(quick: bool) -> dict[str, list[float]]:
    seconds = 1.5 if quick else 5.0
    singles = 3_000 if quick else 20_000
    out: dict[str, list[float]] = {}

    def add(key: str, value: float) -> None:
        out.setdefault(key, []).append(value)

    for run_no in range(runs(quick)):
        for key, (role, slaves, _) in CONFIGS.items():
            with (tempfile.TemporaryDirectory(prefix="ferrymq-ha-bench-") as tmp,
                  start_cluster(Path(tmp), slaves=slaves, role=role, broker_config=BROKER_CONFIG) as cluster):
                _ready(cluster, slaves)
                ns = cluster.namesrv.addr
                # CPU per message of each process over the batched run: on 2 cores the sum
                # bounds the throughput, and the slave's apply is set against the master's put.
                pids = {"master": _pid(cluster, 0), "producer": os.getpid()}
                if slaves:
                    pids["slave"] = _pid(cluster, 1)
                before = {who: process_cpu(pid) for who, pid in pids.items()}
                tps, p99, sent = batched(ns, seconds)
                for who, was in before.items():
                    add(f"batch_cpu_{who}_{key}", (process_cpu(pids[who]) - was) / sent * 1e6)
                add(f"batch_tps_{key}", tps)
                add(f"batch_p99_{key}", p99)
                tps, p99 = single(ns, singles)
                add(f"single_tps_{key}", tps)
                add(f"single_p99_{key}", p99)
                if key == "b":
                    lag_ms, lag_bytes, rate = lag_at_rate(ns, seconds)
                    add("lag_ms", lag_ms)
                    add("lag_bytes", lag_bytes)
                    add("lag_rate", rate)
        print(f"  ha_bench run {run_no + 1}: throughput and lag done", file=sys.stderr, flush=True)
        with tempfile.TemporaryDirectory(prefix="ferrymq-ha-bench-fo-") as tmp:
            add("failover_s", failover(Path(tmp)))
    return out


def _row(measurement: str, unit: str, values: list[float], **extra: Any) -> dict[str, Any]:
    return {"workload": "replication", "measurement": measurement, "unit": unit,
            "value": round(statistics.median(values), 2), "runs": [round(v, 2) for v in values], **extra}


def rows(out: dict[str, list[float]]) -> list[dict[str, Any]]:
    result = []
    for kind, what in (("batch", f"send_batch {BATCH} x 1 KiB, {BATCH_THREADS} in flight"),
                       ("single", f"single sends, {WINDOW} in flight")):
        base = out[f"{kind}_tps_a"]
        for key, (_, _, label) in CONFIGS.items():
            extra: dict[str, Any] = {}
            if key != "a":
                extra = {"peer_name": CONFIGS["a"][2], "peer_value": round(statistics.median(base), 2),
                         "peer_runs": [round(v, 2) for v in base]}
                if key == "c" and kind == "batch":
                    extra["target"] = ">= 0.70x peer"
            result.append(_row(f"{what}: {label}", "msgs/s", out[f"{kind}_tps_{key}"], **extra))
        for key, (_, _, label) in CONFIGS.items():
            result.append(_row(f"{what}: {label}, p99 latency", "ms", out[f"{kind}_p99_{key}"]))
    for key, (_, _, label) in CONFIGS.items():
        for who in ("master", "slave", "producer"):
            if f"batch_cpu_{who}_{key}" in out:
                result.append(_row(f"send_batch: {label}, {who} CPU per message", "us",
                                   out[f"batch_cpu_{who}_{key}"]))
    rate = round(statistics.median(out["lag_rate"]))
    result.append(_row(f"replication lag at {rate:,} msg/s (target {RATE:,}), largest lagMs sampled", "ms",
                       out["lag_ms"], target="<= 100 ms"))
    result.append(_row(f"replication lag at {rate:,} msg/s, largest lagBytes sampled", "bytes", out["lag_bytes"]))
    result.append(_row(f"controller-mode failover (lease {LEASE_MS} ms): SIGKILL to first successful send",
                       "s", out["failover_s"], target="<= 10 s"))
    return result


def run(quick: bool) -> list[dict[str, Any]]:
    return rows(measure(quick))


if __name__ == "__main__":
    import json

    for r in run("--quick" in sys.argv):
        print(json.dumps(r))
