"""`ferrymq proxy` forwards an ack or an invisible time's change to the broker that issued
the receipt, within the client's deadline: a broker that does not answer makes the proxy
answer PROXY_TIMEOUT while the client still waits, never a call the client gave up on."""

from __future__ import annotations

import itertools
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from google.protobuf.duration_pb2 import Duration

from conftest import Standalone, start_standalone
from ferrymq import AdminClient
from ferrymq.embedded.process import ServerProcess
from ferrymq.grpc.pb import definition_pb2 as pb
from ferrymq.grpc.pb import service_pb2 as spb
from ferrymq.grpc.pb import service_pb2_grpc as sgrpc
from waits import wait_until

TOPIC = "px-deadline"
GROUP = "px-deadline-g"
META = [("x-mq-client-id", "px-deadline"), ("x-mq-language", "PYTHON"), ("x-mq-client-version", "5.1.2")]
_ids = itertools.count()


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[tuple[Standalone, str]]:
    srv = start_standalone(tmp_path / "store")
    proxy = ServerProcess("proxy", lambda: ["proxy", "--namesrv", srv.namesrv, "--grpc-port", "0"],
                          tmp_path / "proxy.log", "proxy grpc")
    try:
        with AdminClient(srv.namesrv) as admin:
            admin.create_topic(TOPIC, 1)
        proxy.start()
        yield srv, proxy.ready["grpc"]
    finally:
        if srv.proc.poll() is None:
            os.kill(srv.proc.pid, signal.SIGCONT)
        proxy.kill()
        srv.stop()


def _receive(stub: sgrpc.MessagingServiceStub) -> pb.Message:
    sent = stub.SendMessage(spb.SendMessageRequest(messages=[pb.Message(
        topic=pb.Resource(name=TOPIC), body=b"x",
        system_properties=pb.SystemProperties(message_id=f"01PXDL{next(_ids):08d}", message_type=pb.NORMAL))]),
        metadata=META, timeout=30)
    assert sent.status.code == pb.OK, sent.status
    req = spb.ReceiveMessageRequest(
        group=pb.Resource(name=GROUP), message_queue=pb.MessageQueue(topic=pb.Resource(name=TOPIC), id=-1),
        filter_expression=pb.FilterExpression(type=pb.TAG, expression="*"), batch_size=1,
        invisible_duration=Duration(seconds=60), long_polling_timeout=Duration(seconds=1))
    got: list[pb.Message] = []

    def received() -> bool:
        got.extend(a.message for a in stub.ReceiveMessage(req, metadata=META, timeout=10)
                   if a.WhichOneof("content") == "message")
        return bool(got)

    wait_until(received, 30, what="the message through the proxy")
    return got[0]


def test_an_ack_and_a_change_to_a_silent_broker_are_answered_within_the_clients_deadline(
        cluster: tuple[Standalone, str]) -> None:
    srv, endpoint = cluster
    with grpc.insecure_channel(endpoint) as channel:
        stub = sgrpc.MessagingServiceStub(channel)
        msg = _receive(stub)
        handle = msg.system_properties.receipt_handle
        ack = spb.AckMessageRequest(group=pb.Resource(name=GROUP), topic=pb.Resource(name=TOPIC), entries=[
            spb.AckMessageEntry(message_id=msg.system_properties.message_id, receipt_handle=handle)])
        change = spb.ChangeInvisibleDurationRequest(
            group=pb.Resource(name=GROUP), topic=pb.Resource(name=TOPIC), receipt_handle=handle,
            invisible_duration=Duration(seconds=30), message_id=msg.system_properties.message_id)
        # The broker (and its name server) stop answering; the proxy's own request timeout
        # (3 s) is longer than these calls' deadlines.
        os.kill(srv.proc.pid, signal.SIGSTOP)
        try:
            for call, req in ((stub.AckMessage, ack), (stub.ChangeInvisibleDuration, change)):
                began = time.monotonic()
                answer = call(req, metadata=META, timeout=1.5)  # DEADLINE_EXCEEDED raises here
                assert answer.status.code == pb.PROXY_TIMEOUT, answer.status
                assert time.monotonic() - began < 1.5
        finally:
            os.kill(srv.proc.pid, signal.SIGCONT)
        # Once it answers again, the same receipt is acknowledged.
        answer = stub.AckMessage(ack, metadata=META, timeout=30)
        assert answer.status.code == pb.OK, answer.status


