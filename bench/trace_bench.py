"""Message trace on against off, in the same run: two `ferrymq standalone` servers, one with
trace_enable = true (every put batch, pull and offset move buffered, written as batched trace
records to RMQ_SYS_TRACE_TOPIC every 50 ms), one with trace_enable = false.

- produce throughput of 1 KiB messages (send_async with a window of 512),
- batched send: SEND_BATCH_MESSAGE of 32 x 1 KiB, 8 requests in flight (the path where
  per-message trace work would show most),
- consume-with-ack throughput (push consumer, listener batches of 32, and of 1, the default:
  pulls and commits are traced), and the server's CPU per message consumed with batches of 32
  (its /proc figures around each run).

Runs alternate between the two servers so drift on the machine hits both alike. `value` is
trace on, the peer trace off; the ratio is the share of throughput trace keeps. A last row
gives how many trace records (stored messages) the traced server wrote per 1000 messages."""

from __future__ import annotations

import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.broker_bench import _send as batch_send
from bench.e2e_bench import ferrymq_consume, ferrymq_produce
from bench.proc import process_cpu

from ferrymq import AdminClient
from ferrymq.broker.trace import TRACE_TOPIC
from ferrymq.common.codes import RequestCode
from ferrymq.embedded import standalone
from ferrymq.remoting import ClientConfig, RemotingClient, RemotingCommand
from ferrymq.remoting.loop import new_event_loop

RUNS = 3
CHUNK = 256  # pulls per trace flush in the CPU measurement
TOPIC = "trace-bench"
BATCH_TOPIC = "trace-bench-batch"


def _on_loop(coro_fn: Any) -> Any:
    loop = new_event_loop()
    try:
        return loop.run_until_complete(coro_fn())
    finally:
        loop.close()


def batched(broker: str, n_batches: int) -> float:
    async def go() -> float:
        client = RemotingClient(ClientConfig())
        try:
            return await batch_send(client, broker, BATCH_TOPIC, n_batches)
        finally:
            await client.close()

    return float(_on_loop(go))


def trace_records(broker: str) -> int:
    async def go() -> int:
        client = RemotingClient(ClientConfig())
        try:
            req = RemotingCommand.request(RequestCode.GET_MAX_OFFSET,
                                          ext_fields={"topic": TRACE_TOPIC, "queueId": "0"})
            resp = await client.invoke(broker, req, 5.0)
            return int(resp.ext_fields.get("offset", "0"))
        finally:
            await client.close()

    return int(_on_loop(go))


def cpu_cost(n: int, trace: bool) -> tuple[float, float]:
    """(µs per pull + commit on the request path, µs per pull + commit for the writer): a
    broker in this process, pull events emitted as the pull processor emits them, offsets
    committed as a consumer commits them (8 queues, each one's pulls following each other),
    then the buffer written. CPU time of the loop's thread, not wall time: other processes on
    a shared machine do not count."""
    from ferrymq.broker.config import BrokerConfig
    from ferrymq.broker.controller import Broker
    from ferrymq.broker.events import MessageEvent, MessageEventKind
    from ferrymq.namesrv.server import NameServer, NamesrvConfig

    async def go(store: Path) -> tuple[float, float]:
        namesrv = NameServer(NamesrvConfig(port=0))
        await namesrv.start()
        broker = Broker(BrokerConfig(store_dir=store, listen_port=0, namesrv_addr=namesrv.address,
                                     grpc_listen_port=-1, trace_max_buffered=2 * n + 1,
                                     trace_enable=trace))
        await broker.start()
        try:
            recorder = broker.trace
            if recorder is not None:
                await recorder.flush()
            # As the writer does, every few milliseconds' worth of pulls becomes records:
            # the two sides are timed apart.
            hot_s = writer_s = 0.0
            for chunk in range(0, n, CHUNK):
                began = time.thread_time()
                for i in range(chunk, min(n, chunk + CHUNK)):
                    offset = i // 8 * 32
                    # What pull.py does per pull that found messages.
                    if broker.trace is not None:
                        broker.trace.delivered("t", i % 8, offset, offset + 32, "g",
                                               "127.0.0.1:5000")
                    if broker.events.wants(MessageEventKind.DELIVERED):
                        broker.events.emit(MessageEvent(
                            MessageEventKind.DELIVERED, "t", i % 8, offset, count=32, group="g",
                            client="127.0.0.1:5000"))
                    broker.offsets.commit("g", "t", i % 8, offset + 32)
                hot_s += time.thread_time() - began
                if recorder is not None:
                    began = time.thread_time()
                    await recorder.flush()
                    writer_s += time.thread_time() - began
            return hot_s / n * 1e6, writer_s / n * 1e6
        finally:
            await broker.stop()
            await namesrv.stop()

    with tempfile.TemporaryDirectory(prefix="ferrymq-trace-cpu-") as tmp:
        return tuple(_on_loop(lambda: go(Path(tmp) / "store")))  # type: ignore[return-value]


