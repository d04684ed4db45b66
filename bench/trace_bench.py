"""Message trace on against off, in the same run: two `ferrymq standalone` servers, one with
trace_enable = true (every put batch, pull and offset move buffered, written as batched trace
records to RMQ_SYS_TRACE_TOPIC every 5 ms), one with trace_enable = false.

- produce throughput of 1 KiB messages (send_async with a window of 512),
- batched send: SEND_BATCH_MESSAGE of 32 x 1 KiB, 8 requests in flight (the path where
  per-message trace work would show most),
- consume-with-ack throughput (push consumer, listener batches of 32: pulls and commits are
  traced).

Runs alternate between the two servers so drift on the machine hits both alike. `value` is
trace on, the peer trace off; the ratio is the share of throughput trace keeps. A last row
gives how many trace records (stored messages) the traced server wrote per 1000 messages."""

from __future__ import annotations

import statistics
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from bench.broker_bench import _send as batch_send
from bench.e2e_bench import ferrymq_produce

from ferrymq import AdminClient, ConsumeFromWhere, ConsumeStatus, MessageExt, PushConsumer
from ferrymq.broker.trace import TRACE_TOPIC
from ferrymq.common.codes import RequestCode
from ferrymq.embedded import standalone
from ferrymq.remoting import ClientConfig, RemotingClient, RemotingCommand
from ferrymq.remoting.loop import new_event_loop

RUNS = 3
TOPIC = "trace-bench"
BATCH_TOPIC = "trace-bench-batch"


def consume(namesrv: str, group: str, n: int) -> float:
    count = [0]
    lock = threading.Lock()
    finished = threading.Event()

    def listener(msgs: list[MessageExt], ctx: Any) -> ConsumeStatus:
        with lock:
            count[0] += len(msgs)
            if count[0] >= n:
                finished.set()
        return ConsumeStatus.CONSUME_SUCCESS

    consumer = PushConsumer(group, namesrv, consume_from_where=ConsumeFromWhere.FIRST_OFFSET,
                            consume_message_batch_max_size=32)
    consumer.subscribe(TOPIC)
    consumer.register_listener(listener)
    began = time.perf_counter()
    consumer.start()
    try:
        if not finished.wait(300):
            raise RuntimeError(f"consumed {count[0]} of {n}")
        elapsed = time.perf_counter() - began
    finally:
        consumer.shutdown()
    return n / elapsed


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
                    results.setdefault(("consume", on), []).append(
                        consume(namesrv, f"trace-bench-g{i}", n))
            time.sleep(0.2)  # the last flush interval's records
            total_msgs = RUNS * (n + 1 + n_batches * 32)
            records_per_1000 = 1000 * trace_records(brokers[True]) / total_msgs
    rows = []
    for what, label in (("produce", "produce 1 KiB, send_async window 512"),
                        ("batch", "batched send 32 x 1 KiB, 8 in flight"),
                        ("consume", "consume with ack, push consumer, batches of 32")):
        on_runs, off_runs = results[(what, True)], results[(what, False)]
        rows.append({"workload": "trace", "measurement": f"{label}, trace on", "unit": "msg/s",
                     "value": statistics.median(on_runs), "runs": on_runs,
                     "peer_name": "trace off", "peer_value": statistics.median(off_runs),
                     "peer_runs": off_runs})
    rows.append({"workload": "trace", "measurement": "trace records written per 1000 messages",
                 "unit": "records", "value": round(records_per_1000, 2), "runs": [records_per_1000]})
    return rows


if __name__ == "__main__":
    import json
    import sys

    for r in run("--quick" in sys.argv):
        print(json.dumps(r))
