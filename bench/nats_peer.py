"""NATS JetStream as a peer of the e2e bench: Debian's nats-server with JetStream on a file
store, nats-py as the client, the workloads of bench/e2e_bench.py (1 KiB, persisted,
acknowledged).

Client settings (NATS's own advice for throughput with acks; bench/README.md):
- produce: `js.publish_async` with WINDOW publishes in flight (`publish_async_max_pending`),
  each PubAck checked, oldest first, as ferrymq's side waits on its futures;
- batches: BATCH `publish_async` calls, then their BATCH acks awaited (JetStream 2.9 has no
  batch publish; this is Redis's pipeline of 32);
- consume: a durable pull consumer (AckExplicit), `fetch` of FETCH messages at a time, every
  message acked (`msg.ack()`: a publish, not a round trip);
- latency: a durable push consumer (AckExplicit, the callback acks), since a pull `fetch` of
  more than one message waits for its batch to fill; the paced producer publishes with
  `publish_async` and checks every ack.
The stream is a file store, one replica; JetStream writes every message to its block files and
leaves fsync to its sync interval (2 min by default), as Redis's everysec and ferrymq's async
flush leave it to theirs."""

from __future__ import annotations

import asyncio
import collections
import contextlib
import subprocess
import tempfile
import threading
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

from bench.e2e_bench import (
    BATCH,
    BODY_SIZE,
    LATENCY_ONLY,
    RATES,
    RUNS,
    WINDOW,
    empty_runs,
    free_port,
    paced_producer,
    record_latencies,
    sizes,
)
from bench.peer_setup import client_module, server_binary

NAME = "NATS JetStream (file store)"
KIND = "nats"
FETCH = 256  # messages per pull (nats.go's Consume asks for 500 at a time)
STREAM = "BENCH"


