"""ferrymq servers as child processes, for tests, benchmarks and the demo: `standalone` (name
server and broker in one process) and `start_cluster` (a name server, a master and its slaves,
each a process of its own that a test can crash, freeze and restart)."""

from __future__ import annotations

from .cluster import BrokerProcess, LocalCluster, NamesrvProcess, start_cluster
from .process import ServerNotReadyError, ServerProcess, parse_ready_line
from .standalone import StandaloneProcess, standalone, start_standalone

__all__ = [
    "BrokerProcess",
    "LocalCluster",
    "NamesrvProcess",
    "ServerNotReadyError",
    "ServerProcess",
    "StandaloneProcess",
    "parse_ready_line",
    "standalone",
    "start_cluster",
    "start_standalone",
]
