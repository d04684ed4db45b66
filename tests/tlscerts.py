"""Certificates made by the tests: a CA, a server certificate for 127.0.0.1 and localhost, a
client certificate, and a second CA that signed none of them."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

# A dev dependency (pyproject.toml); an environment made before it was added skips, saying so.
trustme = pytest.importorskip("trustme", reason="trustme is not installed: re-run `make venv`")


@dataclass(frozen=True)
class TlsFiles:
    ca: Path
    cert: Path
    key: Path
    client_cert: Path
    client_key: Path
    other_ca: Path


def make_tls_files(directory: Path) -> TlsFiles:
    directory.mkdir(parents=True, exist_ok=True)
    ca = trustme.CA()
    server = ca.issue_cert("127.0.0.1", "localhost")
    client = ca.issue_cert("ferrymq-client@example.org")
    files = TlsFiles(ca=directory / "ca.pem", cert=directory / "server.pem", key=directory / "server.key",
                     client_cert=directory / "client.pem", client_key=directory / "client.key",
                     other_ca=directory / "other-ca.pem")
    ca.cert_pem.write_to_path(str(files.ca))
    for i, blob in enumerate(server.cert_chain_pems):
        blob.write_to_path(str(files.cert), append=i > 0)
    server.private_key_pem.write_to_path(str(files.key))
    for i, blob in enumerate(client.cert_chain_pems):
        blob.write_to_path(str(files.client_cert), append=i > 0)
    client.private_key_pem.write_to_path(str(files.client_key))
    trustme.CA().cert_pem.write_to_path(str(files.other_ca))
    return files
