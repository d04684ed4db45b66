"""The metrics endpoint of a standalone whose ports enforce TLS is HTTPS with the server's
certificate; a plain HTTP scrape gets no metrics. Permissive ports keep it plain HTTP."""

from __future__ import annotations

import http.client
import ssl
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from conftest import start_standalone
from tlscerts import make_tls_files


def _flags(tmp_path: Path, mode: str) -> tuple[str, ...]:
    certs = make_tls_files(tmp_path / "tls")
    return ("--tls-mode", mode, "--tls-cert", str(certs.cert), "--tls-key", str(certs.key),
            "--tls-ca", str(certs.ca), "--grpc-port", "-1", "--metrics-port", "0")


def test_enforcing_serves_https_only(tmp_path: Path) -> None:
    server = start_standalone(tmp_path / "store", *_flags(tmp_path, "enforcing"))
    try:
        host, port = server.metrics.rsplit(":", 1)
        ctx = ssl.create_default_context(cafile=str(tmp_path / "tls" / "ca.pem"))
        conn = http.client.HTTPSConnection(host, int(port), timeout=10, context=ctx)
        conn.request("GET", "/metrics")
        resp = conn.getresponse()
        text = resp.read().decode()
        conn.close()
        assert resp.status == 200
        names = {f.name for f in text_string_to_metric_families(text)}
        assert {"rocketmq_broker_tps", "ferrymq_namesrv_brokers"} <= names
        plain = http.client.HTTPConnection(host, int(port), timeout=10)
        with pytest.raises((http.client.HTTPException, ConnectionError)):
            plain.request("GET", "/metrics")
            plain.getresponse().read()
        plain.close()
    finally:
        server.stop()


def test_permissive_stays_plain_http(tmp_path: Path) -> None:
    server = start_standalone(tmp_path / "store", *_flags(tmp_path, "permissive"))
    try:
        host, port = server.metrics.rsplit(":", 1)
        conn = http.client.HTTPConnection(host, int(port), timeout=10)
        conn.request("GET", "/metrics")
        assert conn.getresponse().status == 200
        conn.close()
    finally:
        server.stop()
