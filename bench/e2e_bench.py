"""End-to-end benchmark of the Python clients through a real `ferrymq standalone` broker
(async flush), beside the same workloads on three peers, each with its own Python client:
Redis Streams (appendfsync everysec; here), NATS JetStream (file store; bench/nats_peer.py) and
RabbitMQ (a durable quorum queue; bench/rabbitmq_peer.py):

- produce throughput of 1 KiB messages (send_async with a window / the peers' pipelined or
  asynchronous publishes with acks),
- consume-with-ack throughput (push consumer committing offsets / XREADGROUP + XACK / a
  JetStream pull consumer / a prefetching AMQP consumer),
- end-to-end latency p50/p99 at a steady 2,000 and 20,000 msg/s.

`run(quick)` returns one row per measurement, the median of 3 runs, with every peer's median
(`peers`) and the best peer's as `peer`, the figure the ratio is against. The bench installs
each peer's server from Debian and its client from PyPI (pyproject.toml's `bench` extra) when
missing (bench/peer_setup.py) and runs its own instance on free loopback ports; bench/README.md
lists each peer's client settings."""

from __future__ import annotations

import collections
import contextlib
import importlib
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.peer_setup import server_binary

from ferrymq import (
    AdminClient,
    ConsumeFromWhere,
    ConsumeStatus,
    Message,
    MessageExt,
    Producer,
    PushConsumer,
    SendResult,
    freeze_startup_heap,
)
from ferrymq.embedded import standalone

BODY_SIZE = 1024
WINDOW = 512  # messages in flight while producing
BATCH = 32  # messages per batch for the batched produce
# msg/s of the latency measurements (FERRYMQ_BENCH_RATES="2000,20000" overrides)
RATES = tuple(int(r) for r in os.environ.get("FERRYMQ_BENCH_RATES", "2000,20000").split(","))
# FERRYMQ_BENCH_LATENCY_ONLY=1 skips the throughput rows (latency work, A/B runs)
LATENCY_ONLY = os.environ.get("FERRYMQ_BENCH_LATENCY_ONLY") == "1"
RUNS = 3
PEER = "Redis Streams (appendfsync everysec)"
# The goals: produce >= 2x and consume >= 1.5x the peer's throughput; p99 <= 1 ms at
# 2,000 msg/s and <= 5 ms at 20,000 msg/s.
P99_TARGETS: dict[int, str] = {2000: "<= 1 ms", 20000: "<= 5 ms"}
TARGETS: dict[str, str] = {"produce": ">= 2x peer", "produce_batch": ">= 2x peer",
                           "consume": ">= 1.5x peer", "consume_batch": ">= 1.5x peer"}
for _rate in RATES:
    TARGETS[f"p50@{_rate}"] = ""
    TARGETS[f"p99@{_rate}"] = P99_TARGETS.get(_rate, "")
THROUGHPUT_KEYS = ("produce", "produce_batch", "consume", "consume_batch")


@dataclass(frozen=True)
class Sizes:
    messages: int
    latency_seconds: float


def sizes(quick: bool) -> Sizes:
    return Sizes(5_000, 2.0) if quick else Sizes(30_000, 5.0)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    idx = min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))
    return ordered[idx]


def record_latencies(out: dict[str, list[float]], latency_at: Callable[[int], list[float]], *,
                     within_produce_rate: bool = False) -> None:
    """p50 and p99 at each of RATES into `out`, from `latency_at(rate)`'s samples. With
    `within_produce_rate`, a rate above what the client published in this run's produce row
    gets no figure (NaN): a paced run there would measure a growing backlog, not latency."""
    for rate in RATES:
        if within_produce_rate and out["produce"] and rate > out["produce"][-1]:
            out[f"p50@{rate}"].append(float("nan"))
            out[f"p99@{rate}"].append(float("nan"))
            continue
        lat = latency_at(rate)
        out[f"p50@{rate}"].append(percentile(lat, 0.50))
        out[f"p99@{rate}"].append(percentile(lat, 0.99))


def paced(total_seconds: float, rate: int) -> Iterator[int]:
    """Yield message numbers at `rate` per second, catching up when late."""
    start = time.perf_counter()
    for i in range(int(total_seconds * rate)):
        due = start + i / rate
        delay = due - time.perf_counter()
        if delay > 0:
            time.sleep(delay)
        yield i


