"""The RocketMQ 5 front: throughput through the official Python SDK (rocketmq-python-client, gRPC,
run from tests/compat/py5/.venv by tests/compat/py5/sdk.py) against ferrymq's own 4.x clients
on the same broker in the same run (the peer column):

- send: 1 KiB messages, all in flight (SDK send_async / ferrymq Producer.send_async, a window),
- receive+ack: SDK SimpleConsumer (receive 32, ack each) / ferrymq PushConsumer committing
  offsets, from the first message to the last acknowledged;
- `ferrymq proxy` in front of two broker groups against one broker's own endpoint, same SDK runs
  (target: >= 0.8× each), and where a send's CPU goes: the proxy's, the brokers', the SDK
  process's, and that of a gRPC server that does nothing (bench/grpc_null.py, the floor).

`run(quick)` returns one row per measurement, the median of the runs. Needs `make compat-py5`."""

from __future__ import annotations

import contextlib
import functools
import json
import os
import resource
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ferrymq import AdminClient, ConsumeFromWhere, ConsumeStatus, Message, MessageExt, Producer, PushConsumer
from ferrymq.embedded import standalone
from ferrymq.embedded.process import ServerProcess

ROOT = Path(__file__).resolve().parent.parent
PY5_DIR = ROOT / "tests" / "compat" / "py5"
PY5_PYTHON = PY5_DIR / ".venv" / "bin" / "python"
BODY = "x" * 1024
WINDOW = 512
PEER = "ferrymq 4.x clients (remoting)"


def sdk(endpoint: str, **config: Any) -> dict[str, Any]:
    """One sdk.py run; returns its last event with a count and elapsedMs."""
    proc = subprocess.run([str(PY5_PYTHON), str(PY5_DIR / "sdk.py"),
                           json.dumps({"endpoint": endpoint, "quiet": True, **config})],
                          capture_output=True, text=True, timeout=600)
    events = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    wanted = [e for e in events if e["event"] in ("done", "consumed")]
    if not wanted:
        raise RuntimeError(f"sdk.py {config.get('mode')} failed: {events[-3:]} {proc.stderr[-600:]}")
    last: dict[str, Any] = wanted[-1]
    return last


def sdk_send(endpoint: str, topic: str, n: int) -> float:
    # A window of sends in flight, as ferrymq_send's: with all of them in flight, the last
    # ones outlived the SDK's 5 s request timeout on a loaded host (CANCELLED).
    done = sdk(endpoint, mode="produce", topic=topic, count=n, body=BODY, asyncWindow=WINDOW,
               **{"async": True})
    if done["failed"]:
        raise RuntimeError(f"{done['failed']} SDK sends failed")
    return n / (float(done["elapsedMs"]) / 1000)


def sdk_receive_ack(endpoint: str, topic: str, group: str, n: int) -> float:
    got = sdk(endpoint, mode="simple", topic=topic, group=group, expect=n, batch=32, invisibleSec=60,
              awaitSec=2, idleExitMs=20_000)
    if got["acked"] < n:
        raise RuntimeError(f"SDK acknowledged {got['acked']} of {n}")
    return n / (float(got["elapsedMs"]) / 1000)


def ferrymq_send(namesrv: str, topic: str, n: int) -> float:
    with Producer("grpc-bench-p", namesrv) as producer:
        producer.send(Message(topic, BODY.encode()))
        sem = threading.Semaphore(WINDOW)
        began = time.perf_counter()
        for _ in range(n):
            sem.acquire()
            producer.send_async(Message(topic, BODY.encode())).add_done_callback(lambda _f: sem.release())
        for _ in range(WINDOW):
            sem.acquire()
        return n / (time.perf_counter() - began)


def ferrymq_receive_ack(namesrv: str, topic: str, group: str, n: int) -> float:
    count = [0]
    first: list[float] = []
    lock = threading.Lock()
    finished = threading.Event()
    end = [0.0]

    def listener(msgs: list[MessageExt], _ctx: Any) -> ConsumeStatus:
        with lock:
            if not first:
                first.append(time.perf_counter())
            count[0] += len(msgs)
            if count[0] >= n and not finished.is_set():
                end[0] = time.perf_counter()
                finished.set()
        return ConsumeStatus.CONSUME_SUCCESS

    consumer = PushConsumer(group, namesrv, consume_from_where=ConsumeFromWhere.FIRST_OFFSET)
    consumer.subscribe(topic)
    consumer.register_listener(listener)
    consumer.start()
    try:
        if not finished.wait(300):
            raise RuntimeError(f"consumed {count[0]} of {n}")
    finally:
        consumer.shutdown()
    return n / (end[0] - first[0])


