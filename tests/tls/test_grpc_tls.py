"""The gRPC endpoint of a standalone with TLS on: ferrymq's generated apache.rocketmq.v2 stubs
over a TLS channel that trusts the test's CA route and send; a plain channel and a channel
trusting another CA get nowhere."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from conftest import Standalone, start_standalone
from ferrymq import AdminClient, TlsClientSettings
from ferrymq.grpc.pb import definition_pb2 as pb
from ferrymq.grpc.pb import service_pb2 as spb
from ferrymq.grpc.pb import service_pb2_grpc as sgrpc
from tlscerts import TlsFiles, make_tls_files

META = [("x-mq-client-id", "tls-test"), ("x-mq-language", "PYTHON"), ("x-mq-client-version", "5.1.2")]


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> TlsFiles:
    return make_tls_files(tmp_path_factory.mktemp("tls"))


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, certs: TlsFiles) -> Iterator[Standalone]:
    srv = start_standalone(tmp_path_factory.mktemp("grpc-tls") / "store", "--tls-mode", "enforcing",
                           "--tls-cert", str(certs.cert), "--tls-key", str(certs.key), "--tls-ca", str(certs.ca))
    try:
        with AdminClient(srv.namesrv, tls=TlsClientSettings(enabled=True, trust_cert_path=str(certs.ca))) as admin:
            admin.create_topic("grpc-tls", queue_nums=2)
        yield srv
    finally:
        srv.stop()


def channel(server: Standalone, ca: Path) -> grpc.Channel:
    creds = grpc.ssl_channel_credentials(root_certificates=ca.read_bytes())
    return grpc.secure_channel(server.grpc, creds)


def test_route_and_send_over_tls(server: Standalone, certs: TlsFiles) -> None:
    with channel(server, certs.ca) as ch:
        stub = sgrpc.MessagingServiceStub(ch)
        host, port = server.grpc.rsplit(":", 1)
        resp = stub.QueryRoute(spb.QueryRouteRequest(
            topic=pb.Resource(name="grpc-tls"),
            endpoints=pb.Endpoints(scheme=pb.IPv4, addresses=[pb.Address(host=host, port=int(port))])),
            metadata=META, timeout=10)
        assert resp.status.code == pb.OK and len(resp.message_queues) > 0
        msg = pb.Message(topic=pb.Resource(name="grpc-tls"), body=b"over tls",
                         system_properties=pb.SystemProperties(message_id="01TLSTEST0000001", message_type=pb.NORMAL))
        sent = stub.SendMessage(spb.SendMessageRequest(messages=[msg]), metadata=META, timeout=10)
        assert sent.status.code == pb.OK, sent.status
        assert sent.entries[0].message_id == "01TLSTEST0000001"


def test_plain_channel_is_refused(server: Standalone) -> None:
    with grpc.insecure_channel(server.grpc) as ch:
        stub = sgrpc.MessagingServiceStub(ch)
        with pytest.raises(grpc.RpcError) as info:
            stub.QueryRoute(spb.QueryRouteRequest(topic=pb.Resource(name="grpc-tls")), metadata=META, timeout=5)
        assert info.value.code() == grpc.StatusCode.UNAVAILABLE


def test_wrong_ca_is_refused(server: Standalone, certs: TlsFiles) -> None:
    with channel(server, certs.other_ca) as ch:
        stub = sgrpc.MessagingServiceStub(ch)
        with pytest.raises(grpc.RpcError) as info:
            stub.QueryRoute(spb.QueryRouteRequest(topic=pb.Resource(name="grpc-tls")), metadata=META, timeout=5)
        assert info.value.code() == grpc.StatusCode.UNAVAILABLE
        assert "certificate" in (info.value.details() or "").lower() or "handshake" in (
            info.value.details() or "").lower(), info.value.details()
