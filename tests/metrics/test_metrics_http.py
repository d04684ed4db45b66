"""The /metrics HTTP server alone, on a real socket: answers, refusals, a failing collector and
an idle client."""

from __future__ import annotations

import asyncio

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.metrics_core import Metric
from prometheus_client.parser import text_string_to_metric_families

from ferrymq.metrics import MetricsServer


async def _request(addr: str, raw: bytes) -> bytes:
    host, port = addr.rsplit(":", 1)
    reader, writer = await asyncio.open_connection(host, int(port))
    writer.write(raw)
    await writer.drain()
    data = await asyncio.wait_for(reader.read(), 5)
    writer.close()
    return data


async def test_answers_refusals_and_a_failing_collector() -> None:
    fail = False

    async def collect() -> list[Metric]:
        if fail:
            raise RuntimeError("collector bug")
        g = GaugeMetricFamily("ferrymq_test_value", "a value", labels=["k"])
        g.add_metric(["v"], 42)
        return [g]

    server = MetricsServer(collect, port=0)
    addr = await server.start()
    try:
        ok = await _request(addr, b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
        head, body = ok.split(b"\r\n\r\n", 1)
        assert head.startswith(b"HTTP/1.1 200 OK")
        assert b"Content-Length: %d" % len(body) in head
        (fam,) = [f for f in text_string_to_metric_families(body.decode()) if f.name == "ferrymq_test_value"]
        assert fam.samples[0].labels == {"k": "v"} and fam.samples[0].value == 42
        assert (await _request(addr, b"garbage\r\n\r\n")).startswith(b"HTTP/1.1 400")
        assert (await _request(addr, b"GET /other HTTP/1.1\r\n\r\n")).startswith(b"HTTP/1.1 404")
        assert (await _request(addr, b"DELETE /metrics HTTP/1.1\r\n\r\n")).startswith(b"HTTP/1.1 405")
        fail = True
        assert (await _request(addr, b"GET /metrics HTTP/1.1\r\n\r\n")).startswith(b"HTTP/1.1 500")
        fail = False
        assert (await _request(addr, b"GET /metrics HTTP/1.1\r\n\r\n")).startswith(b"HTTP/1.1 200")
        assert server.scrapes == 2
    finally:
        await server.stop()


async def test_idle_client_is_dropped_and_stop_closes_the_port() -> None:
    async def collect() -> list[Metric]:
        return []

    server = MetricsServer(collect, port=0, read_timeout_s=0.2)
    addr = await server.start()
    host, port = addr.rsplit(":", 1)
    reader, writer = await asyncio.open_connection(host, int(port))
    writer.write(b"GET /metrics HTTP/1.1\r\n")  # never finishes its head
    assert await asyncio.wait_for(reader.read(), 5) == b""  # closed by the server, no answer
    writer.close()
    await server.stop()
    try:
        _, w = await asyncio.open_connection(host, int(port))
    except OSError:
        return
    w.close()
    raise AssertionError("the port still accepts connections after stop()")