def one_run(namesrv: str, endpoint: str, admin: AdminClient, n: int, i: int) -> dict[str, tuple[float, float]]:
    sdk_topic, our_topic = f"grpc-bench-sdk-{i}", f"grpc-bench-4x-{i}"
    admin.create_topic(sdk_topic, 4)
    admin.create_topic(our_topic, 4)
    # A gRPC group starts at the queues' end: start it (one empty receive) before the sends.
    sdk(endpoint, mode="simple", topic=sdk_topic, group=f"grpc-bench-g{i}", expect=1, idleExitMs=1, awaitSec=1)
    send = (sdk_send(endpoint, sdk_topic, n), ferrymq_send(namesrv, our_topic, n))
    receive = (sdk_receive_ack(endpoint, sdk_topic, f"grpc-bench-g{i}", n + 0),
               ferrymq_receive_ack(namesrv, our_topic, f"grpc-bench-4x-g{i}", n + 1))
    return {"send": send, "receive": receive}


def run(quick: bool) -> list[dict[str, Any]]:
    if not PY5_PYTHON.exists():
        raise RuntimeError("tests/compat/py5/.venv is missing: run `make compat-py5`")
    n, runs = (2_000, 1) if quick else (5_000, 3)
    results: list[dict[str, tuple[float, float]]] = []
    with tempfile.TemporaryDirectory(prefix="ferrymq-grpc-bench-") as tmp, \
            standalone(Path(tmp) / "store") as server, AdminClient(server.namesrv) as admin:
        for i in range(runs):
            results.append(one_run(server.namesrv, server.grpc, admin, n, i))
    rows = []
    for key, measurement in (("send", "send 1 KiB, official Python SDK over gRPC"),
                             ("receive", "receive+ack, SDK SimpleConsumer over gRPC (pop)")):
        ours = [r[key][0] for r in results]
        peer = [r[key][1] for r in results]
        rows.append({
            "workload": "grpc (RocketMQ 5 SDK)", "measurement": measurement, "unit": "msg/s",
            "value": sorted(ours)[len(ours) // 2], "runs": [round(v, 1) for v in ours],
            "peer_name": PEER, "peer_value": sorted(peer)[len(peer) // 2],
            "peer_runs": [round(v, 1) for v in peer],
        })
    return rows + proxy_rows(n, runs)


# --- `ferrymq proxy` (cluster mode) against a broker's own endpoint ------------------------------
PROXY_TARGET = ">= 0.8× the broker's own endpoint"


def _cpu_s(pid: int | None) -> float:
    """User + system CPU seconds of a process so far (/proc/PID/stat utime, stime)."""
    if pid is None:
        return float("nan")
    after_name = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(after_name[11]) + int(after_name[12])) / os.sysconf("SC_CLK_TCK")


@contextlib.contextmanager
def proxy_cluster(base: Path) -> Iterator[tuple[str, list[ServerProcess], ServerProcess]]:
    """A name server, broker groups broker-a and broker-b (each with its own gRPC endpoint) and a
    proxy in front of both: (name server, [broker-a, broker-b], proxy)."""
    logs = base / "logs"
    ns = ServerProcess("namesrv", lambda: ["namesrv", "--port", "0"], logs / "namesrv.log", "namesrv")
    procs = [ns]
    try:
        ns.start()
        addr = ns.ready["namesrv"]
        for name in ("broker-a", "broker-b"):
            argv = ["broker", "--namesrv", addr, "--store-dir", str(base / name), "--broker-name", name,
                    "--broker-port", "0", "--ha-port", "0", "--grpc-port", "0"]
            procs.append(ServerProcess(name, functools.partial(list, argv), logs / f"{name}.log", "broker"))
        procs.append(ServerProcess("proxy", lambda: ["proxy", "--namesrv", addr, "--grpc-port", "0"],
                                   logs / "proxy.log", "proxy grpc"))
        for p in procs[1:]:
            p.start()
        yield addr, procs[1:3], procs[3]
    finally:
        for p in reversed(procs):
            with contextlib.suppress(Exception):
                p.stop()


@contextlib.contextmanager
def null_server() -> Iterator[tuple[str, int]]:
    """bench/grpc_null.py in a process of its own: (its endpoint, its pid)."""
    proc = subprocess.Popen([sys.executable, "-m", "bench.grpc_null"], cwd=ROOT, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        if not line.startswith("null grpc="):
            raise RuntimeError(f"bench.grpc_null did not start: {line!r}")
        yield line.strip().split("=", 1)[1], proc.pid
    finally:
        proc.terminate()
        proc.wait(30)


def _children_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _timed_send(endpoint: str, topic: str, n: int, pids: list[int | None]) -> tuple[float, float, float]:
    """SDK sends: (msg/s, the SDK process's CPU per message, the servers' (pids) CPU per
    message), in microseconds."""
    cpu0, sdk0 = sum(_cpu_s(p) for p in pids), _children_cpu_s()
    rate = sdk_send(endpoint, topic, n)
    cpu1, sdk1 = sum(_cpu_s(p) for p in pids), _children_cpu_s()
    return rate, (sdk1 - sdk0) / n * 1e6, (cpu1 - cpu0) / n * 1e6


def proxy_run(admin: AdminClient, brokers: list[ServerProcess], proxy: ServerProcess, null: tuple[str, int],
              n: int, i: int) -> dict[str, tuple[float, float]]:
    """SDK send and receive+ack through the proxy (a topic on both groups) and through broker-a's
    own endpoint (a topic on broker-a only); the CPU per message of each process of a send, and
    of the proxy in receive+ack; SDK sends to the null server (its CPU: the gRPC floor)."""
    via_proxy, local = f"proxy-bench-{i}", f"proxy-bench-local-{i}"
    admin.create_topic(via_proxy, 4)
    admin.create_topic(local, 4, broker="broker-a")
    broker = brokers[0]
    proxy_ep, broker_ep = proxy.ready["grpc"], broker.ready["grpc"]
    bpids = [b.pid for b in brokers]
    cpu0 = _cpu_s(proxy.pid)
    b0 = sum(_cpu_s(p) for p in bpids)
    send, sdk_cpu, _ = _timed_send(proxy_ep, via_proxy, n, [])
    cpu1 = _cpu_s(proxy.pid)
    brokers_cpu = (sum(_cpu_s(p) for p in bpids) - b0) / n * 1e6
    receive = sdk_receive_ack(proxy_ep, via_proxy, f"proxy-bench-g{i}", n)
    cpu2 = _cpu_s(proxy.pid)
    # The broker's whole process (gRPC front and store) on its own endpoint, for comparison.
    local_send, local_sdk_cpu, local_cpu = _timed_send(broker_ep, local, n, [broker.pid])
    b1 = _cpu_s(broker.pid)
    local_receive = sdk_receive_ack(broker_ep, local, f"proxy-bench-local-g{i}", n)
    b2 = _cpu_s(broker.pid)
    null_send, _, null_cpu = _timed_send(null[0], "null", n, [null[1]])
    return {"send": (send, local_send), "receive": (receive, local_receive),
            "cpu_send": ((cpu1 - cpu0) / n * 1e6, local_cpu),
            "cpu_receive": ((cpu2 - cpu1) / n * 1e6, (b2 - b1) / n * 1e6),
            "cpu_brokers_send": (brokers_cpu, local_cpu), "cpu_sdk_send": (sdk_cpu, local_sdk_cpu),
            "null": (null_send, null_cpu)}


def _median(values: list[float]) -> float:
    return sorted(values)[len(values) // 2]


def proxy_rows(n: int, runs: int) -> list[dict[str, Any]]:
    results: list[dict[str, tuple[float, float]]] = []
    with tempfile.TemporaryDirectory(prefix="ferrymq-proxy-bench-") as tmp, \
            proxy_cluster(Path(tmp)) as (namesrv, brokers, proxy), AdminClient(namesrv) as admin, \
            null_server() as null:
        for i in range(runs):
            results.append(proxy_run(admin, brokers, proxy, null, n, i))
    rows: list[dict[str, Any]] = []

    def row(key: str, measurement: str, unit: str, peer: str, **extra: Any) -> None:
        ours = [r[key][0] for r in results]
        theirs = [r[key][1] for r in results]
        rows.append({"workload": "grpc proxy", "measurement": measurement, "unit": unit,
                     "value": _median(ours), "runs": [round(v, 1) for v in ours], **extra,
                     "peer_name": peer, "peer_value": _median(theirs), "peer_runs": [round(v, 1) for v in theirs]})

    own = "the SDK on broker-a's own gRPC endpoint"
    row("send", "send 1 KiB, SDK through ferrymq proxy (2 broker groups)", "msg/s", own, target=PROXY_TARGET)
    row("receive", "receive+ack, SDK SimpleConsumer through ferrymq proxy across 2 groups", "msg/s", own,
        target=PROXY_TARGET)
    # Where a send's CPU goes: on 2 cores the SDK, the proxy and the brokers share the machine,
    # so the send ratio is about the ratio of these sums.
    endpoint = "broker-a's process on its own endpoint"
    row("cpu_send", "proxy CPU per message, send", "us/msg", endpoint)
    row("cpu_receive", "proxy CPU per message, receive+ack", "us/msg", endpoint)
    row("cpu_brokers_send", "both brokers' CPU per message sent through the proxy (remoting)", "us/msg", endpoint)
    row("cpu_sdk_send", "the SDK process's CPU per message, send through the proxy", "us/msg",
        "the SDK process on broker-a's own endpoint")
    row("null", "SDK send to a gRPC server that does nothing (bench/grpc_null.py)", "msg/s",
        "its CPU per message (us): the floor of a Python gRPC front")
    return rows


def main(argv: list[str] | None = None) -> int:
    """`--quick`: 2,000 messages, one run; `--proxy-only`: the proxy rows alone."""
    args = argv if argv is not None else sys.argv[1:]
    quick = "--quick" in args
    if "--proxy-only" in args:
        if not PY5_PYTHON.exists():
            raise RuntimeError("tests/compat/py5/.venv is missing: run `make compat-py5`")
        rows = proxy_rows(*((2_000, 1) if quick else (5_000, 3)))
    else:
        rows = run(quick)
    for row in rows:
        print(json.dumps(row))
    return 0


if __name__ == "__main__":
    sys.exit(main())
