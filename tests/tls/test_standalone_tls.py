"""A `ferrymq standalone` process with TLS on its name server and broker ports, driven by
ferrymq's clients and its command line, with certificates made by the test."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from cli.cli_util import ferrymq
from conftest import Standalone, start_standalone
from ferrymq import AdminClient, ConsumeFromWhere, LitePullConsumer, Message, Producer, TlsClientSettings
from ferrymq.client.errors import FerryMQError
from tlscerts import TlsFiles, make_tls_files
from waits import wait_until


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> TlsFiles:
    return make_tls_files(tmp_path_factory.mktemp("tls"))


def tls_flags(certs: TlsFiles, mode: str) -> tuple[str, ...]:
    return ("--tls-mode", mode, "--tls-cert", str(certs.cert), "--tls-key", str(certs.key),
            "--tls-ca", str(certs.ca))


@pytest.fixture(scope="module")
def enforcing(tmp_path_factory: pytest.TempPathFactory, certs: TlsFiles) -> Iterator[Standalone]:
    """One enforcing server for the tests that use it: each uses its own topics."""
    server = start_standalone(tmp_path_factory.mktemp("enforcing") / "store", *tls_flags(certs, "enforcing"),
                              "--grpc-port", "-1")
    try:
        yield server
    finally:
        server.stop()


def tls(certs: TlsFiles) -> TlsClientSettings:
    return TlsClientSettings(enabled=True, trust_cert_path=str(certs.ca))


def send_and_consume(server: Standalone, topic: str, group: str, count: int, **client: Any) -> list[bytes]:
    with AdminClient(server.namesrv, **client) as admin:
        admin.create_topic(topic, queue_nums=2)
    with Producer(f"{group}-p", server.namesrv, **client) as producer:
        for i in range(count):
            assert producer.send(Message(topic, f"m{i}".encode())).status.name == "SEND_OK"
    got: list[bytes] = []
    consumer = LitePullConsumer(group, server.namesrv, consume_from_where=ConsumeFromWhere.FIRST_OFFSET,
                                rebalance_interval=0.3, route_refresh_interval=0.3, pull_suspend_timeout=1.0,
                                **client)
    consumer.subscribe(topic)
    with consumer:
        wait_until(lambda: got.extend(m.body for m in consumer.poll(timeout=0.5)) or len(got) >= count,
                   timeout=20, what=f"{count} messages over {client}")
    return sorted(got)


def test_tls_clients_send_and_consume_end_to_end(enforcing: Standalone, certs: TlsFiles) -> None:
    # The broker registered with the name server over TLS: the route exists.
    got = send_and_consume(enforcing, "tls-e2e", "tls-g", 20, tls=tls(certs))
    assert got == sorted(f"m{i}".encode() for i in range(20))


def test_plain_client_is_refused_with_a_clear_error(enforcing: Standalone, certs: TlsFiles) -> None:
    with AdminClient(enforcing.namesrv, tls=False) as admin, pytest.raises(FerryMQError, match="TLS required"):
        admin.create_topic("plain-t", queue_nums=1)
    # The refusal harmed nothing: TLS clients go on being served.
    with AdminClient(enforcing.namesrv, tls=tls(certs)) as admin:
        admin.create_topic("after-refusal", queue_nums=1)
        assert "after-refusal" in admin.topic_list()


def test_wrong_ca_fails_with_a_certificate_error(enforcing: Standalone, certs: TlsFiles) -> None:
    wrong = TlsClientSettings(enabled=True, trust_cert_path=str(certs.other_ca))
    with AdminClient(enforcing.namesrv, tls=wrong) as admin, \
            pytest.raises(FerryMQError, match="TLS certificate verification failed"):
        admin.topic_list()


def test_cli_over_tls(enforcing: Standalone, certs: TlsFiles) -> None:
    ferrymq(enforcing, "topic", "create", "cli-tls", "--queues", "1", "--tls-ca", str(certs.ca))
    sent = json.loads(ferrymq(enforcing, "send", "cli-tls", "hello", "--json", "--tls", "--tls-ca",
                              str(certs.ca)).stdout)
    assert sent["status"] == "SEND_OK"
    # The environment does what the flags do.
    listed = json.loads(ferrymq(enforcing, "topic", "list", "--json",
                                env={"FERRYMQ_TLS": "1", "FERRYMQ_TLS_CA": str(certs.ca)}).stdout)
    assert "cli-tls" in listed

    plain = ferrymq(enforcing, "topic", "list", "--json", check=False)
    assert plain.returncode == 1
    assert "accepts only TLS connections" in plain.stdout, plain.stdout
    wrong = ferrymq(enforcing, "topic", "list", "--tls-ca", str(certs.other_ca), check=False)
    assert wrong.returncode == 1
    assert "certificate verif" in wrong.stderr + wrong.stdout, (wrong.stdout, wrong.stderr)


def test_plain_cli_against_tls_only_cluster_says_to_use_tls(enforcing: Standalone) -> None:
    """send, consume and topic list say the name server wants TLS and which flag to use, rather
    than a missing route, no message, or a "broker" that is the name server."""
    for args in (("send", "plain-cli", "hi"), ("consume", "plain-cli", "--group", "plain-g", "--count", "1",
                                               "--timeout", "5"), ("topic", "list")):
        proc = ferrymq(enforcing, *args, "--json", check=False)
        assert proc.returncode == 1, (args, proc.stdout, proc.stderr)
        err = json.loads(proc.stdout.strip().splitlines()[-1])["error"]
        assert err["type"] == "TlsRequiredError", (args, err)
        assert (err["tls_required"], err["retriable"], err["server_role"]) == (True, False, "name server"), err
        assert (err["broker"], err["code_name"]) == (enforcing.namesrv, "SYSTEM_ERROR"), err
        assert f"name server {enforcing.namesrv} accepts only TLS connections" in err["message"], err
        assert "--tls" in err["message"] and "--tls" in err["hint"], err
        line = ferrymq(enforcing, *args, check=False).stderr.strip().splitlines()[-1]
        assert line == f"ferrymq: {err['message']}", line


def test_permissive_serves_tls_and_plain_clients(tmp_path: Path, certs: TlsFiles) -> None:
    server = start_standalone(tmp_path / "store", *tls_flags(certs, "permissive"), "--grpc-port", "-1")
    try:
        assert len(send_and_consume(server, "perm-tls", "perm-tls-g", 5, tls=tls(certs))) == 5
        assert len(send_and_consume(server, "perm-plain", "perm-plain-g", 5, tls=False)) == 5
    finally:
        server.stop()


def test_missing_certificate_is_one_clear_line(tmp_path: Path, certs: TlsFiles) -> None:
    proc = ferrymq(type("S", (), {"namesrv": "127.0.0.1:1"})(), "standalone", "--store-dir", str(tmp_path / "s"),
                   "--namesrv-port", "0", "--broker-port", "0", "--tls-mode", "enforcing",
                   "--tls-cert", str(tmp_path / "missing.pem"), "--tls-key", str(certs.key), check=False)
    assert proc.returncode == 1
    assert "cannot start" in proc.stderr and "not found" in proc.stderr, proc.stderr


def test_required_client_certificates(tmp_path: Path, certs: TlsFiles) -> None:
    """need_client_auth=require: the standalone's broker registers with its own certificate;
    a client presenting one signed by the CA is served, one presenting none is not."""
    server = start_standalone(tmp_path / "store", *tls_flags(certs, "enforcing"), "--tls-need-client-auth",
                              "require", "--grpc-port", "-1")
    try:
        mutual = TlsClientSettings(enabled=True, trust_cert_path=str(certs.ca), cert_path=str(certs.client_cert),
                                   key_path=str(certs.client_key))
        assert len(send_and_consume(server, "mtls", "mtls-g", 5, tls=mutual)) == 5
        with AdminClient(server.namesrv, tls=tls(certs)) as admin, pytest.raises(FerryMQError):
            admin.topic_list()
    finally:
        server.stop()
