"""A master and a slave (separate processes) with TLS enforcing on every port: the slave
replicates over TLS (a SYNC_MASTER answers SEND_OK only once the slave has the message), and the
replication port refuses a plain connection."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from ferrymq import AdminClient, Message, Producer
from ferrymq.embedded import start_cluster
from tlscerts import make_tls_files
from waits import wait_until


def test_slave_replicates_over_tls(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    certs = make_tls_files(tmp_path / "tls")
    server = ("--tls-mode", "enforcing", "--tls-cert", str(certs.cert), "--tls-key", str(certs.key),
              "--tls-ca", str(certs.ca))
    # This process's clients (the cluster helper's admin client among them) speak TLS.
    monkeypatch.setenv("FERRYMQ_TLS", "1")
    monkeypatch.setenv("FERRYMQ_TLS_CA", str(certs.ca))
    with start_cluster(tmp_path / "cluster", slaves=1, role="SYNC_MASTER", namesrv_extra=server,
                       broker_extra=(*server, "--tls")) as cluster:
        master, slave = cluster.static_master(), cluster.slaves()[0]
        with AdminClient(cluster.namesrv.addr) as admin:
            wait_until(lambda: any(b.addr == slave.addr and b.runtime.get("haConnected") == "true"
                                   for b in admin.cluster_list()),
                       timeout=20, what="the slave connected to its master over TLS")
        with Producer("ha-tls-p", cluster.namesrv.addr, send_timeout=10.0) as producer:
            statuses = [producer.send(Message("ha-tls", f"m{i}".encode())).status.name for i in range(10)]
        assert statuses == ["SEND_OK"] * 10

        host, port = master.ha_addr.rsplit(":", 1)
        with socket.create_connection((host, int(port)), timeout=5) as plain:
            plain.sendall(b"\x00\x00\x00\x10plain replication hello")
            plain.settimeout(15)
            assert _read_to_end(plain) == b"", "a plain peer on the TLS replication port is closed"


def _read_to_end(sock: socket.socket) -> bytes:
    data = b""
    while True:
        try:
            chunk = sock.recv(4096)
        except ConnectionResetError:
            return data
        if not chunk:
            return data
        data += chunk
