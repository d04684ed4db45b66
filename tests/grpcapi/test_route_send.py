"""The gRPC endpoint of a real `ferrymq standalone`, spoken to with ferrymq's own generated
apache.rocketmq.v2 stubs: routes, sends and their status codes, telemetry settings, heartbeats.
The official SDK's runs are in tests/compat/test_grpc_sdk.py."""

from __future__ import annotations

import itertools
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from google.protobuf.timestamp_pb2 import Timestamp

from conftest import Standalone, start_standalone
from ferrymq import AdminClient
from ferrymq.grpc.pb import definition_pb2 as pb
from ferrymq.grpc.pb import service_pb2 as spb
from ferrymq.grpc.pb import service_pb2_grpc as sgrpc
from grpc_answers import pull_answer
from waits import wait_until

_ids = itertools.count()


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Standalone]:
    base = tmp_path_factory.mktemp("grpc")
    config = base / "broker.toml"
    config.write_text("max_message_size = 4096\n")
    srv = start_standalone(base / "store", "--config", str(config))
    try:
        yield srv
    finally:
        srv.stop()


@pytest.fixture(scope="module")
def admin(server: Standalone) -> Iterator[AdminClient]:
    with AdminClient(server.namesrv) as client:
        yield client


@pytest.fixture(scope="module")
def stub(server: Standalone) -> Iterator[sgrpc.MessagingServiceStub]:
    with grpc.insecure_channel(server.grpc) as channel:
        yield sgrpc.MessagingServiceStub(channel)


def meta(client_id: str = "test-client") -> list[tuple[str, str]]:
    return [("x-mq-client-id", client_id), ("x-mq-language", "PYTHON"), ("x-mq-client-version", "5.1.2")]


def access_point(server: Standalone) -> pb.Endpoints:
    host, port = server.grpc.rsplit(":", 1)
    return pb.Endpoints(scheme=pb.IPv4, addresses=[pb.Address(host=host, port=int(port))])


def route(stub: sgrpc.MessagingServiceStub, server: Standalone, topic: str) -> spb.QueryRouteResponse:
    return stub.QueryRoute(spb.QueryRouteRequest(topic=pb.Resource(name=topic), endpoints=access_point(server)),
                           metadata=meta())


def message(topic: str, body: bytes = b"hello", **system: object) -> pb.Message:
    fields: dict[str, object] = {"message_id": f"01TEST{next(_ids):08d}", "message_type": pb.NORMAL, **system}
    sp = pb.SystemProperties(**fields)  # type: ignore[arg-type]
    return pb.Message(topic=pb.Resource(name=topic), body=body, system_properties=sp)


def with_property(msg: pb.Message, key: str, value: str) -> pb.Message:
    msg.user_properties[key] = value
    return msg


def send(stub: sgrpc.MessagingServiceStub, *msgs: pb.Message) -> spb.SendMessageResponse:
    return stub.SendMessage(spb.SendMessageRequest(messages=list(msgs)), metadata=meta())


def test_the_ready_line_names_the_grpc_endpoint(server: Standalone) -> None:
    host, port = server.grpc.rsplit(":", 1)
    assert host == "127.0.0.1" and int(port) > 0


def test_route_lists_the_queues_pointing_at_this_endpoint(stub: sgrpc.MessagingServiceStub, server: Standalone,
                                                         admin: AdminClient) -> None:
    admin.create_topic("route-rw", 3)
    resp = route(stub, server, "route-rw")
    assert resp.status.code == pb.OK
    assert [q.id for q in resp.message_queues] == [0, 1, 2]
    for q in resp.message_queues:
        assert q.permission == pb.READ_WRITE
        assert q.broker.name == "broker-a" and q.broker.id == 0
        assert q.broker.endpoints == access_point(server)
        assert list(q.accept_message_types) == [pb.NORMAL]  # no type: RocketMQ's NORMAL
    # A client that reached the endpoint by another name (a server on 0.0.0.0, a DNS name, a
    # NAT) is pointed back that way, with the endpoint's own port, as RocketMQ's proxy does;
    # the listening address it pointed at before sent it nowhere.
    port = int(server.grpc.rsplit(":", 1)[1])
    by_name = pb.Endpoints(scheme=pb.DOMAIN_NAME, addresses=[pb.Address(host="localhost", port=1)])
    for resp in (stub.QueryRoute(spb.QueryRouteRequest(topic=pb.Resource(name="route-rw"), endpoints=by_name),
                                 metadata=meta()),
                 stub.QueryAssignment(spb.QueryAssignmentRequest(topic=pb.Resource(name="route-rw"),
                                                                 group=pb.Resource(name="route-g"), endpoints=by_name),
                                      metadata=meta())):
        assert resp.status.code == pb.OK, resp.status
        queues = list(resp.message_queues) if isinstance(resp, spb.QueryRouteResponse) else [
            a.message_queue for a in resp.assignments]
        assert queues and all(q.broker.endpoints == pb.Endpoints(
            scheme=pb.DOMAIN_NAME, addresses=[pb.Address(host="localhost", port=port)]) for q in queues), queues


