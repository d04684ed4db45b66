"""`ferrymq dashboard` against a name server and broker that only speak TLS, serving its own
page over HTTPS with a certificate made by the test."""

from __future__ import annotations

import json
import ssl
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from conftest import start_standalone
from dashboard.dash_util import start_dashboard
from tlscerts import make_tls_files


def test_dashboard_reaches_a_tls_cluster_and_serves_https(tmp_path: Path) -> None:
    certs = make_tls_files(tmp_path / "tls")
    server = start_standalone(tmp_path / "store", "--tls-mode", "enforcing", "--tls-cert", str(certs.cert),
                              "--tls-key", str(certs.key), "--tls-ca", str(certs.ca), "--grpc-port", "-1")
    try:
        dash = start_dashboard(server.namesrv, tmp_path, "--tls-ca", str(certs.ca),
                               "--https-cert", str(certs.cert), "--https-key", str(certs.key))
        try:
            addr = dash.ready["dashboard"]
            trusting = ssl.create_default_context(cafile=str(certs.ca))
            with urllib.request.urlopen(f"https://{addr}/api/cluster", timeout=30, context=trusting) as resp:
                cluster = json.loads(resp.read())
            assert server.broker in json.dumps(cluster), cluster
            with pytest.raises(urllib.error.URLError, match="CERTIFICATE_VERIFY_FAILED"):
                urllib.request.urlopen(f"https://{addr}/api/cluster", timeout=30,
                                       context=ssl.create_default_context(cafile=str(certs.other_ca)))
            with pytest.raises((urllib.error.URLError, ConnectionError)):
                urllib.request.urlopen(f"http://{addr}/api/cluster", timeout=30)
        finally:
            dash.stop()
    finally:
        server.stop()
