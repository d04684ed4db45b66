"""What the metrics endpoint costs the broker: broker_bench's batched send and pull, plus one
message per send request (where a per-request cost shows most), against `ferrymq standalone`
without --metrics-port and with it while a separate process scrapes /metrics every second
(Prometheus scrapes every 15 s by default; once a second is the harsh case). Runs alternate
off/on so both see the same machine. Also: how long one scrape takes.

`run(quick)` returns rows of the bench harness, the median of RUNS runs for each."""

from __future__ import annotations

import asyncio
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

from bench.broker_bench import QUEUES, _pull, _send

from ferrymq.client.admin import AdminClient
from ferrymq.common.codes import RequestCode, ResponseCode
from ferrymq.embedded import standalone
from ferrymq.remoting import ClientConfig, RemotingClient, RemotingCommand
from ferrymq.remoting.loop import new_event_loop

RUNS = 3
IN_FLIGHT = 8

# Says "ready" after its first scrape: the measurement starts once the scraper's own start-up
# (an interpreter competing for the same cores) is over.
_SCRAPER = """
import sys, time, urllib.request
url = sys.argv[1]
first = True
while True:
    urllib.request.urlopen(url, timeout=10).read()
    if first:
        print("ready", flush=True)
        first = False
    time.sleep(1.0)
"""


async def _send_single(client: RemotingClient, broker: str, topic: str, n: int) -> float:
    ext = {"a": "bench", "b": topic, "c": "TBW102", "d": str(QUEUES), "e": "0", "f": "0", "g": "0",
           "h": "0", "i": "", "j": "0", "k": "false", "m": "false"}
    sent = 0

    async def worker(q: int) -> None:
        nonlocal sent
        while sent < n:
            sent += 1
            req = RemotingCommand.request(RequestCode.SEND_MESSAGE_V2, ext_fields=dict(ext, e=str(q % QUEUES)),
                                          body=b"x" * 256)
            resp = await client.invoke(broker, req, 10.0)
            if resp.code != ResponseCode.SUCCESS:
                raise RuntimeError(f"send failed: {resp.code} {resp.remark}")

    began = time.perf_counter()
    await asyncio.gather(*(worker(i) for i in range(IN_FLIGHT)))
    return n / (time.perf_counter() - began)


def _one_run(metrics: bool, run_no: int, quick: bool, out: dict[str, list[float]]) -> None:
    extra = ("--metrics-port", "0") if metrics else ()
    tag = "on" if metrics else "off"
    with tempfile.TemporaryDirectory(prefix="ferrymq-bench-") as tmp, standalone(Path(tmp), *extra) as server:
        topic = f"bench-{tag}-{run_no}"
        with AdminClient(server.namesrv) as admin:
            admin.create_topic(topic, QUEUES)
            broker = next(iter(admin.brokers().values()))
        scraper = None
        if metrics:
            url = f"http://{server.metrics}/metrics"
            scraper = subprocess.Popen([sys.executable, "-c", _SCRAPER, url], stdout=subprocess.PIPE,
                                       stderr=subprocess.DEVNULL, text=True)
            assert scraper.stdout is not None
            if scraper.stdout.readline().strip() != "ready":
                raise RuntimeError("the scraper process did not scrape /metrics")

        async def go() -> None:
            client = RemotingClient(ClientConfig())
            try:
                out[f"send-{tag}"].append(await _send(client, broker, topic, 300 if quick else 2000))
                out[f"pull-{tag}"].append(await _pull(client, broker, topic))
                out[f"single-{tag}"].append(await _send_single(client, broker, topic, 3000 if quick else 20000))
            finally:
                await client.close()

        loop = new_event_loop()
        try:
            loop.run_until_complete(go())
        finally:
            loop.close()
            if scraper is not None:
                scraper.kill()
                scraper.wait()
        if metrics:
            took = []
            for _ in range(20):
                began = time.perf_counter()
                urllib.request.urlopen(f"http://{server.metrics}/metrics", timeout=10).read()
                took.append((time.perf_counter() - began) * 1000)
            out["scrape"].append(statistics.median(took))


def run(quick: bool) -> list[dict[str, Any]]:
    out: dict[str, list[float]] = {k: [] for k in (
        "send-off", "send-on", "pull-off", "pull-on", "single-off", "single-on", "scrape")}
    for run_no in range(RUNS):
        for metrics in (False, True):
            _one_run(metrics, run_no, quick, out)
    rows = []
    names = {
        "send": "batched send, 32 x 1 KiB per request",
        "pull": "pull, up to 256 per request, 4 queues",
        "single": "send, one 256 B message per request, 8 in flight",
    }
    for key, measurement in names.items():
        for tag, label in (("off", "metrics off"), ("on", "metrics on, scraped every 1 s")):
            runs = out[f"{key}-{tag}"]
            rows.append({"workload": "metrics", "measurement": f"{measurement}, {label}", "unit": "msgs/s",
                         "value": round(statistics.median(runs), 2), "runs": [round(v, 2) for v in runs]})
    rows.append({"workload": "metrics", "measurement": "one /metrics scrape after the run, p50", "unit": "ms",
                 "value": round(statistics.median(out["scrape"]), 2), "runs": [round(v, 2) for v in out["scrape"]]})
    return rows


if __name__ == "__main__":
    import json

    for r in run("--quick" in sys.argv):
        print(json.dumps(r))