def test_a_topics_type_is_what_its_queues_accept_and_a_send_of_another_is_refused(
        stub: sgrpc.MessagingServiceStub, server: Standalone, admin: AdminClient) -> None:
    admin.create_topic("route-fifo", 2, order=True)
    admin.create_topic("route-delay", 1, message_type="DELAY")
    admin.create_topic("route-plain", 1)
    accepted = {t: {tuple(q.accept_message_types) for q in route(stub, server, t).message_queues}
                for t in ("route-fifo", "route-delay", "route-plain")}
    assert accepted == {"route-fifo": {(pb.FIFO,)}, "route-delay": {(pb.DELAY,)}, "route-plain": {(pb.NORMAL,)}}
    later = Timestamp(seconds=int(time.time()) + 60)
    refused = send(stub, message("route-delay"))
    assert refused.status.code == pb.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE
    assert refused.status.message == ("TopicMessageType validate failed, the expected type is DELAY, "
                                      "but actual type is NORMAL")
    refused = send(stub, message("route-plain", message_type=pb.DELAY, delivery_timestamp=later))
    assert refused.status.code == pb.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE
    assert "the expected type is NORMAL, but actual type is DELAY" in refused.status.message
    assert send(stub, message("route-delay", message_type=pb.DELAY, delivery_timestamp=later)).status.code == pb.OK
    assert send(stub, message("route-fifo", message_type=pb.FIFO, message_group="g")).status.code == pb.OK
    assert admin.max_offset(admin.message_queues("route-plain")[0]) == 0
    # A permission change sends no order flag: the FIFO type still makes a FIFO group's
    # assignment one per queue.
    admin.update_topic_perm("route-fifo", 6)
    assigned = stub.QueryAssignment(spb.QueryAssignmentRequest(
        topic=pb.Resource(name="route-fifo"), group=pb.Resource(name="route-fifo-g"),
        endpoints=access_point(server)), metadata=meta())
    assert sorted(a.message_queue.id for a in assigned.assignments) == [0, 1]


def test_a_read_only_topic_has_read_queues_and_refuses_sends(stub: sgrpc.MessagingServiceStub, server: Standalone,
                                                             admin: AdminClient) -> None:
    admin.create_topic("route-ro", 2)
    admin.update_topic_perm("route-ro", 4)
    resp = wait_until(lambda: (r := route(stub, server, "route-ro")).message_queues
                      and r.message_queues[0].permission == pb.READ and r, what="read-only route")
    assert [q.permission for q in resp.message_queues] == [pb.READ, pb.READ]
    sent = send(stub, message("route-ro"))
    assert sent.status.code == pb.FORBIDDEN


@pytest.mark.parametrize(("topic", "code"), [
    ("route-unknown", pb.TOPIC_NOT_FOUND),
    ("bad topic!", pb.ILLEGAL_TOPIC),
    ("TBW102", pb.ILLEGAL_TOPIC),
    ("%RETRY%g", pb.ILLEGAL_TOPIC),
])
def test_route_refusals(stub: sgrpc.MessagingServiceStub, server: Standalone, topic: str, code: int) -> None:
    assert route(stub, server, topic).status.code == code


def test_route_without_endpoints_is_an_illegal_access_point(stub: sgrpc.MessagingServiceStub) -> None:
    resp = stub.QueryRoute(spb.QueryRouteRequest(topic=pb.Resource(name="route-rw")), metadata=meta())
    assert resp.status.code == pb.ILLEGAL_ACCESS_POINT


