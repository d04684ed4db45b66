"""The gRPC side of ACL as pure functions: RocketMQ 5's authorization header and signature,
and what each apache.rocketmq.v2 request needs (the SDK-driven checks are in
tests/compat/test_acl_compat.py)."""

from __future__ import annotations

import hashlib
import hmac

import pytest

from ferrymq.acl import Perm
from ferrymq.acl.resources import ResourceParseError
from ferrymq.grpc.acl_guard import grpc_signature, needs_of_message, parse_authorization, peer_host
from ferrymq.grpc.pb import definition_pb2 as pb
from ferrymq.grpc.pb import service_pb2 as spb


def test_authorization_header_and_signature() -> None:
    header = "MQv2-HMAC-SHA1 Credential=appKey01, SignedHeaders=x-mq-date-time, Signature=ABCDEF"
    assert parse_authorization(header) == ("appKey01", "ABCDEF")
    assert parse_authorization("") is None
    assert parse_authorization("MQv2-HMAC-SHA1 Credential=appKey01") is None
    expected = hmac.new(b"secret", b"20261123T120000Z", hashlib.sha1).hexdigest()
    assert grpc_signature("secret", "20261123T120000Z") == expected
    assert peer_host("ipv4:127.0.0.1:5555") == "127.0.0.1"
    assert peer_host("ipv6:[::1]:5555") == "::1"


def _res(name: str) -> pb.Resource:
    return pb.Resource(name=name)


def test_what_each_request_needs() -> None:
    send = spb.SendMessageRequest(messages=[pb.Message(topic=_res("orders")), pb.Message(topic=_res("orders"))])
    assert needs_of_message(send).resources == {"orders": Perm.PUB}
    receive = spb.ReceiveMessageRequest(group=_res("g"), message_queue=pb.MessageQueue(topic=_res("orders")))
    assert needs_of_message(receive).resources == {"%RETRY%g": Perm.SUB, "orders": Perm.SUB}
    ack = spb.AckMessageRequest(group=_res("g"), topic=_res("orders"))
    assert needs_of_message(ack).resources == {"%RETRY%g": Perm.SUB, "orders": Perm.SUB}
    assert needs_of_message(spb.QueryRouteRequest(topic=_res("orders"))).resources == {"orders": Perm.ANY}
    assert needs_of_message(spb.EndTransactionRequest(topic=_res("orders"))).resources == {"orders": Perm.PUB}
    assert needs_of_message(spb.RecallMessageRequest(topic=_res("orders"))).resources == {"orders": Perm.PUB}
    mq = pb.MessageQueue(topic=_res("orders"))
    for pulling in (spb.PullMessageRequest(group=_res("g"), message_queue=mq),
                    spb.UpdateOffsetRequest(group=_res("g"), message_queue=mq),
                    spb.GetOffsetRequest(group=_res("g"), message_queue=mq)):
        assert needs_of_message(pulling).resources == {"%RETRY%g": Perm.SUB, "orders": Perm.SUB}
    assert needs_of_message(spb.QueryOffsetRequest(message_queue=mq)).resources == {"orders": Perm.SUB}
    producer_beat = spb.HeartbeatRequest(client_type=pb.ClientType.PRODUCER)
    assert needs_of_message(producer_beat).resources == {}
    consumer_beat = spb.HeartbeatRequest(client_type=pb.ClientType.SIMPLE_CONSUMER, group=_res("g"))
    assert needs_of_message(consumer_beat).resources == {"%RETRY%g": Perm.SUB}
    with pytest.raises(ResourceParseError):
        needs_of_message(spb.HeartbeatRequest(client_type=pb.ClientType.PUSH_CONSUMER))
    publishing = spb.TelemetryCommand(settings=pb.Settings(publishing=pb.Publishing(topics=[_res("orders")])))
    assert needs_of_message(publishing).resources == {"orders": Perm.PUB}
    subscribing = spb.TelemetryCommand(settings=pb.Settings(subscription=pb.Subscription(
        group=_res("g"), subscriptions=[pb.SubscriptionEntry(topic=_res("orders"))])))
    assert needs_of_message(subscribing).resources == {"%RETRY%g": Perm.SUB, "orders": Perm.SUB}
    with pytest.raises(ResourceParseError):
        needs_of_message(spb.TelemetryCommand(settings=pb.Settings()))
    mixed = spb.SendMessageRequest(messages=[pb.Message(topic=_res("a")), pb.Message(topic=_res("b"))])
    with pytest.raises(ResourceParseError):
        needs_of_message(mixed)
