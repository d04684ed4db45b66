"""The Prometheus endpoint of the broker and the name server (`--metrics-port`, docs/metrics.md)."""

from __future__ import annotations

import ssl
from collections.abc import Awaitable, Callable, Sequence

from prometheus_client import GC_COLLECTOR, PLATFORM_COLLECTOR, PROCESS_COLLECTOR
from prometheus_client.metrics_core import Metric

from .http import METRICS_PATH, MetricsPortError, MetricsServer

__all__ = ["METRICS_PATH", "MetricsPortError", "MetricsServer", "metrics_server"]


def metrics_server(sources: Sequence[Callable[[], Awaitable[list[Metric]]]], *, host: str, port: int,
                   tls: ssl.SSLContext | None = None) -> MetricsServer:
    """An endpoint exporting `sources` (the broker's and/or the name server's collectors) and the
    process's own figures (CPU, memory, open files, Python GC); HTTPS only with `tls`."""

    async def collect() -> list[Metric]:
        families: list[Metric] = []
        for source in sources:
            families += await source()
        for std in (PROCESS_COLLECTOR, PLATFORM_COLLECTOR, GC_COLLECTOR):
            families += std.collect()
        return families

    return MetricsServer(collect, host=host, port=port, tls=tls)
