"""`ferrymq proxy` started against a name server that does not answer: it still starts (as
RocketMQ's proxy does, the name server may come later), says so in its log, and answers the
SDKs' route and send requests with why they fail, not with TOPIC_NOT_FOUND."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from ferrymq.embedded.process import ServerProcess
from ferrymq.grpc.pb import definition_pb2 as pb
from ferrymq.grpc.pb import service_pb2 as spb
from ferrymq.grpc.pb import service_pb2_grpc as sgrpc
from waits import wait_until


@pytest.fixture(scope="module")
def dead_namesrv() -> Iterator[str]:
    # Bound and never listening: connections to it are refused, and no other test takes it.
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        yield f"127.0.0.1:{sock.getsockname()[1]}"


def test_a_proxy_without_a_name_server_says_so(dead_namesrv: str, tmp_path: Path) -> None:
    proxy = ServerProcess("proxy", lambda: ["proxy", "--namesrv", dead_namesrv, "--grpc-port", "0"],
                          tmp_path / "proxy.log", "proxy grpc")
    proxy.start()
    try:
        endpoint = proxy.ready["grpc"]
        host, port = endpoint.rsplit(":", 1)
        meta = [("x-mq-client-id", "px-no-ns"), ("x-mq-language", "PYTHON")]
        with grpc.insecure_channel(endpoint) as channel:
            stub = sgrpc.MessagingServiceStub(channel)
            route = stub.QueryRoute(spb.QueryRouteRequest(
                topic=pb.Resource(name="orders"),
                endpoints=pb.Endpoints(scheme=pb.IPv4, addresses=[pb.Address(host=host, port=int(port))])),
                metadata=meta, timeout=30)
            sent = stub.SendMessage(spb.SendMessageRequest(messages=[pb.Message(
                topic=pb.Resource(name="orders"), body=b"x",
                system_properties=pb.SystemProperties(message_id="01AB", message_type=pb.NORMAL))]),
                metadata=meta, timeout=30)
        for status in (route.status, sent.status):
            assert status.code == pb.PROXY_TIMEOUT, status
            assert f"name server {dead_namesrv} is unreachable" in status.message, status.message
            assert "'orders'" in status.message, status.message
        # The proxy's own log says it too (it logged nothing below ERROR before).
        wait_until(lambda: "cannot read the cluster from the name server" in proxy.log_tail(), 10,
                   what="the proxy's warning about its name server")
    finally:
        proxy.kill()
