"""Broker throughput and latency over TCP from this (second) process, against a real
`ferrymq standalone` with async flush, beside Redis measured in the same run:

- batched send: SEND_BATCH_MESSAGE of 32 x 1 KiB, 8 requests in flight
  (peer: pipelined XADD of 32 x 1 KiB, 8 pipelines' worth in flight is not possible with
  redis-py, so one pipeline of 32 at a time);
- pull: PULL_MESSAGE of up to 256 messages from 4 queues in parallel, records counted
  without decoding (peer: XRANGE COUNT 256);
- request round trip: sequential GET_MAX_OFFSET, p50 (peer: PING with redis-py).

`run(quick)` returns rows of the bench harness: the median of 3 runs for each measurement.
"""

from __future__ import annotations

import asyncio
import statistics
import struct
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.e2e_bench import ferrymq_server, percentile, redis_server

from ferrymq.client.admin import AdminClient
from ferrymq.common.codes import RequestCode, ResponseCode
from ferrymq.common.message import MessageBatchItem
from ferrymq.common.record import encode_batch
from ferrymq.remoting import ClientConfig, RemotingClient, RemotingCommand
from ferrymq.remoting.loop import new_event_loop

BODY = b"x" * 1024
BATCH = 32
IN_FLIGHT = 8
QUEUES = 4
PULL_MAX = 256
RUNS = 3
PEER = "Redis 7 (redis-py + hiredis)"
TARGETS = {"send": 200_000.0, "pull": 300_000.0, "rtt": 150.0}
_I32 = struct.Struct(">i")


def _count_records(body: bytes) -> int:
    n, pos = 0, 0
    while pos + 4 <= len(body):
        (size,) = _I32.unpack_from(body, pos)
        pos += size
        n += 1
    return n


async def _send(client: RemotingClient, broker: str, topic: str, n_batches: int) -> float:
    body = encode_batch([MessageBatchItem(0, BODY, {"UNIQ_KEY": f"b{i:08d}"}) for i in range(BATCH)])
    ext = {"a": "bench", "b": topic, "c": "TBW102", "d": str(QUEUES), "e": "0", "f": "0", "g": "0",
           "h": "0", "i": "", "j": "0", "k": "false", "m": "true"}
    next_batch = 0

    async def worker(q: int) -> None:
        nonlocal next_batch
        while next_batch < n_batches:
            next_batch += 1
            fields = dict(ext, e=str(q % QUEUES), g=str(int(time.time() * 1000)))
            req = RemotingCommand.request(RequestCode.SEND_BATCH_MESSAGE, ext_fields=fields, body=body)
            resp = await client.invoke(broker, req, 10.0)
            if resp.code != ResponseCode.SUCCESS:
                raise RuntimeError(f"batch send failed: {resp.code} {resp.remark}")

    began = time.perf_counter()
    await asyncio.gather(*(worker(i) for i in range(IN_FLIGHT)))
    return n_batches * BATCH / (time.perf_counter() - began)


async def _pull(client: RemotingClient, broker: str, topic: str) -> float:
    total = 0

    async def one_queue(q: int) -> None:
        nonlocal total
        offset = 0
        while True:
            req = RemotingCommand.request(RequestCode.PULL_MESSAGE, ext_fields={
                "consumerGroup": "bench-g", "topic": topic, "queueId": str(q), "queueOffset": str(offset),
                "maxMsgNums": str(PULL_MAX), "sysFlag": "4", "commitOffset": "0",
                "suspendTimeoutMillis": "0", "subscription": "*", "subVersion": "0"})
            resp = await client.invoke(broker, req, 10.0)
            if resp.code != ResponseCode.SUCCESS:
                return
            total += _count_records(resp.body or b"")
            offset = int(resp.ext_fields["nextBeginOffset"])

    began = time.perf_counter()
    await asyncio.gather(*(one_queue(q) for q in range(QUEUES)))
    return total / (time.perf_counter() - began)