# --- ferrymq ---------------------------------------------------------------------------------
@contextlib.contextmanager
def ferrymq_server(store: Path) -> Iterator[str]:
    with standalone(store) as server:
        yield server.namesrv


def ferrymq_produce(namesrv: str, topic: str, n: int, *, group: str = "bench-p", **client: Any) -> float:
    """send_async with WINDOW in flight, each send's own result checked; `client`: Producer
    options (credentials, TLS). The window is the futures themselves, oldest first, as Redis's
    side waits on its pipeline: a Semaphore released from a done-callback would add a
    pure-Python Condition (about 2 us of the producer's CPU per message) that is the
    harness's, not the client's."""
    body = b"x" * BODY_SIZE
    with Producer(group, namesrv, **client) as producer:
        producer.send(Message(topic, body))  # route and connection warm
        pending: collections.deque[Future[SendResult]] = collections.deque()
        began = time.perf_counter()
        for _ in range(n):
            if len(pending) >= WINDOW:
                pending.popleft().result()  # raises a failed send's error
            pending.append(producer.send_async(Message(topic, body)))
        for f in pending:
            f.result()
        elapsed = time.perf_counter() - began
    return n / elapsed


def ferrymq_produce_batches(namesrv: str, topic: str, n: int) -> float:
    """The same messages sent as batches of 32 (RocketMQ's send(Collection)), one at a time."""
    body = b"x" * BODY_SIZE
    with Producer("bench-pb", namesrv) as producer:
        producer.send(Message(topic, body))
        began = time.perf_counter()
        for _ in range(n // BATCH):
            producer.send_batch([Message(topic, body) for _ in range(BATCH)])
        elapsed = time.perf_counter() - began
    return (n // BATCH) * BATCH / elapsed


def ferrymq_consume(namesrv: str, topic: str, group: str, n: int, batch: int = 1, *,
                    blocking: bool = True, **client: Any) -> float:
    """A PushConsumer from the first offset until n arrived; `client`: its options;
    `blocking=False` registers the listener as non-blocking (run on the client's loop)."""
    count = [0]
    lock = threading.Lock()
    finished = threading.Event()

    def listener(msgs: list[MessageExt], ctx: Any) -> ConsumeStatus:
        with lock:
            count[0] += len(msgs)
            if count[0] >= n:
                finished.set()
        return ConsumeStatus.CONSUME_SUCCESS

    # Listener batches of 32, like the peer's XREADGROUP COUNT 32 (RocketMQ's
    # consumeMessageBatchMaxSize); the default of 1 is measured too.
    consumer = PushConsumer(group, namesrv, consume_from_where=ConsumeFromWhere.FIRST_OFFSET,
                            consume_message_batch_max_size=batch, **client)
    consumer.subscribe(topic)
    consumer.register_listener(listener, blocking=blocking)
    began = time.perf_counter()
    consumer.start()
    try:
        if not finished.wait(300):
            raise RuntimeError(f"consumed {count[0]} of {n}")
        elapsed = time.perf_counter() - began
    finally:
        consumer.shutdown()  # persists the acknowledged offsets
    return n / elapsed


def ferrymq_latency(namesrv: str, topic: str, group: str, seconds: float, rate: int, *,
                    blocking: bool = True) -> list[float]:
    latencies: list[float] = []
    lock = threading.Lock()
    expected = int(seconds * rate)
    finished = threading.Event()

    warmed = threading.Event()

    def listener(msgs: list[MessageExt], ctx: Any) -> ConsumeStatus:
        now = time.perf_counter_ns()
        with lock:
            for m in msgs:
                if m.body.startswith(b"warm"):
                    warmed.set()
                    continue
                latencies.append((now - int(m.body[:20])) / 1e6)
            if len(latencies) >= expected:
                finished.set()
        return ConsumeStatus.CONSUME_SUCCESS

    consumer = PushConsumer(group, namesrv)  # from the last offset: only what is sent now
    consumer.subscribe(topic)
    consumer.register_listener(listener, blocking=blocking)
    with consumer:
        with Producer("bench-warm", namesrv) as producer:
            # Measure a running pipeline: wait until the consumer owns its queues and receives.
            deadline = time.monotonic() + 30
            while not warmed.is_set() and time.monotonic() < deadline:
                for _ in range(4):
                    producer.send(Message(topic, b"warm"))
                warmed.wait(0.05)
        # As a latency-minded application does once its clients run (docs/hot-path.md).
        freeze_startup_heap()
        paced_producer("ferrymq", namesrv, topic, seconds, rate)
        finished.wait(60)
    return latencies


_PACED_CHILD = """
import sys, time
sys.path[:0] = {paths!r}
from bench.e2e_bench import paced_send
paced_send({kind!r}, {addr!r}, {target!r}, {seconds!r}, {rate!r})
"""


def paced_producer(kind: str, addr: str, target: str, seconds: float, rate: int) -> None:
    """The producer of the latency run is its own process, as in a deployment: a producer and
    a consumer sharing one interpreter would measure their contention for its lock instead.
    CLOCK_MONOTONIC (perf_counter_ns) is system-wide, so timestamps compare across processes."""
    code = _PACED_CHILD.format(paths=sys.path, kind=kind, addr=addr, target=target, seconds=seconds,
                               rate=rate)
    subprocess.run([sys.executable, "-c", code], check=True, timeout=seconds + 60)


def paced_send(kind: str, addr: str, target: str, seconds: float, rate: int) -> None:
    pad = b"x" * (BODY_SIZE - 20)
    if kind == "ferrymq":
        with Producer("bench-lat", addr) as producer:
            producer.send(Message(target, b"warm"))
            freeze_startup_heap()
            # Results are counted, not kept: tens of thousands of live futures would make the
            # collector's full passes (tens of ms each, every message waiting) part of the figure.
            # Counted by appending to a list (atomic), not with a Semaphore: a release is a
            # pure-Python Condition on the client's loop thread for every message.
            total = int(seconds * rate)
            settled: list[None] = []
            errors: list[BaseException] = []

            def finished(f: Any) -> None:
                if f.exception() is not None:
                    errors.append(f.exception())
                settled.append(None)

            for _ in paced(seconds, rate):
                producer.send_async(
                    Message(target, b"%020d" % time.perf_counter_ns() + pad)
                ).add_done_callback(finished)
            deadline = time.monotonic() + 30
            while len(settled) < total:
                if time.monotonic() > deadline:
                    raise RuntimeError("paced sends did not all finish within 30 s")
                time.sleep(0.001)
            if errors:
                raise RuntimeError(f"{len(errors)} paced sends failed: {errors[0]}")
    elif kind != "redis":
        # A peer module of its own (bench/nats_peer.py, bench/rabbitmq_peer.py).
        importlib.import_module(f"bench.{kind}_peer").paced_send(addr, target, seconds, rate)
    else:
        import redis

        host, port = addr.rsplit(":", 1)
        r = redis.Redis(host=host, port=int(port))
        for _ in paced(seconds, rate):
            r.xadd(target, {"b": b"%020d" % time.perf_counter_ns() + pad})
        r.close()


def ferrymq_runs(quick: bool) -> dict[str, list[float]]:
    sz = sizes(quick)
    out = empty_runs()
    for run in range(RUNS):
        with (
            tempfile.TemporaryDirectory(prefix="ferrymq-bench-") as tmp,
            ferrymq_server(Path(tmp)) as namesrv,
        ):
            with AdminClient(namesrv) as admin:
                admin.create_topic("bench", 4)
                admin.create_topic("bench-b", 4)
                for rate in RATES:
                    admin.create_topic(f"bench-lat{rate}", 4)
            if not LATENCY_ONLY:
                out["produce"].append(ferrymq_produce(namesrv, "bench", sz.messages))
                out["produce_batch"].append(
                    ferrymq_produce_batches(namesrv, "bench-b", sz.messages)
                )
                out["consume"].append(
                    ferrymq_consume(namesrv, "bench", f"bench-c{run}", sz.messages + 1)
                )
                out["consume_batch"].append(
                    ferrymq_consume(namesrv, "bench", f"bench-cb{run}", sz.messages + 1, BATCH)
                )
            def latency_at(rate: int, run: int = run) -> list[float]:
                return ferrymq_latency(namesrv, f"bench-lat{rate}", f"bench-l{rate}-{run}",
                                       sz.latency_seconds, rate)

            record_latencies(out, latency_at)
    return out


# --- Redis Streams ---------------------------------------------------------------------------
def redis_binary() -> str:
    return server_binary("redis-server")


@contextlib.contextmanager
def redis_server(tmp: Path) -> Iterator[Any]:
    import redis

    port = free_port()
    proc = subprocess.Popen(
        [
            redis_binary(),
            "--port",
            str(port),
            "--bind",
            "127.0.0.1",
            "--dir",
            str(tmp),
            "--appendonly",
            "yes",
            "--appendfsync",
            "everysec",
            "--save",
            "",
            "--daemonize",
            "no",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    client = redis.Redis(host="127.0.0.1", port=port)
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                client.ping()
                break
            except redis.ConnectionError:
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise RuntimeError("redis-server did not start") from None
                time.sleep(0.05)
        yield client
    finally:
        client.close()
        proc.terminate()
        proc.wait(30)


def redis_produce(r: Any, stream: str, n: int) -> float:
    body = b"x" * BODY_SIZE
    began = time.perf_counter()
    sent = 0
    while sent < n:
        pipe = r.pipeline(transaction=False)
        for _ in range(min(WINDOW, n - sent)):
            pipe.xadd(stream, {"b": body})
        pipe.execute()
        sent += min(WINDOW, n - sent)
    return n / (time.perf_counter() - began)


def redis_produce_batches(r: Any, stream: str, n: int) -> float:
    body = b"x" * BODY_SIZE
    began = time.perf_counter()
    for _ in range(n // BATCH):
        pipe = r.pipeline(transaction=False)
        for _ in range(BATCH):
            pipe.xadd(stream, {"b": body})
        pipe.execute()
    return (n // BATCH) * BATCH / (time.perf_counter() - began)


def redis_consume(r: Any, stream: str, group: str, n: int) -> float:
    r.xgroup_create(stream, group, id="0")
    began = time.perf_counter()
    done = 0
    while done < n:
        resp = r.xreadgroup(group, "c1", {stream: ">"}, count=32, block=1000)
        if not resp:
            continue
        ids = [mid for mid, _ in resp[0][1]]
        r.xack(stream, group, *ids)
        done += len(ids)
    return n / (time.perf_counter() - began)


def redis_latency(r: Any, stream: str, seconds: float, rate: int) -> list[float]:
    r.xgroup_create(stream, "lat", id="$", mkstream=True)
    expected = int(seconds * rate)
    latencies: list[float] = []
    consumer = r.__class__(connection_pool=r.connection_pool)

    def consume() -> None:
        while len(latencies) < expected:
            resp = consumer.xreadgroup("lat", "c1", {stream: ">"}, count=32, block=1000)
            if not resp:
                continue
            now = time.perf_counter_ns()
            ids = []
            for mid, fields in resp[0][1]:
                latencies.append((now - int(fields[b"b"][:20])) / 1e6)
                ids.append(mid)
            consumer.xack(stream, "lat", *ids)

    t = threading.Thread(target=consume, daemon=True)
    t.start()
    kwargs = r.connection_pool.connection_kwargs
    paced_producer("redis", f"{kwargs['host']}:{kwargs['port']}", stream, seconds, rate)
    t.join(60)
    return latencies


def redis_runs(quick: bool) -> dict[str, list[float]]:
    sz = sizes(quick)
    out = empty_runs()
    for _ in range(RUNS):
        with (
            tempfile.TemporaryDirectory(prefix="ferrymq-bench-redis-") as tmp,
            redis_server(Path(tmp)) as r,
        ):
            if not LATENCY_ONLY:
                out["produce"].append(redis_produce(r, "bench", sz.messages))
                out["produce_batch"].append(redis_produce_batches(r, "bench-b", sz.messages))
                out["consume"].append(redis_consume(r, "bench", "g", sz.messages))
                # The same peer figure: XREADGROUP already hands out 32 at a time.
                out["consume_batch"].append(out["consume"][-1])
            record_latencies(out, lambda rate: redis_latency(r, f"bench-lat{rate}", sz.latency_seconds, rate))
    return out


# --- rows ------------------------------------------------------------------------------------
MEASUREMENTS: list[tuple[str, str, str]] = [
    ("produce", f"produce throughput, 1 KiB messages, async flush, {WINDOW} in flight", "msg/s"),
    ("produce_batch", f"produce throughput, batches of {BATCH} (peer: pipelines of {BATCH})", "msg/s"),
    ("consume", "consume-with-ack throughput, 1 KiB messages, listener batch 1", "msg/s"),
    ("consume_batch", f"consume-with-ack throughput, listener batches of {BATCH}", "msg/s"),
] + [
    (f"{q}@{rate}", f"end-to-end latency {q} at {rate} msg/s", "ms")
    for rate in RATES
    for q in ("p50", "p99")
]


def empty_runs() -> dict[str, list[float]]:
    return {key: [] for key, _, _ in MEASUREMENTS}


def _median(values: list[float]) -> float:
    return round(statistics.median(values), 2) if values else float("nan")


# The peers beside Redis (here): modules with NAME and runs(quick), bench/nats_peer.py and
# bench/rabbitmq_peer.py. FERRYMQ_BENCH_PEERS="redis" (a comma list of redis, nats, rabbitmq)
# runs fewer, for A/B runs of ferrymq alone.
PEER_MODULES = ("nats", "rabbitmq")
SELECTED_PEERS = tuple(os.environ.get("FERRYMQ_BENCH_PEERS", "redis,nats,rabbitmq").split(","))


def all_peer_runs(quick: bool) -> dict[str, dict[str, list[float]] | str]:
    """Each selected peer's runs by its name, or the error that stopped it: a peer is context,
    its absence must not hide our numbers nor the other peers'."""
    out: dict[str, dict[str, list[float]] | str] = {}
    runners: list[tuple[str, Any]] = []
    if "redis" in SELECTED_PEERS:
        runners.append((PEER, redis_runs))
    for kind in PEER_MODULES:
        if kind in SELECTED_PEERS:
            module = importlib.import_module(f"bench.{kind}_peer")
            runners.append((module.NAME, module.runs))
    for name, runs in runners:
        try:
            out[name] = runs(quick)
        except Exception as exc:
            out[name] = f"{type(exc).__name__}: {exc}"
    return out


def peer_fields(key: str, unit: str, peers: dict[str, dict[str, list[float]] | str]) -> dict[str, Any]:
    """A row's peer fields: every peer's median (`peers`) and runs, and the best of them as
    `peer` / `peer_name` / `peer_runs`, the figure the ratio is taken against."""
    # NaN runs: a rate the peer's client could not publish at (no figure).
    medians = {name: _median([v for v in r[key] if v == v]) for name, r in peers.items()
               if not isinstance(r, str)}
    medians = {name: v for name, v in medians.items() if v == v}
    fields: dict[str, Any] = {
        "peers": medians,
        "peers_runs": {name: [round(v, 2) for v in r[key]] for name, r in peers.items()
                       if not isinstance(r, str)},
    }
    errors = {name: r for name, r in peers.items() if isinstance(r, str)}
    if errors:
        fields["peer_errors"] = errors
    if not medians:
        fields.update(peer=None, peer_name=", ".join(peers),
                      peer_error="; ".join(errors.values()))
        return fields
    pick = min if unit == "ms" else max
    best = pick(medians, key=lambda name: medians[name])
    fields.update(peer=medians[best], peer_name=best, peer_runs=fields["peers_runs"][best])
    return fields


def run(quick: bool) -> list[dict[str, Any]]:
    ours = ferrymq_runs(quick)
    peers = all_peer_runs(quick)
    rows: list[dict[str, Any]] = []
    for key, measurement, unit in MEASUREMENTS:
        if LATENCY_ONLY and key in THROUGHPUT_KEYS:
            continue
        row: dict[str, Any] = {
            "area": "e2e clients",
            "measurement": measurement,
            "value": _median(ours[key]),
            "unit": unit,
            "target": TARGETS[key],
            "runs": [round(v, 2) for v in ours[key]],
        }
        row.update(peer_fields(key, unit, peers))
        rows.append(row)
    return rows


def main(argv: list[str] | None = None) -> int:
    import json

    quick = "--quick" in (argv if argv is not None else sys.argv[1:])
    for row in run(quick):
        print(json.dumps(row))
    return 0


if __name__ == "__main__":
    sys.exit(main())