@contextlib.contextmanager
def nats_server(tmp: Path) -> Iterator[str]:
    client_module("nats")
    port = free_port()
    proc = subprocess.Popen(
        [server_binary("nats-server"), "-a", "127.0.0.1", "-p", str(port), "-js", "-sd", str(tmp)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"nats://127.0.0.1:{port}"
    try:
        asyncio.run(_wait_ready(url, proc))
        yield url
    finally:
        proc.terminate()
        proc.wait(30)


async def _quiet(exc: Exception) -> None:
    """nats-py logs every refused connect of the wait for the server otherwise."""


async def _wait_ready(url: str, proc: subprocess.Popen[bytes]) -> None:
    import nats

    deadline = time.monotonic() + 20
    while True:
        try:
            nc = await nats.connect(url, allow_reconnect=False, connect_timeout=1,
                                    error_cb=_quiet)
            await nc.jetstream().account_info()
            await nc.close()
            return
        except Exception:
            if time.monotonic() > deadline or proc.poll() is not None:
                raise RuntimeError("nats-server did not start") from None
            await asyncio.sleep(0.05)


@contextlib.asynccontextmanager
async def _js(url: str, max_pending: int = WINDOW) -> AsyncIterator[Any]:
    import nats

    nc = await nats.connect(url)
    try:
        yield nc.jetstream(publish_async_max_pending=max_pending)
    finally:
        await nc.close()


async def _add_stream(url: str, subject: str) -> None:
    from nats.js.api import StorageType

    async with _js(url) as js:
        await js.add_stream(name=subject.upper().replace("-", "_"), subjects=[subject],
                            storage=StorageType.FILE, num_replicas=1)


async def produce(url: str, subject: str, n: int) -> float:
    body = b"x" * BODY_SIZE
    async with _js(url) as js:
        await js.publish(subject, body)  # warm
        pending: collections.deque[asyncio.Future[Any]] = collections.deque()
        began = time.perf_counter()
        for _ in range(n):
            if len(pending) >= WINDOW:
                await pending.popleft()  # raises a failed publish's error
            pending.append(await js.publish_async(subject, body))
        for f in pending:
            await f
        return n / (time.perf_counter() - began)


async def produce_batches(url: str, subject: str, n: int) -> float:
    body = b"x" * BODY_SIZE
    async with _js(url) as js:
        await js.publish(subject, body)
        began = time.perf_counter()
        for _ in range(n // BATCH):
            acks = [await js.publish_async(subject, body) for _ in range(BATCH)]
            for f in acks:
                await f
        return (n // BATCH) * BATCH / (time.perf_counter() - began)


async def consume(url: str, subject: str, durable: str, n: int) -> float:
    from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy

    async with _js(url) as js:
        began = time.perf_counter()
        sub = await js.pull_subscribe(subject, durable=durable, config=ConsumerConfig(
            ack_policy=AckPolicy.EXPLICIT, deliver_policy=DeliverPolicy.ALL))
        done = 0
        while done < n:
            try:
                msgs = await sub.fetch(FETCH, timeout=1)
            except TimeoutError:
                continue
            for m in msgs:
                await m.ack()
            done += len(msgs)
        return n / (time.perf_counter() - began)


def latency(url: str, subject: str, seconds: float, rate: int) -> list[float]:
    from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy

    # One more than paced: the producer's warm-up message.
    expected = int(seconds * rate) + 1
    latencies: list[float] = []
    ready = threading.Event()

    async def consumer() -> None:
        async with _js(url) as js:
            finished = asyncio.Event()

            async def on_msg(m: Any) -> None:
                latencies.append((time.perf_counter_ns() - int(m.data[:20])) / 1e6)
                await m.ack()
                if len(latencies) >= expected:
                    finished.set()

            sub = await js.subscribe(subject, durable="lat", cb=on_msg, manual_ack=True,
                                     config=ConsumerConfig(ack_policy=AckPolicy.EXPLICIT,
                                                           deliver_policy=DeliverPolicy.NEW))
            ready.set()
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(finished.wait(), seconds + 60)
            await sub.unsubscribe()

    t = threading.Thread(target=asyncio.run, args=(consumer(),), daemon=True)
    t.start()
    if not ready.wait(30):
        raise RuntimeError("the NATS latency consumer did not start")
    paced_producer(KIND, url, subject, seconds, rate)
    t.join(seconds + 90)
    return latencies


def paced_send(url: str, subject: str, seconds: float, rate: int) -> None:
    """The latency run's producer (its own process): publishes at `rate`, every ack checked."""
    pad = b"x" * (BODY_SIZE - 20)

    async def go() -> None:
        async with _js(url, max_pending=4 * WINDOW) as js:
            await js.publish(subject, b"%020d" % time.perf_counter_ns() + pad)  # warm
            acks = []
            start = time.perf_counter()
            for i in range(int(seconds * rate)):
                delay = start + i / rate - time.perf_counter()
                if delay > 0:
                    await asyncio.sleep(delay)
                acks.append(await js.publish_async(subject, b"%020d" % time.perf_counter_ns() + pad))
            await asyncio.gather(*acks)

    asyncio.run(go())


def runs(quick: bool) -> dict[str, list[float]]:
    sz = sizes(quick)
    out = empty_runs()
    for _ in range(RUNS):
        with tempfile.TemporaryDirectory(prefix="ferrymq-bench-nats-") as tmp, \
                nats_server(Path(tmp)) as url:
            for subject in ("bench", "bench-b", *(f"bench-lat{rate}" for rate in RATES)):
                asyncio.run(_add_stream(url, subject))
            if not LATENCY_ONLY:
                out["produce"].append(asyncio.run(produce(url, "bench", sz.messages)))
                out["produce_batch"].append(asyncio.run(produce_batches(url, "bench-b", sz.messages)))
                out["consume"].append(asyncio.run(consume(url, "bench", "c", sz.messages)))
                # One consumer figure, as Redis's: a pull already hands out FETCH at a time.
                out["consume_batch"].append(out["consume"][-1])
            record_latencies(out, lambda rate: latency(url, f"bench-lat{rate}", sz.latency_seconds, rate),
                             within_produce_rate=True)
    return out