async def _rtt(client: RemotingClient, broker: str, topic: str, n: int) -> float:
    samples = []
    for _ in range(n):
        req = RemotingCommand.request(RequestCode.GET_MAX_OFFSET, ext_fields={"topic": topic, "queueId": "0"})
        t0 = time.perf_counter()
        await client.invoke(broker, req, 5.0)
        samples.append((time.perf_counter() - t0) * 1e6)
    return percentile(samples, 0.5)


def ferrymq_runs(quick: bool) -> dict[str, list[float]]:
    n_batches = 300 if quick else 3000
    out: dict[str, list[float]] = {"send": [], "pull": [], "rtt": []}
    for run_no in range(RUNS):
        with tempfile.TemporaryDirectory(prefix="ferrymq-bench-") as tmp, ferrymq_server(Path(tmp)) as ns:
            topic = f"bench-{run_no}"
            with AdminClient(ns) as admin:
                admin.create_topic(topic, QUEUES)
                broker = next(iter(admin.brokers().values()))

            async def go(broker: str = broker, topic: str = topic) -> None:
                client = RemotingClient(ClientConfig())
                try:
                    out["send"].append(await _send(client, broker, topic, n_batches))
                    out["pull"].append(await _pull(client, broker, topic))
                    out["rtt"].append(await _rtt(client, broker, topic, 500 if quick else 5000))
                finally:
                    await client.close()

            loop = new_event_loop()
            try:
                loop.run_until_complete(go())
            finally:
                loop.close()
    return out


def redis_runs(quick: bool) -> dict[str, list[float]]:
    n_batches = 300 if quick else 3000
    out: dict[str, list[float]] = {"send": [], "pull": [], "rtt": []}
    for _ in range(RUNS):
        with tempfile.TemporaryDirectory(prefix="ferrymq-bench-redis-") as tmp, redis_server(Path(tmp)) as r:
            began = time.perf_counter()
            for _ in range(n_batches):
                pipe = r.pipeline(transaction=False)
                for _ in range(BATCH):
                    pipe.xadd("s", {"b": BODY})
                pipe.execute()
            out["send"].append(n_batches * BATCH / (time.perf_counter() - began))
            began, last, total = time.perf_counter(), "-", 0
            while True:
                got = r.xrange("s", min=last if last == "-" else f"({last}", count=PULL_MAX)
                if not got:
                    break
                total += len(got)
                last = got[-1][0].decode()
            out["pull"].append(total / (time.perf_counter() - began))
            samples = []
            for _ in range(500 if quick else 5000):
                t0 = time.perf_counter()
                r.ping()
                samples.append((time.perf_counter() - t0) * 1e6)
            out["rtt"].append(percentile(samples, 0.5))
    return out


def run(quick: bool) -> list[dict[str, Any]]:
    ours = ferrymq_runs(quick)
    try:
        theirs: dict[str, list[float]] = redis_runs(quick)
        peer_error = ""
    except Exception as exc:  # the peer missing must not hide our own figures
        theirs, peer_error = {}, f"{type(exc).__name__}: {exc}"
    names = {
        "send": ("batched send, 32 x 1 KiB per request, async flush", "msgs/s"),
        "pull": (f"pull, up to {PULL_MAX} per request, 4 queues", "msgs/s"),
        "rtt": ("request round trip on loopback, p50", "µs"),
    }
    rows = []
    for key, (measurement, unit) in names.items():
        row: dict[str, Any] = {
            "workload": "broker", "measurement": measurement, "unit": unit,
            "value": round(statistics.median(ours[key]), 2), "runs": [round(v, 2) for v in ours[key]],
            "target": (">= " if key != "rtt" else "<= ") + f"{TARGETS[key]:g} {unit}", "peer_name": PEER,
        }
        if theirs:
            row["peer_value"] = round(statistics.median(theirs[key]), 2)
            row["peer_runs"] = [round(v, 2) for v in theirs[key]]
        else:
            row["peer_error"] = peer_error
        rows.append(row)
    return rows


if __name__ == "__main__":
    import json

    for r in run("--quick" in sys.argv):
        print(json.dumps(r))