def test_send_stores_with_the_client_message_id(stub: sgrpc.MessagingServiceStub, admin: AdminClient) -> None:
    admin.create_topic("send-ok", 1)
    msg = message("send-ok", b"payload", tag="TagA", keys=["k1", "k2"])
    msg.user_properties["color"] = "red"
    resp = send(stub, msg)
    assert resp.status.code == pb.OK, resp.status
    [entry] = resp.entries
    assert entry.status.code == pb.OK and entry.message_id == msg.system_properties.message_id
    assert entry.offset == 0
    stored = admin.query_by_uniq_key("send-ok", entry.message_id)
    assert stored.body == b"payload" and stored.tags == "TagA" and stored.keys == "k1 k2"
    assert stored.properties["color"] == "red"
    assert send(stub, message("send-ok")).entries[0].offset == 1


def test_a_batch_goes_to_one_queue(stub: sgrpc.MessagingServiceStub, admin: AdminClient) -> None:
    admin.create_topic("send-batch", 4)
    resp = send(stub, *(message("send-batch", f"b{i}".encode()) for i in range(5)))
    assert resp.status.code == pb.OK
    assert [e.offset for e in resp.entries] == [0, 1, 2, 3, 4]


@pytest.mark.parametrize(("build", "code"), [
    (lambda: message("send-bad", b""), pb.MESSAGE_BODY_EMPTY),
    (lambda: message("send-bad", b"x" * 5000), pb.MESSAGE_BODY_TOO_LARGE),
    (lambda: message("send-bad", tag="a|b"), pb.ILLEGAL_MESSAGE_TAG),
    # Control characters: C0, DEL and C1 are refused; U+00A0 and beyond are text.
    (lambda: message("send-bad", tag="a\x01"), pb.ILLEGAL_MESSAGE_TAG),
    (lambda: message("send-bad", keys=["k\x7f"]), pb.ILLEGAL_MESSAGE_KEY),
    (lambda: with_property(message("send-bad"), "k", "v\x9f"), pb.ILLEGAL_MESSAGE_PROPERTY_KEY),
    (lambda: with_property(message("send-bad"), "k\x1f", "v"), pb.ILLEGAL_MESSAGE_PROPERTY_KEY),
    (lambda: message("send-bad", message_group=" "), pb.ILLEGAL_MESSAGE_GROUP),
    (lambda: pb.Message(topic=pb.Resource(name="send-bad"), body=b"x"), pb.ILLEGAL_MESSAGE_ID),
    (lambda: message("send-bad", message_type=pb.TRANSACTION, message_group="g"),
     pb.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE),
    (lambda: message("send-bad", message_type=pb.FIFO), pb.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE),
    (lambda: message("send-nope"), pb.TOPIC_NOT_FOUND),
])
def test_send_refusals(stub: sgrpc.MessagingServiceStub, admin: AdminClient, build: object, code: int) -> None:
    admin.create_topic("send-bad", 1)
    resp = send(stub, build())  # type: ignore[operator]
    assert resp.status.code == code, resp.status
    assert resp.entries[0].status.code == code
    assert admin.max_offset(admin.message_queues("send-bad")[0]) == 0


def test_text_beyond_the_control_characters_is_sent(stub: sgrpc.MessagingServiceStub, admin: AdminClient) -> None:
    admin.create_topic("send-text", 1)
    msg = with_property(message("send-text", tag="t\xa0\u00e9", keys=["k\u4e2d"]), "k\xa0", "v\u00e9\u4e2d")
    assert send(stub, msg).status.code == pb.OK
    assert admin.max_offset(admin.message_queues("send-text")[0]) == 1


def test_a_reserved_property_name_is_refused(stub: sgrpc.MessagingServiceStub, admin: AdminClient) -> None:
    admin.create_topic("send-bad", 1)
    msg = message("send-bad")
    msg.user_properties["UNIQ_KEY"] = "mine"
    assert send(stub, msg).status.code == pb.ILLEGAL_MESSAGE_PROPERTY_KEY


def telemetry(stub: sgrpc.MessagingServiceStub, settings: pb.Settings, client_id: str) -> spb.TelemetryCommand:
    call = stub.Telemetry(iter([spb.TelemetryCommand(settings=settings)]), metadata=meta(client_id))
    return next(call)


