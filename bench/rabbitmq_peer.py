"""RabbitMQ as a peer of the e2e bench: Debian's rabbitmq-server (a node of the bench's own,
on free loopback ports, its data in a temporary directory), aio-pika as the client, the
workloads of bench/e2e_bench.py (1 KiB, persisted, acknowledged).

Client settings (RabbitMQ's own advice for throughput with safety; bench/README.md):
- a durable quorum queue (`x-queue-type: quorum`, the replicated, fsyncing queue type RabbitMQ
  recommends for data safety), persistent messages;
- produce: publisher confirms, WINDOW publishes in flight, each confirm checked, oldest first;
- batches: BATCH publishes, then their BATCH confirms awaited (AMQP has no batch publish);
- consume: `basic.qos` prefetch PREFETCH, manual acks, one `multiple` ack per ACK_EVERY
  messages (one ack frame acknowledging all before it);
- latency: the same consumer; the paced producer publishes with confirms, every confirm
  checked.
A quorum queue fsyncs its log before it confirms: stricter than Redis's everysec and ferrymq's
async flush, which is what RabbitMQ offers for a durable, acknowledged queue."""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import os
import shutil
import signal
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
    RUNS,
    WINDOW,
    empty_runs,
    free_port,
    paced_producer,
    record_latencies,
    sizes,
)
from bench.peer_setup import client_module, server_binary

NAME = "RabbitMQ (quorum queue)"
KIND = "rabbitmq"
PREFETCH = 256
ACK_EVERY = 32


