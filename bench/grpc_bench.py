"""The RocketMQ 5 front: throughput through the official Python SDK (rocketmq-python-client, gRPC,
run from tests/compat/py5/.venv by tests/compat/py5/sdk.py) against ferrymq's own 4.x clients
on the same broker in the same run (the peer column):

- send: 1 KiB messages, all in flight (SDK send_async / ferrymq Producer.send_async, a window),
- receive+ack: SDK SimpleConsumer (receive 32, ack each) / ferrymq PushConsumer committing
  offsets, from the first message to the last acknowledged.

`run(quick)` returns one row per measurement, the median of the runs. Needs `make compat-py5`."""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from ferrymq import AdminClient, ConsumeFromWhere, ConsumeStatus, Message, MessageExt, Producer, PushConsumer
from ferrymq.embedded import standalone

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
    return wanted[-1]


def sdk_send(endpoint: str, topic: str, n: int) -> float:
    done = sdk(endpoint, mode="produce", topic=topic, count=n, body=BODY, **{"async": True})
    if done["failed"]:
        raise RuntimeError(f"{done['failed']} SDK sends failed")
    return n / (done["elapsedMs"] / 1000)


def sdk_receive_ack(endpoint: str, topic: str, group: str, n: int) -> float:
    got = sdk(endpoint, mode="simple", topic=topic, group=group, expect=n, batch=32, invisibleSec=60,
              awaitSec=2, idleExitMs=20_000)
    if got["acked"] < n:
        raise RuntimeError(f"SDK acknowledged {got['acked']} of {n}")
    return n / (got["elapsedMs"] / 1000)


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
    return rows


def main(argv: list[str] | None = None) -> int:
    quick = "--quick" in (argv if argv is not None else sys.argv[1:])
    for row in run(quick):
        print(json.dumps(row))
    return 0


if __name__ == "__main__":
    sys.exit(main())
