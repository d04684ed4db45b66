"""TLS on against off, in the same run: two `ferrymq standalone` servers, one in TLS enforcing
mode (certificates made for the run by trustme), one plain; the clients of the first speak TLS
to the name server and the broker, checking the certificate against the run's CA.

- produce throughput of 1 KiB messages (send_async with a window of 512),
- consume-with-ack throughput (push consumer, listener batches of 32).

Runs alternate between the two servers so drift on the machine hits both alike. `value` is
TLS on, the peer TLS off; the ratio is the share of throughput TLS keeps."""

from __future__ import annotations

import statistics
import tempfile
from pathlib import Path
from typing import Any

import trustme
from bench.e2e_bench import ferrymq_consume, ferrymq_produce

from ferrymq import (
    AdminClient,
    TlsClientSettings,
)
from ferrymq.embedded import standalone

RUNS = 3
TOPIC = "tls-bench"


def make_certs(directory: Path) -> tuple[Path, Path, Path]:
    ca = trustme.CA()
    server = ca.issue_cert("127.0.0.1", "localhost")
    paths = directory / "ca.pem", directory / "server.pem", directory / "server.key"
    ca.cert_pem.write_to_path(str(paths[0]))
    for i, blob in enumerate(server.cert_chain_pems):
        blob.write_to_path(str(paths[1]), append=i > 0)
    server.private_key_pem.write_to_path(str(paths[2]))
    return paths


def run(quick: bool) -> list[dict[str, Any]]:
    n = 5_000 if quick else 30_000
    results: dict[tuple[str, bool], list[float]] = {}
    with tempfile.TemporaryDirectory(prefix="ferrymq-tls-bench-") as tmp:
        home = Path(tmp)
        ca, cert, key = make_certs(home)
        flags = ("--tls-mode", "enforcing", "--tls-cert", str(cert), "--tls-key", str(key), "--tls-ca", str(ca))
        with standalone(home / "on", *flags) as on, standalone(home / "off") as off:
            servers: dict[bool, tuple[str, dict[str, Any]]] = {
                True: (on.namesrv, {"tls": TlsClientSettings(enabled=True, trust_cert_path=str(ca))}),
                False: (off.namesrv, {"tls": False}),
            }
            for namesrv, client in servers.values():
                with AdminClient(namesrv, **client) as admin:
                    admin.create_topic(TOPIC, 4)
            for i in range(RUNS):
                for tls_on in (i % 2 == 0, i % 2 != 0):
                    namesrv, client = servers[tls_on]
                    results.setdefault(("produce", tls_on), []).append(
                        ferrymq_produce(namesrv, TOPIC, n, group="tls-bench-p", **client))
                    results.setdefault(("consume", tls_on), []).append(
                        ferrymq_consume(namesrv, TOPIC, f"tls-bench-g{i}", n, 32, **client))
    rows = []
    for what, label in (("produce", "produce 1 KiB, send_async window 512"),
                        ("consume", "consume with ack, push consumer, batches of 32")):
        on_runs, off_runs = results[(what, True)], results[(what, False)]
        rows.append({"workload": "tls", "measurement": f"{label}, TLS on", "unit": "msg/s",
                     "value": statistics.median(on_runs), "runs": on_runs,
                     "peer_name": "TLS off", "peer_value": statistics.median(off_runs), "peer_runs": off_runs})
    return rows