@contextlib.contextmanager
def rabbitmq_server(tmp: Path) -> Iterator[str]:
    client_module("aio_pika")
    port, dist_port, epmd_port = free_port(), free_port(), free_port()
    plugins = tmp / "enabled_plugins"
    plugins.write_text("[].\n")
    env = dict(
        os.environ,
        HOME=str(tmp),  # the node's Erlang cookie
        RABBITMQ_NODENAME=f"ferrymq-bench-{port}@localhost",
        RABBITMQ_NODE_IP_ADDRESS="127.0.0.1",
        RABBITMQ_NODE_PORT=str(port),
        RABBITMQ_DIST_PORT=str(dist_port),
        ERL_EPMD_PORT=str(epmd_port),  # an epmd of its own, stopped with the node
        RABBITMQ_MNESIA_BASE=str(tmp / "mnesia"),
        RABBITMQ_LOG_BASE=str(tmp / "log"),
        RABBITMQ_LOGS="-",
        RABBITMQ_ENABLED_PLUGINS_FILE=str(plugins),
        RABBITMQ_CONFIG_FILE=str(tmp / "rabbitmq"),
    )
    proc = subprocess.Popen([server_binary("rabbitmq-server")], env=env, cwd=tmp,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    url = f"amqp://guest:guest@127.0.0.1:{port}/"
    try:
        asyncio.run(_wait_ready(url, proc))
        yield url
    finally:
        proc.terminate()  # the node stops cleanly on SIGTERM
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        epmd = shutil.which("epmd")
        if epmd:
            subprocess.run([epmd, "-port", str(epmd_port), "-kill"], env=env,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)


async def _wait_ready(url: str, proc: subprocess.Popen[bytes]) -> None:
    import aio_pika

    # aiormq logs every refused connect as an error; refusals are the wait itself.
    quiet = logging.getLogger("aiormq.connection")
    level = quiet.level
    quiet.setLevel(logging.CRITICAL)
    deadline = time.monotonic() + 90  # an Erlang node boots in seconds, a loaded one slower
    try:
        while True:
            try:
                conn = await aio_pika.connect(url, timeout=2)
                await conn.close()
                return
            except Exception:
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise RuntimeError("rabbitmq-server did not start") from None
                await asyncio.sleep(0.2)
    finally:
        quiet.setLevel(level)


@contextlib.asynccontextmanager
async def _channel(url: str, queue: str) -> AsyncIterator[tuple[Any, Any]]:
    """(channel with publisher confirms, the durable quorum queue)"""
    import aio_pika

    conn = await aio_pika.connect(url)
    try:
        channel = await conn.channel(publisher_confirms=True)
        q = await channel.declare_queue(queue, durable=True,
                                        arguments={"x-queue-type": "quorum"})
        yield channel, q
    finally:
        await conn.close()


def _message(body: bytes) -> Any:
    import aio_pika

    return aio_pika.Message(body, delivery_mode=aio_pika.DeliveryMode.PERSISTENT)


async def produce(url: str, queue: str, n: int) -> float:
    body = b"x" * BODY_SIZE
    async with _channel(url, queue) as (channel, _):
        publish = channel.default_exchange.publish
        await publish(_message(body), routing_key=queue)  # warm
        pending: collections.deque[asyncio.Task[Any]] = collections.deque()
        began = time.perf_counter()
        for _ in range(n):
            if len(pending) >= WINDOW:
                await pending.popleft()  # raises a nacked publish's error
            pending.append(asyncio.ensure_future(publish(_message(body), routing_key=queue)))
        for t in pending:
            await t
        return n / (time.perf_counter() - began)


async def produce_batches(url: str, queue: str, n: int) -> float:
    body = b"x" * BODY_SIZE
    async with _channel(url, queue) as (channel, _):
        publish = channel.default_exchange.publish
        await publish(_message(body), routing_key=queue)
        began = time.perf_counter()
        for _ in range(n // BATCH):
            await asyncio.gather(*(publish(_message(body), routing_key=queue)
                                   for _ in range(BATCH)))
        return (n // BATCH) * BATCH / (time.perf_counter() - began)


async def _consume(url: str, queue: str, n: int, on_message: Any = None,
                   started: threading.Event | None = None) -> float:
    async with _channel(url, queue) as (channel, q):
        await channel.set_qos(prefetch_count=PREFETCH)
        done = 0
        began = time.perf_counter()
        async with q.iterator() as messages:
            if started is not None:
                started.set()
            async for m in messages:
                done += 1
                if on_message is not None:
                    on_message(m.body)
                # One ack frame for the ACK_EVERY before it; the last one always.
                if done % ACK_EVERY == 0 or done >= n:
                    await m.ack(multiple=True)
                if done >= n:
                    break
        return n / (time.perf_counter() - began)


def consume(url: str, queue: str, n: int) -> float:
    return asyncio.run(_consume(url, queue, n))


def latency(url: str, queue: str, seconds: float, rate: int) -> list[float]:
    # One more than paced: the producer's warm-up message.
    expected = int(seconds * rate) + 1
    latencies: list[float] = []
    ready = threading.Event()

    def on_message(body: bytes) -> None:
        latencies.append((time.perf_counter_ns() - int(body[:20])) / 1e6)

    def consumer() -> None:
        with contextlib.suppress(asyncio.TimeoutError):
            asyncio.run(asyncio.wait_for(_consume(url, queue, expected, on_message, ready),
                                         seconds + 60))

    t = threading.Thread(target=consumer, daemon=True)
    t.start()
    if not ready.wait(30):
        raise RuntimeError("the RabbitMQ latency consumer did not start")
    paced_producer(KIND, url, queue, seconds, rate)
    t.join(seconds + 90)
    return latencies


def paced_send(url: str, queue: str, seconds: float, rate: int) -> None:
    """The latency run's producer (its own process): publishes at `rate`, every confirm
    checked."""
    pad = b"x" * (BODY_SIZE - 20)

    async def go() -> None:
        async with _channel(url, queue) as (channel, _):
            publish = channel.default_exchange.publish
            await publish(_message(b"%020d" % time.perf_counter_ns() + pad), routing_key=queue)
            confirms = []
            start = time.perf_counter()
            for i in range(int(seconds * rate)):
                delay = start + i / rate - time.perf_counter()
                if delay > 0:
                    await asyncio.sleep(delay)
                confirms.append(asyncio.ensure_future(publish(
                    _message(b"%020d" % time.perf_counter_ns() + pad), routing_key=queue)))
            await asyncio.gather(*confirms)

    asyncio.run(go())


def runs(quick: bool) -> dict[str, list[float]]:
    sz = sizes(quick)
    out = empty_runs()
    for _ in range(RUNS):
        with tempfile.TemporaryDirectory(prefix="ferrymq-bench-rabbitmq-") as tmp, \
                rabbitmq_server(Path(tmp)) as url:
            if not LATENCY_ONLY:
                out["produce"].append(asyncio.run(produce(url, "bench", sz.messages)))
                out["produce_batch"].append(asyncio.run(produce_batches(url, "bench-b", sz.messages)))
                out["consume"].append(consume(url, "bench", sz.messages))
                # One consumer figure, as Redis's: the prefetch already hands out many.
                out["consume_batch"].append(out["consume"][-1])
            record_latencies(out, lambda rate: latency(url, f"bench-lat{rate}", sz.latency_seconds, rate),
                             within_produce_rate=True)
    return out