def test_producer_settings_carry_the_broker_limits(stub: sgrpc.MessagingServiceStub, admin: AdminClient) -> None:
    admin.create_topic("settings-p", 1)
    mine = pb.Settings(client_type=pb.PRODUCER,
                       publishing=pb.Publishing(topics=[pb.Resource(name="settings-p")], max_body_size=1 << 27))
    reply = telemetry(stub, mine, "settings-producer")
    assert reply.status.code == pb.OK
    assert reply.settings.publishing.max_body_size == 4096, "the broker's max_message_size"
    assert reply.settings.backoff_policy.max_attempts == 3
    assert reply.settings.backoff_policy.WhichOneof("strategy") == "exponential_backoff"


def test_consumer_settings_carry_long_polling_and_the_retry_delays(stub: sgrpc.MessagingServiceStub,
                                                                  admin: AdminClient) -> None:
    admin.create_topic("settings-c", 1)
    mine = pb.Settings(client_type=pb.SIMPLE_CONSUMER, subscription=pb.Subscription(
        group=pb.Resource(name="settings-g"),
        subscriptions=[pb.SubscriptionEntry(topic=pb.Resource(name="settings-c"),
                                            expression=pb.FilterExpression(type=pb.TAG, expression="*"))]))
    reply = telemetry(stub, mine, "settings-consumer")
    sub = reply.settings.subscription
    assert sub.long_polling_timeout.seconds == 20 and sub.receive_batch_size == 32 and not sub.fifo
    policy = reply.settings.backoff_policy
    assert policy.max_attempts == 17, "max_reconsume_times 16, plus the first delivery"
    # The test server's delay levels from level 3 on: 300ms 400ms ...
    assert [d.nanos // 1_000_000 for d in policy.customized_backoff.next[:2]] == [300, 400]
    # A group's own retry count decides its consumers' attempts (RocketMQ's retryMaxTimes).
    admin.update_subscription_group("settings-g3", {"retry_max_times": 3})
    mine.subscription.group.name = "settings-g3"
    assert telemetry(stub, mine, "settings-consumer-3").settings.backoff_policy.max_attempts == 4


def test_settings_without_publishing_or_subscription_end_the_stream(stub: sgrpc.MessagingServiceStub) -> None:
    with pytest.raises(grpc.RpcError) as info:
        telemetry(stub, pb.Settings(client_type=pb.PRODUCER), "settings-empty")
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT


def test_heartbeat_needs_settings_first_and_registers_the_consumer(stub: sgrpc.MessagingServiceStub,
                                                                   admin: AdminClient) -> None:
    refused = stub.Heartbeat(spb.HeartbeatRequest(client_type=pb.SIMPLE_CONSUMER), metadata=meta("hb-client"))
    assert refused.status.code == pb.UNRECOGNIZED_CLIENT_TYPE
    admin.create_topic("hb-topic", 1)
    settings = pb.Settings(client_type=pb.SIMPLE_CONSUMER, subscription=pb.Subscription(
        group=pb.Resource(name="hb-group"),
        subscriptions=[pb.SubscriptionEntry(topic=pb.Resource(name="hb-topic"),
                                            expression=pb.FilterExpression(type=pb.TAG, expression="TagA"))]))
    call = stub.Telemetry(iter([spb.TelemetryCommand(settings=settings)]), metadata=meta("hb-client"))
    assert next(call).status.code == pb.OK
    ok = stub.Heartbeat(spb.HeartbeatRequest(group=pb.Resource(name="hb-group"), client_type=pb.SIMPLE_CONSUMER),
                        metadata=meta("hb-client"))
    assert ok.status.code == pb.OK
    conns = admin.consumer_connections("hb-group")
    assert [c.client_id for c in conns.connections] == ["hb-client"]
    assert conns.consume_type == "CONSUME_ACTIVELY"
    done = stub.NotifyClientTermination(spb.NotifyClientTerminationRequest(group=pb.Resource(name="hb-group")),
                                        metadata=meta("hb-client"))
    assert done.status.code == pb.OK
    call.cancel()


def test_a_taken_grpc_port_stops_the_start_with_one_line(server: Standalone, tmp_path: Path) -> None:
    port = server.grpc.rsplit(":", 1)[1]
    with pytest.raises(RuntimeError) as info:
        start_standalone(tmp_path / "store", "--grpc-port", port)
    assert "cannot start" in str(info.value) and port in str(info.value)


def test_ack_and_change_with_a_foreign_receipt_handle_are_refused(stub: sgrpc.MessagingServiceStub,
                                                                   admin: AdminClient) -> None:
    admin.create_topic("ack-bad", 1)
    ack = stub.AckMessage(spb.AckMessageRequest(
        group=pb.Resource(name="ack-g"), topic=pb.Resource(name="ack-bad"),
        entries=[spb.AckMessageEntry(message_id="x", receipt_handle="not-ours")]), metadata=meta())
    assert ack.status.code == pb.INVALID_RECEIPT_HANDLE
    assert ack.entries[0].status.code == pb.INVALID_RECEIPT_HANDLE
    change = stub.ChangeInvisibleDuration(spb.ChangeInvisibleDurationRequest(
        group=pb.Resource(name="ack-g"), topic=pb.Resource(name="ack-bad"),
        receipt_handle="f1 ack-bad 0 0 1 1000"), metadata=meta())
    assert change.status.code == pb.INVALID_RECEIPT_HANDLE, "never handed out: not in flight"


def test_an_empty_receive_is_message_not_found_then_the_delivery_timestamp(stub: sgrpc.MessagingServiceStub,
                                                                          admin: AdminClient) -> None:
    from google.protobuf.duration_pb2 import Duration

    admin.create_topic("recv-empty", 1)
    req = spb.ReceiveMessageRequest(
        group=pb.Resource(name="recv-g"), message_queue=pb.MessageQueue(topic=pb.Resource(name="recv-empty"), id=-1),
        filter_expression=pb.FilterExpression(type=pb.TAG, expression="*"), batch_size=4,
        invisible_duration=Duration(seconds=5), long_polling_timeout=Duration(nanos=200_000_000))
    answers = list(stub.ReceiveMessage(req, metadata=meta(), timeout=10))
    assert [a.WhichOneof("content") for a in answers] == ["status", "delivery_timestamp"]
    assert answers[0].status.code == pb.MESSAGE_NOT_FOUND
    bad = spb.ReceiveMessageRequest()
    bad.CopyFrom(req)
    bad.filter_expression.CopyFrom(pb.FilterExpression(type=pb.SQL, expression="a >"))
    answers = list(stub.ReceiveMessage(bad, metadata=meta(), timeout=10))
    assert answers[0].status.code == pb.ILLEGAL_FILTER_EXPRESSION
    short = spb.ReceiveMessageRequest()
    short.CopyFrom(req)
    short.invisible_duration.CopyFrom(Duration(nanos=10_000_000))
    assert next(iter(stub.ReceiveMessage(short, metadata=meta(), timeout=10))).status.code == pb.ILLEGAL_INVISIBLE_TIME
    # A group whose subscription group entry disables consumption is refused (RocketMQ's
    # NO_PERMISSION, FORBIDDEN over gRPC as its proxy answers).
    admin.update_subscription_group("recv-g", {"consume_enable": False})
    refused = next(iter(stub.ReceiveMessage(req, metadata=meta(), timeout=10))).status
    assert (refused.code, refused.message) == (pb.FORBIDDEN, "subscription group no permission, recv-g")


def _pull(stub: sgrpc.MessagingServiceStub, topic: str, offset: int, *, batch: int = 32, tag: str = "*",
          poll_s: float = 0, queue_id: int = 0) -> tuple[int, list[pb.Message], int | None]:
    """A PullMessage's stream as (status code, messages, next offset)."""
    req = spb.PullMessageRequest(group=pb.Resource(name="pull-g"), offset=offset, batch_size=batch,
                                 message_queue=pb.MessageQueue(topic=pb.Resource(name=topic), id=queue_id),
                                 filter_expression=pb.FilterExpression(type=pb.TAG, expression=tag))
    req.long_polling_timeout.FromMilliseconds(int(poll_s * 1000))
    return pull_answer(stub.PullMessage(req, metadata=meta(), timeout=30))


def test_pull_style_calls_read_a_queue_from_an_offset_and_keep_the_groups_offset(
        stub: sgrpc.MessagingServiceStub, admin: AdminClient) -> None:
    admin.create_topic("pull-q", 1)
    for tag in ("A", "B", "A"):
        assert send(stub, message("pull-q", tag.encode(), tag=tag)).status.code == pb.OK
    mq = pb.MessageQueue(topic=pb.Resource(name="pull-q"), id=0)
    group = pb.Resource(name="pull-g")

    def query(policy: int, **ts: Timestamp) -> int:
        resp = stub.QueryOffset(spb.QueryOffsetRequest(message_queue=mq, query_offset_policy=policy, **ts),
                                metadata=meta())
        assert resp.status.code == pb.OK, resp.status
        return resp.offset

    assert (query(pb.BEGINNING), query(pb.END), query(pb.TIMESTAMP, timestamp=Timestamp(seconds=0))) == (0, 3, 0)
    code, msgs, nxt = _pull(stub, "pull-q", 0, batch=2)
    assert (code, [m.body for m in msgs], nxt) == (pb.OK, [b"A", b"B"], 2)
    assert [m.system_properties.queue_offset for m in msgs] == [0, 1]
    code, msgs, nxt = _pull(stub, "pull-q", 0, tag="A")
    assert (code, [m.system_properties.tag for m in msgs], nxt) == (pb.OK, ["A", "A"], 3)
    assert _pull(stub, "pull-q", 3) == (pb.MESSAGE_NOT_FOUND, [], 3)
    assert _pull(stub, "pull-q", 100)[::2] == (pb.ILLEGAL_OFFSET, 3)
    assert _pull(stub, "pull-q", 0, queue_id=5)[0] == pb.BAD_REQUEST
    assert _pull(stub, "pull-nope", 0)[0] == pb.TOPIC_NOT_FOUND
    # A held pull answers with what arrives (sent at once, before or while it is held).
    assert send(stub, message("pull-q", b"late")).status.code == pb.OK
    code, msgs, nxt = _pull(stub, "pull-q", 3, poll_s=10)
    assert (code, [m.body for m in msgs], nxt) == (pb.OK, [b"late"], 4)

    got = stub.GetOffset(spb.GetOffsetRequest(group=group, message_queue=mq), metadata=meta())
    assert got.status.code == pb.OFFSET_NOT_FOUND
    updated = stub.UpdateOffset(spb.UpdateOffsetRequest(group=group, message_queue=mq, offset=2), metadata=meta())
    assert updated.status.code == pb.OK
    got = stub.GetOffset(spb.GetOffsetRequest(group=group, message_queue=mq), metadata=meta())
    assert (got.status.code, got.offset) == (pb.OK, 2)
    # The same offset table as the 4.x clients': the admin sees the group's progress.
    assert [(p.consumer_offset, p.broker_offset) for p in admin.group_progress("pull-g")] == [(2, 4)]


def test_recall_cancels_a_delayed_message_before_its_delivery_time(stub: sgrpc.MessagingServiceStub,
                                                                   admin: AdminClient) -> None:
    admin.create_topic("recall-t", 1, message_type="DELAY")
    later = Timestamp(seconds=int(time.time()) + 3)
    kept, dropped = (send(stub, message("recall-t", body, message_type=pb.DELAY, delivery_timestamp=later)).entries[0]
                     for body in (b"keep", b"drop"))
    assert kept.recall_handle and dropped.recall_handle
    assert send(stub, message("route-rw")).entries[0].recall_handle == ""  # delivered at once: none

    def recall(topic: str, handle: str) -> spb.RecallMessageResponse:
        return stub.RecallMessage(spb.RecallMessageRequest(topic=pb.Resource(name=topic), recall_handle=handle),
                                  metadata=meta())

    wrong = recall("route-rw", dropped.recall_handle)
    assert (wrong.status.code, wrong.status.message) == (pb.BAD_REQUEST, "recall failed, topic not match")
    assert recall("recall-t", "bm90IGEgaGFuZGxl").status.message == "recall handle is invalid"
    done = recall("recall-t", dropped.recall_handle)
    assert (done.status.code, done.message_id) == (pb.OK, dropped.message_id)
    mq = admin.message_queues("recall-t")[0]
    wait_until(lambda: admin.max_offset(mq) >= 1, 30, what="the kept message's delivery")
    assert [m.msg_id for m in admin.pull(mq, 0, 32).messages] == [kept.message_id]