@pytest.fixture
def split_cluster(tmp_path: Path) -> Iterator[tuple[ServerProcess, str]]:
    """A name server and a broker in processes of their own (the name server alone can be
    frozen), and a proxy that fetches routes again after 0.2 s."""
    ns = ServerProcess("namesrv", lambda: ["namesrv", "--port", "0"], tmp_path / "namesrv.log", "namesrv")
    procs = [ns]
    try:
        addr = ns.start()["namesrv"]
        broker = ServerProcess("broker", lambda: [
            "broker", "--namesrv", addr, "--store-dir", str(tmp_path / "store"), "--broker-name", "px-dl",
            "--broker-port", "0", "--ha-port", "0", "--grpc-port", "-1"], tmp_path / "broker.log", "broker")
        procs.append(broker)
        broker.start()
        with AdminClient(addr) as admin:
            admin.create_topic(TOPIC, 1)
        proxy = ServerProcess("proxy", lambda: ["proxy", "--namesrv", addr, "--grpc-port", "0",
                                                "--route-refresh", "0.2"], tmp_path / "proxy.log", "proxy grpc")
        procs.append(proxy)
        proxy.start()
        yield ns, proxy.ready["grpc"]
    finally:
        if ns.paused:
            ns.resume()
        for proc in reversed(procs):
            proc.kill()


def _send(stub: sgrpc.MessagingServiceStub, topic: str, timeout: float) -> spb.SendMessageResponse:
    return stub.SendMessage(spb.SendMessageRequest(messages=[pb.Message(
        topic=pb.Resource(name=topic), body=b"x",
        system_properties=pb.SystemProperties(message_id=f"01PXDL{next(_ids):08d}", message_type=pb.NORMAL))]),
        metadata=META, timeout=timeout)


def test_a_silent_name_server_holds_up_no_request_past_the_clients_deadline(
        split_cluster: tuple[ServerProcess, str]) -> None:
    ns, endpoint = split_cluster
    with grpc.insecure_channel(endpoint) as channel:
        stub = sgrpc.MessagingServiceStub(channel)
        msg = _receive(stub)  # the topic's route is in the proxy's hands now
        ns.pause()
        # The route in hand keeps serving while its refetch (every 0.2 s) waits on the frozen
        # name server for the proxy's request timeout (3 s), longer than these deadlines.
        began = time.monotonic()
        sends = 0
        while time.monotonic() - began < 2.0:
            answer = _send(stub, TOPIC, 1.5)  # DEADLINE_EXCEEDED raises here
            assert answer.status.code == pb.OK, answer.status
            sends += 1
        assert sends > 1
        entry = spb.AckMessageEntry(message_id=msg.system_properties.message_id,
                                    receipt_handle=msg.system_properties.receipt_handle)
        ack = stub.AckMessage(spb.AckMessageRequest(group=pb.Resource(name=GROUP), topic=pb.Resource(name=TOPIC),
                                                    entries=[entry]), metadata=META, timeout=1.5)
        assert ack.status.code == pb.OK, ack.status
        # A topic the proxy has no route for waits on the name server, within the deadline.
        for call, req in ((stub.QueryRoute, spb.QueryRouteRequest(topic=pb.Resource(name="px-unrouted"))),
                          (stub.SendMessage, None)):
            began = time.monotonic()
            answer = _send(stub, "px-unrouted", 1.5) if req is None else call(req, metadata=META, timeout=1.5)
            assert answer.status.code == pb.PROXY_TIMEOUT, answer.status
            assert time.monotonic() - began < 1.5
        ns.resume()
        assert _send(stub, TOPIC, 30).status.code == pb.OK
