"""The name server under a fleet (issue 24): a real `ferrymq namesrv` process, and a fleet of
simulated brokers in this process speaking the real registration protocol, each on its own
connection, as many brokers do.

Each simulated broker group holds a share of the topics (every topic on `--spread` of the
groups, round robin), registers its whole table once, and then heartbeats as a ferrymq broker
does: an incremental registration carrying only what changed (usually nothing), with the data
version the name server must hold. Measured, with the name server's CPU read from /proc:
- a full registration: the name server's CPU per broker, and the wall time of the fleet's;
- a heartbeat: the name server's CPU per heartbeat, round trip p50/p99, with the whole fleet
  heartbeating at once (the worst moment of a 30 s period);
- a topic creation: one broker's incremental registration of one new topic until a route
  lookup of that topic answers, p50/p99;
- route lookups (GET_ROUTEINFO_BY_TOPIC) from a client, p50/p99, while every broker
  heartbeats once per 3 s (ten times RocketMQ's rate);
- the name server's RSS after the fleet registered.

`python bench/fleet_bench.py [--brokers 200] [--topics 10000] [--spread 4] [--quick]` prints the
rows (medians of 3 runs, each on a fresh name server) as JSON lines; `python -m bench --only
fleet_bench` puts them in the bench table."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
import zlib
from pathlib import Path
from typing import Any

from ferrymq.common import jsonx
from ferrymq.common.codes import RequestCode, ResponseCode
from ferrymq.common.registration import FULL_REQUIRED_FIELD, INCREMENT_FIELD
from ferrymq.embedded.process import ServerProcess
from ferrymq.remoting import RemotingCommand
from ferrymq.remoting.client import ClientConfig, RemotingClient
from ferrymq.remoting.errors import RemotingClosedError

LOOKUPS = 2000
HEARTBEAT_PERIOD_S = 3.0
CREATIONS = 200


def _topic_config(name: str) -> dict[str, Any]:
    return {"topicName": name, "readQueueNums": 8, "writeQueueNums": 8, "perm": 6,
            "topicSysFlag": 0, "order": False, "topicFilterType": "SINGLE_TAG"}


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS")


def _pct(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


class SimBroker:
    """One broker master: its topic table, its data version, its own connection."""

    def __init__(self, index: int, namesrv: str, topics: list[str]) -> None:
        self.name = f"sim-{index:04d}"
        self.addr = f"127.0.0.{1 + index // 250}:{20000 + index % 250}"
        self.namesrv = namesrv
        self.table = {t: _topic_config(t) for t in topics}
        self.counter = 1
        # A name server applying a big table answers late; what is measured here is its cost,
        # not the clients' patience.
        self.client = RemotingClient(ClientConfig(connect_timeout=60.0, request_timeout=60.0))
        self.held: dict[str, Any] | None = None
        self.resent = 0
        self.reconnects = 0

    def version(self) -> dict[str, Any]:
        return {"counter": self.counter, "timestamp": 1_700_000_000_000 + self.counter}

    async def _send(self, body: dict[str, Any]) -> RemotingCommand:
        raw = jsonx.dumps_bytes(body)
        req = RemotingCommand.request(RequestCode.REGISTER_BROKER, ext_fields={
            "brokerAddr": self.addr, "brokerId": "0", "brokerName": self.name,
            "clusterName": "FleetCluster", "haServerAddr": "", "compressed": "false",
            "bodyCrc32": str(zlib.crc32(raw) & 0x7FFFFFFF)}, body=raw)
        try:
            resp = await self.client.invoke(self.namesrv, req, timeout=30.0)
        except RemotingClosedError:
            # The name server closed the connection as idle (a big fleet's first registrations
            # can outlast its 120 s): a broker reconnects at its next heartbeat.
            self.reconnects += 1
            resp = await self.client.invoke(self.namesrv, req, timeout=30.0)
        if resp.code != ResponseCode.SUCCESS:
            raise RuntimeError(f"{self.name}: registration refused: {resp.remark}")
        return resp

    async def register_full(self) -> None:
        version = self.version()
        await self._send({"filterServerList": [], "topicConfigSerializeWrapper": {
            "dataVersion": version, "topicConfigTable": self.table}})
        self.held = version

    async def heartbeat(self, changed: dict[str, Any] | None = None) -> None:
        assert self.held is not None
        if changed:
            self.table.update(changed)
            self.counter += 1
        version = self.version()
        resp = await self._send({
            "filterServerList": [],
            "topicConfigSerializeWrapper": {"dataVersion": version, "topicConfigTable": changed or {}},
            INCREMENT_FIELD: {"baseDataVersion": self.held, "deletedTopics": []}})
        if resp.ext_fields.get(FULL_REQUIRED_FIELD) == "true":
            # The name server dropped this broker (say its connection idled out while the fleet
            # was registering): a broker then sends its whole table, and so does this one.
            self.resent += 1
            await self.register_full()
            return
        self.held = version


async def _lookup(client: RemotingClient, namesrv: str, topic: str) -> RemotingCommand:
    req = RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, ext_fields={"topic": topic})
    return await client.invoke(namesrv, req, timeout=10.0)


async def _fleet(namesrv: str, pid: int, brokers: int, topics: int, spread: int) -> dict[str, float]:
    names = [f"topic-{i:07d}" for i in range(topics)]
    shares: list[list[str]] = [[] for _ in range(brokers)]
    for i, name in enumerate(names):
        for k in range(spread):
            shares[(i * spread + k) % brokers].append(name)
    fleet = [SimBroker(i, namesrv, shares[i]) for i in range(brokers)]
    client = RemotingClient()
    m: dict[str, float] = {}
    try:
        rss_before = _rss_mib(pid)
        cpu0, t0 = _cpu_seconds(pid), time.perf_counter()
        for i in range(0, brokers, 20):  # a fleet (re)starting: 20 registrations in flight
            await asyncio.gather(*(b.register_full() for b in fleet[i:i + 20]))
        m["full_wall_s"] = time.perf_counter() - t0
        m["full_cpu_ms"] = (_cpu_seconds(pid) - cpu0) / brokers * 1000
        m["rss_mib"] = _rss_mib(pid)
        m["rss_grown_mib"] = m["rss_mib"] - rss_before

        rtts: list[float] = []

        async def timed_heartbeat(b: SimBroker) -> None:
            started = time.perf_counter()
            await b.heartbeat()
            rtts.append((time.perf_counter() - started) * 1000)

        cpu0 = _cpu_seconds(pid)
        rounds = 5
        for _ in range(rounds):
            await asyncio.gather(*(timed_heartbeat(b) for b in fleet))
        m["heartbeat_cpu_us"] = (_cpu_seconds(pid) - cpu0) / (rounds * brokers) * 1e6
        m["heartbeat_burst_p99_ms"] = _pct(rtts, 0.99)

        lookups: list[float] = []
        stop = asyncio.Event()

        async def heartbeats() -> None:
            # Every broker once per HEARTBEAT_PERIOD_S, staggered: RocketMQ's 30 s period, ten
            # times as often.
            gap = HEARTBEAT_PERIOD_S / brokers
            pending: dict[int, asyncio.Task[None]] = {}
            beat = 0
            while not stop.is_set():
                index = beat % brokers
                if index not in pending or pending[index].done():  # one in flight per broker
                    pending[index] = asyncio.create_task(fleet[index].heartbeat())
                beat += 1
                try:
                    await asyncio.wait_for(stop.wait(), gap)
                except TimeoutError:
                    pass
            await asyncio.gather(*pending.values())

        beating = asyncio.create_task(heartbeats())
        for i in range(LOOKUPS):
            topic = names[(i * 7919) % topics]
            started = time.perf_counter()
            resp = await _lookup(client, namesrv, topic)
            lookups.append((time.perf_counter() - started) * 1000)
            if resp.code != ResponseCode.SUCCESS:
                raise RuntimeError(f"route of {topic}: {resp.code} {resp.remark}")
        stop.set()
        await beating
        m["lookup_p50_ms"], m["lookup_p99_ms"] = _pct(lookups, 0.5), _pct(lookups, 0.99)

        creations: list[float] = []
        for i in range(CREATIONS):
            owner = fleet[i % brokers]
            name = f"new-{i:05d}"
            started = time.perf_counter()
            await owner.heartbeat({name: _topic_config(name)})
            resp = await _lookup(client, namesrv, name)
            creations.append((time.perf_counter() - started) * 1000)
            if resp.code != ResponseCode.SUCCESS:
                raise RuntimeError(f"new topic {name} has no route: {resp.remark}")
        m["create_p50_ms"], m["create_p99_ms"] = _pct(creations, 0.5), _pct(creations, 0.99)
        m["tables_resent"] = sum(b.resent for b in fleet)
        m["reconnects"] = sum(b.reconnects for b in fleet)
    finally:
        await client.close()
        for b in fleet:
            await b.client.close()
    return m


def measure(brokers: int, topics: int, spread: int) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as d:
        server = ServerProcess("namesrv", lambda: ["namesrv", "--port", "0"], Path(d) / "namesrv.log",
                               "namesrv", timeout=60)
        ready = server.start()
        try:
            assert server.pid is not None
            return asyncio.run(_fleet(ready["namesrv"], server.pid, brokers, topics, spread))
        finally:
            server.stop()


# (key, measurement, unit, target)
_ROWS = [
    ("lookup_p50_ms", "route lookup p50", "ms", None),
    ("lookup_p99_ms", "route lookup p99", "ms", 2.0),
    ("heartbeat_cpu_us", "name server CPU per heartbeat (incremental, unchanged)", "us", None),
    ("heartbeat_burst_p99_ms", "heartbeat p99, the whole fleet at once", "ms", None),
    ("full_cpu_ms", "name server CPU per full registration", "ms", None),
    ("full_wall_s", "the fleet's full registrations (20 in flight)", "s", None),
    ("create_p50_ms", "topic creation until routed p50", "ms", None),
    ("create_p99_ms", "topic creation until routed p99", "ms", None),
    ("rss_mib", "name server RSS", "MiB", None),
    ("rss_grown_mib", "name server RSS grown by the fleet", "MiB", None),
    ("tables_resent", "whole tables re-sent because the name server had dropped a broker", "tables", None),
    ("reconnects", "connections the name server closed as idle", "connections", None),
]


def run(quick: bool, brokers: int = 200, topics: int = 10_000, spread: int = 4) -> list[dict[str, Any]]:
    if quick:
        brokers, topics = 50, 2_000
    samples = [measure(brokers, topics, min(spread, brokers)) for _ in range(1 if quick else 3)]
    shape = f"{brokers} brokers, {topics:,} topics on {spread} groups each"
    rows = []
    for key, measurement, unit, target in _ROWS:
        values = [s[key] for s in samples]
        rows.append({"workload": "fleet", "measurement": f"{measurement} ({shape})", "unit": unit,
                     "value": round(statistics.median(values), 3), "runs": [round(v, 3) for v in values],
                     "target": target})
    return rows


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    p.add_argument("--brokers", type=int, default=200)
    p.add_argument("--topics", type=int, default=10_000)
    p.add_argument("--spread", type=int, default=4, help="broker groups each topic is on")
    p.add_argument("--quick", action="store_true", help="50 brokers, 2,000 topics, one run")
    args = p.parse_args(argv)
    for row in run(args.quick, args.brokers, args.topics, args.spread):
        print(json.dumps(row), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
