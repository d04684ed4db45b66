"""What one request costs on its own: the server's CPU for a lone 1 KiB send (a blocking
`Producer.send`, one at a time), back to back and with a pause between sends, the same for
Redis (one `XADD` a round trip, redis-py) and for the floor of any asyncio server in Python
here (a uvloop echo of 1 KiB), in the same run; and a batch of 32 on its own.

This is the figure behind the rows a lone request decides: latency at a low rate (each
message is a request of its own) and `send_batch` one call at a time. A message in a stream
of pipelined sends costs the broker about 12 µs; a lone one costs it the whole path of a
request, run with caches that the pause (or the other process) has emptied.

Each system runs in a process of its own. Its CPU is the sum of its threads' run time in
nanoseconds (/proc/<pid>/task/*/schedstat; /proc's stat counts 10 ms ticks, coarser than a
peer's whole run), less what it spends idle (timers), measured for a second before each row.
Rows are medians of RUNS runs; lower is better in every row; the ratio is against the best
peer of the row."""

from __future__ import annotations

import contextlib
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from bench.e2e_bench import redis_server
from bench.proc import process_cpu_ns

from ferrymq import Message, Producer
from ferrymq.embedded import standalone

RUNS = 3
BODY = b"x" * 1024
BATCH = 32
PAUSE_S = 0.002  # between lone sends: the machine idles as it does at a low message rate
TOPIC = "request-cost"

_ECHO = """
import asyncio, sys, uvloop
class Echo(asyncio.Protocol):
    def connection_made(self, t): self.t = t
    def data_received(self, d): self.t.write(d)
async def main():
    srv = await asyncio.get_running_loop().create_server(Echo, "127.0.0.1", 0)
    print(srv.sockets[0].getsockname()[1], flush=True)
    await asyncio.Event().wait()
uvloop.run(main())
"""


IDLE_S = 1.0


def _measure(request: Callable[[], object], server_pid: int, n: int, pause_s: float) -> tuple[float, float]:
    """(the server's CPU per request, its idle share taken out; the median round trip), µs."""
    idle0 = process_cpu_ns(server_pid)
    time.sleep(IDLE_S)
    idle_rate = (process_cpu_ns(server_pid) - idle0) / IDLE_S  # ns of CPU a second with nothing to do
    rtts: list[float] = []
    cpu0, began_all = process_cpu_ns(server_pid), time.perf_counter()
    for _ in range(n):
        began = time.perf_counter()
        request()
        rtts.append(time.perf_counter() - began)
        if pause_s:
            time.sleep(pause_s)
    cpu = process_cpu_ns(server_pid) - cpu0 - idle_rate * (time.perf_counter() - began_all)
    return max(cpu, 0.0) / n / 1e3, statistics.median(rtts) * 1e6


def ferrymq_run(n: int) -> dict[str, float]:
    with tempfile.TemporaryDirectory(prefix="ferrymq-request-cost-") as tmp, standalone(tmp) as server, \
            Producer("request-cost", server.namesrv) as producer:
        pid = server.proc.pid
        for _ in range(300):  # the topic's route, the connection, the first segment's pages
            producer.send(Message(TOPIC, BODY))
        out: dict[str, float] = {}
        out["cpu"], out["rtt"] = _measure(lambda: producer.send(Message(TOPIC, BODY)), pid, n, 0.0)
        out["cpu_paused"], out["rtt_paused"] = _measure(lambda: producer.send(Message(TOPIC, BODY)), pid, n, PAUSE_S)
        batch = [Message(TOPIC, BODY) for _ in range(BATCH)]
        out["cpu_batch"], out["rtt_batch"] = _measure(lambda: producer.send_batch(batch), pid, n // 4, 0.0)
        return out


def redis_run(n: int) -> dict[str, float]:
    with tempfile.TemporaryDirectory(prefix="ferrymq-request-cost-redis-") as tmp, redis_server(Path(tmp)) as r:
        pid = int(r.info("server")["process_id"])
        for _ in range(300):
            r.xadd(TOPIC, {"b": BODY})
        out: dict[str, float] = {}
        out["cpu"], out["rtt"] = _measure(lambda: r.xadd(TOPIC, {"b": BODY}), pid, n, 0.0)
        out["cpu_paused"], out["rtt_paused"] = _measure(lambda: r.xadd(TOPIC, {"b": BODY}), pid, n, PAUSE_S)

        def pipeline() -> None:
            pipe = r.pipeline(transaction=False)
            for _ in range(BATCH):
                pipe.xadd(TOPIC, {"b": BODY})
            pipe.execute()

        out["cpu_batch"], out["rtt_batch"] = _measure(pipeline, pid, n // 4, 0.0)
        return out


@contextlib.contextmanager
def echo_server() -> Iterator[tuple[int, int]]:
    proc = subprocess.Popen([sys.executable, "-c", _ECHO], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        yield proc.pid, int(proc.stdout.readline())
    finally:
        proc.kill()
        proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()


def echo_run(n: int) -> dict[str, float]:
    with echo_server() as (pid, port), socket.create_connection(("127.0.0.1", port)) as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

        def echo() -> None:
            sock.sendall(BODY)
            got = 0
            while got < len(BODY):
                chunk = sock.recv(65536)
                if not chunk:
                    raise RuntimeError("the echo server closed the connection")
                got += len(chunk)

        for _ in range(300):
            echo()
        out: dict[str, float] = {}
        out["cpu"], out["rtt"] = _measure(echo, pid, n, 0.0)
        out["cpu_paused"], out["rtt_paused"] = _measure(echo, pid, n, PAUSE_S)
        return out


MEASUREMENTS = [
    ("cpu", "server CPU per lone 1 KiB send, back to back", "µs"),
    ("cpu_paused", f"server CPU per lone 1 KiB send, {PAUSE_S * 1000:g} ms apart", "µs"),
    ("rtt", "round trip of a lone send, back to back (median)", "µs"),
    ("rtt_paused", f"round trip of a lone send, {PAUSE_S * 1000:g} ms apart (median)", "µs"),
    ("cpu_batch", f"server CPU per batch of {BATCH} (`send_batch`; Redis: a pipeline of {BATCH})", "µs"),
    ("rtt_batch", f"round trip of a batch of {BATCH} (median)", "µs"),
]


def run(quick: bool) -> list[dict[str, Any]]:
    n = 500 if quick else 2000
    runs: dict[str, list[dict[str, float]]] = {"ferrymq": [], "redis": [], "python echo": []}
    for _ in range(1 if quick else RUNS):  # alternated, so drift on the machine hits all alike
        runs["ferrymq"].append(ferrymq_run(n))
        runs["redis"].append(redis_run(n))
        runs["python echo"].append(echo_run(n))
    rows: list[dict[str, Any]] = []
    for key, measurement, unit in MEASUREMENTS:
        ours = [r[key] for r in runs["ferrymq"]]
        peers = {name: statistics.median(r[key] for r in results)
                 for name, results in runs.items() if name != "ferrymq" and key in results[0]}
        best = min(peers, key=lambda name: peers[name])
        rows.append({"area": "request cost", "measurement": measurement, "unit": unit,
                     "value": statistics.median(ours), "runs": [round(v, 1) for v in ours],
                     "peer": peers[best], "peer_name": best, "peers": peers})
    return rows


def main() -> int:
    import json

    for row in run("--quick" in sys.argv[1:]):
        print(json.dumps(row))
    return 0


if __name__ == "__main__":
    sys.exit(main())