def run(quick: bool) -> list[dict[str, Any]]:
    n = 5_000 if quick else 30_000
    n_batches = 200 if quick else 1500
    results: dict[tuple[str, bool], list[float]] = {}
    records_per_1000 = 0.0
    with tempfile.TemporaryDirectory(prefix="ferrymq-trace-bench-") as tmp:
        home = Path(tmp)
        confs = {}
        for on in (True, False):
            conf = home / f"trace-{on}.toml"
            conf.write_text(f"trace_enable = {'true' if on else 'false'}\n")
            confs[on] = conf
        with standalone(home / "on", "--config", str(confs[True])) as on_server, \
                standalone(home / "off", "--config", str(confs[False])) as off_server:
            servers = {True: on_server.namesrv, False: off_server.namesrv}
            pids = {True: on_server.proc.pid, False: off_server.proc.pid}
            brokers = {}
            for on, namesrv in servers.items():
                with AdminClient(namesrv) as admin:
                    admin.create_topic(TOPIC, 4)
                    admin.create_topic(BATCH_TOPIC, 4)
                    brokers[on] = next(iter(admin.brokers().values()))
            for i in range(RUNS):
                for on in (i % 2 == 0, i % 2 != 0):
                    namesrv = servers[on]
                    results.setdefault(("produce", on), []).append(ferrymq_produce(namesrv, TOPIC, n))
                    results.setdefault(("batch", on), []).append(batched(brokers[on], n_batches))
                    cpu = process_cpu(pids[on])
                    results.setdefault(("consume", on), []).append(
                        ferrymq_consume(namesrv, TOPIC, f"trace-bench-g{i}", n, 32))
                    results.setdefault(("consume_cpu", on), []).append(
                        (process_cpu(pids[on]) - cpu) / n * 1e6)
                    # The default listener batch of 1: the same pulls, more offset commits.
                    results.setdefault(("consume1", on), []).append(
                        ferrymq_consume(namesrv, TOPIC, f"trace-bench-g1-{i}", n, 1))
            time.sleep(0.2)  # the last flush interval's records
            total_msgs = RUNS * (n + 1 + n_batches * 32)
            records_per_1000 = 1000 * trace_records(brokers[True]) / total_msgs
    rows = []
    for what, label in (("produce", "produce 1 KiB, send_async window 512"),
                        ("batch", "batched send 32 x 1 KiB, 8 in flight"),
                        ("consume", "consume with ack, push consumer, batches of 32"),
                        ("consume1", "consume with ack, push consumer, listener batch 1")):
        on_runs, off_runs = results[(what, True)], results[(what, False)]
        rows.append({"workload": "trace", "measurement": f"{label}, trace on", "unit": "msg/s",
                     "value": statistics.median(on_runs), "runs": on_runs,
                     "peer_name": "trace off", "peer_value": statistics.median(off_runs),
                     "peer_runs": off_runs})
    # Steadier than the throughput on a shared machine: what the server spent per message.
    on_cpu, off_cpu = results[("consume_cpu", True)], results[("consume_cpu", False)]
    rows.append({"workload": "trace", "unit": "µs",
                 "measurement": "server CPU per message consumed (batches of 32), trace on",
                 "value": statistics.median(on_cpu), "runs": on_cpu, "peer_name": "trace off",
                 "peer_value": statistics.median(off_cpu), "peer_runs": off_cpu})
    hot_on: list[float] = []
    hot_off: list[float] = []
    writer_runs: list[float] = []
    for _ in range(RUNS):
        for trace in (True, False):
            hot, writer = cpu_cost(20_000 if quick else 100_000, trace)
            (hot_on if trace else hot_off).append(hot)
            if trace:
                writer_runs.append(writer)
    rows.append({"workload": "trace", "unit": "µs",
                 "measurement": "request-path CPU per pull + offset commit, trace on",
                 "value": statistics.median(hot_on), "runs": hot_on, "peer_name": "trace off",
                 "peer_value": statistics.median(hot_off), "peer_runs": hot_off})
    rows.append({"workload": "trace", "unit": "µs",
                 "measurement": "writer CPU per pull + commit (records built, stored, indexed)",
                 "value": statistics.median(writer_runs), "runs": writer_runs})
    rows.append({"workload": "trace", "measurement": "trace records written per 1000 messages",
                 "unit": "records", "value": round(records_per_1000, 2), "runs": [records_per_1000]})
    return rows


if __name__ == "__main__":
    import json
    import sys

    for r in run("--quick" in sys.argv):
        print(json.dumps(r))
