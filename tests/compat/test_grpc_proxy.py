"""`ferrymq proxy` (RocketMQ 5's proxy in cluster mode) in front of a name server and two broker
groups, all real processes, driven by the official RocketMQ 5 Python SDK: routes list both
groups' queues behind the proxy's endpoint, sends spread over both groups, a SimpleConsumer and
a PushConsumer of new groups receive every message once, and a proxy SIGKILLed and restarted
mid-stream loses nothing acknowledged, transactions are committed, rolled back and checked back
through it, FIFO message groups keep their order, and a controller-mode group's master SIGKILLed
under a stream of sends: the SDK keeps sending through the proxy after the slave is elected."""

from __future__ import annotations

import urllib.request
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import grpc
import pytest
from compat_util import Clients, py5_python_or_skip, run_producer
from compat_util import clients as clients
from google.protobuf.duration_pb2 import Duration

from ferrymq import AdminClient
from ferrymq.common.message import MessageQueue
from ferrymq.embedded.cluster import start_cluster
from ferrymq.embedded.process import ServerProcess
from ferrymq.grpc.pb import definition_pb2 as pb
from ferrymq.grpc.pb import service_pb2 as spb
from ferrymq.grpc.pb import service_pb2_grpc as sgrpc
from grpc_answers import pull_answer
from tlscerts import make_tls_files
from waits import wait_until

pytestmark = pytest.mark.compat

BROKERS = ("broker-a", "broker-b")
MAX_SIZE = 1 << 20


def _port(addr: str | None) -> str:
    return addr.rsplit(":", 1)[1] if addr else "0"


@dataclass
class ProxyCluster:
    namesrv_proc: ServerProcess
    brokers: list[ServerProcess]
    proxy: ServerProcess
    other_proxy: ServerProcess

    @property
    def namesrv(self) -> str:
        return self.namesrv_proc.ready["namesrv"]

    @property
    def grpc(self) -> str:
        return self.proxy.ready["grpc"]

    @property
    def log_lines(self) -> list[str]:
        return [line + "\n" for line in self.proxy.log_tail(30).splitlines()]

    def processes(self) -> list[ServerProcess]:
        return [self.proxy, self.other_proxy, *self.brokers, self.namesrv_proc]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ProxyCluster]:
    py5_python_or_skip()
    base = tmp_path_factory.mktemp("proxy")
    logs = base / "logs"
    ns = ServerProcess("namesrv", lambda: ["namesrv", "--port", "0"], logs / "namesrv.log", "namesrv")
    ns.start()
    addr = ns.ready["namesrv"]
    config = base / "broker.toml"
    # Not the defaults, so a test sees the proxy give its clients the brokers' own settings.
    config.write_text("transaction_check_interval_ms = 500\ntransaction_timeout_ms = 1000\n"
                      f"max_message_size = {MAX_SIZE}\nmax_reconsume_times = 5\n"
                      'message_delay_level = "1s 2s 3s 4s 5s 6s"\n')

    def broker(name: str) -> ServerProcess:
        def argv() -> list[str]:
            return ["broker", "--namesrv", addr, "--store-dir", str(base / name), "--broker-name", name,
                    "--broker-port", _port(proc.ready.get("broker")), "--ha-port", "0", "--grpc-port", "-1",
                    "--config", str(config)]
        proc = ServerProcess(name, argv, logs / f"{name}.log", "broker")
        return proc

    brokers = [broker(name) for name in BROKERS]
    proxy = ServerProcess("proxy", lambda: ["proxy", "--namesrv", addr, "--grpc-port",
                                            _port(proxy.ready.get("grpc"))], logs / "proxy.log", "proxy grpc")
    # Its isolation outlasts the frozen-broker test's sends, however slow the machine.
    other = ServerProcess("proxy-2", lambda: ["proxy", "--namesrv", addr, "--grpc-port", "0", "--metrics-port", "0",
                                              "--send-isolation", "600"],
                          logs / "proxy-2.log", "proxy grpc")
    cluster = ProxyCluster(ns, brokers, proxy, other)
    try:
        # All at once: a proxy needs no broker to start, and the machine's cores are shared.
        with ThreadPoolExecutor(4) as pool:
            for started in [pool.submit(p.start) for p in (*brokers, proxy, other)]:
                started.result()
        yield cluster
    finally:
        for p in cluster.processes():
            p.kill()


@pytest.fixture(scope="module")
def admin(server: ProxyCluster) -> Iterator[AdminClient]:
    with AdminClient(server.namesrv) as client:
        yield client


def _create(admin: AdminClient, topic: str, queues: int, *, order: bool = False,
            message_type: str | None = None) -> None:
    admin.create_topic(topic, queues, order=order, message_type=message_type)
    wait_until(lambda: {mq.broker_name for mq in admin.message_queues(topic)} == set(BROKERS), 30,
               what=f"{topic} on both broker groups")


def _stored(admin: AdminClient, topic: str, queues: int) -> dict[str, int]:
    return {b: sum(admin.max_offset(MessageQueue(topic, b, q)) for q in range(queues)) for b in BROKERS}


def test_route_send_and_receive_across_two_broker_groups(server: ProxyCluster, clients: Clients,
                                                         admin: AdminClient) -> None:
    topic, n = "px-basic", 40
    _create(admin, topic, 2)
    host, port = server.grpc.rsplit(":", 1)
    access = pb.Endpoints(scheme=pb.IPv4, addresses=[pb.Address(host=host, port=int(port))])
    with grpc.insecure_channel(server.grpc) as channel:
        route = sgrpc.MessagingServiceStub(channel).QueryRoute(
            spb.QueryRouteRequest(topic=pb.Resource(name=topic), endpoints=access),
            metadata=[("x-mq-client-id", "px-route"), ("x-mq-language", "PYTHON")])
    assert route.status.code == pb.OK, route.status
    assert sorted((q.broker.name, q.id) for q in route.message_queues) == [
        (b, i) for b in BROKERS for i in range(2)]
    assert all(q.broker.endpoints == access for q in route.message_queues), "every queue is behind the proxy"

    sent = run_producer(clients.sdk5("produce", topic=topic, count=n, tags="T"), n, 60)
    stored = _stored(admin, topic, 2)
    assert sum(stored.values()) == n and all(stored.values()), f"sends reach both groups: {stored}"

    # Consumer groups new to the topic, started after the sends.
    simple = clients.sdk5("simple", topic=topic, group="px-simple", expect=n, invisibleSec=20, awaitSec=1)
    push = clients.sdk5("push", topic=topic, group="px-push", expect=n)
    bodies = sorted(s["body"] for s in sent)
    for consumer in (simple, push):
        assert consumer.wait_exit(90) == 0, consumer.diag()
        received = consumer.of("received")
        assert sorted(e["body"] for e in received) == bodies, f"{consumer.name}: each message once"
        assert all(e["deliveryAttempt"] == 1 and e["tag"] == "T" and e["properties"] == {} for e in received), \
            received[:2]
    assert len(simple.of("acked")) == n
    for group in ("px-simple", "px-push"):
        wait_until(lambda g=group: sum(p.lag for p in admin.group_progress(g)) == 0, 30,  # type: ignore[misc]
                   what=f"{group}'s acknowledgements on both brokers")


def _telemetry(stub: sgrpc.MessagingServiceStub, settings: pb.Settings, client_id: str) -> pb.Settings:
    call = stub.Telemetry(iter([spb.TelemetryCommand(settings=settings)]),
                          metadata=[("x-mq-client-id", client_id), ("x-mq-language", "PYTHON")])
    reply = next(call)
    assert reply.status.code == pb.OK, reply.status
    call.cancel()
    return reply.settings


def test_clients_get_the_brokers_own_settings_through_the_proxy(server: ProxyCluster, admin: AdminClient) -> None:
    """The brokers run a 1 MiB message limit, 5 retries and their own delay levels; a group's
    retry count set on the brokers reaches its consumers (RocketMQ's retryMaxTimes)."""
    topic = "px-settings"
    _create(admin, topic, 1)
    admin.update_subscription_group("px-settings-g3", {"retry_max_times": 3})
    with grpc.insecure_channel(server.grpc) as channel:
        stub = sgrpc.MessagingServiceStub(channel)
        producer = _telemetry(stub, pb.Settings(client_type=pb.PRODUCER, publishing=pb.Publishing(
            topics=[pb.Resource(name=topic)], max_body_size=1 << 27)), "px-settings-p")
        assert producer.publishing.max_body_size == MAX_SIZE
        consumer = pb.Settings(client_type=pb.SIMPLE_CONSUMER, subscription=pb.Subscription(
            group=pb.Resource(name="px-settings-g"), subscriptions=[pb.SubscriptionEntry(
                topic=pb.Resource(name=topic), expression=pb.FilterExpression(type=pb.TAG, expression="*"))]))
        policy = _telemetry(stub, consumer, "px-settings-c").backoff_policy
        assert policy.max_attempts == 6, "the brokers' max_reconsume_times 5, plus the first delivery"
        assert [d.seconds for d in policy.customized_backoff.next] == [3, 4, 5, 6], "their delay levels from 3 on"
        consumer.subscription.group.name = "px-settings-g3"
        assert _telemetry(stub, consumer, "px-settings-c3").backoff_policy.max_attempts == 4
        # A body over the brokers' limit is refused by the proxy, as by the broker's own endpoint.
        sent = stub.SendMessage(spb.SendMessageRequest(messages=[pb.Message(
            topic=pb.Resource(name=topic), body=b"x" * (MAX_SIZE + 1),
            system_properties=pb.SystemProperties(message_id="01PXBIG0001", message_type=pb.NORMAL))]),
            metadata=[("x-mq-client-id", "px-settings-p"), ("x-mq-language", "PYTHON")])
        assert sent.status.code == pb.MESSAGE_BODY_TOO_LARGE, sent.status


def test_pull_style_calls_go_to_the_broker_group_the_queue_names(server: ProxyCluster, admin: AdminClient) -> None:
    """PullMessage, QueryOffset, GetOffset and UpdateOffset (no call of SDK 5.1.2: a raw stub)
    on each group's queue 0 through the proxy: together the two groups hold every message sent."""
    topic, group = "px-pull", pb.Resource(name="px-pull-g")
    _create(admin, topic, 1)
    meta = [("x-mq-client-id", "px-pull"), ("x-mq-language", "PYTHON")]
    bodies = {f"p-{i}".encode() for i in range(6)}
    with grpc.insecure_channel(server.grpc) as channel:
        stub = sgrpc.MessagingServiceStub(channel)
        for i, body in enumerate(sorted(bodies)):
            sent = stub.SendMessage(spb.SendMessageRequest(messages=[pb.Message(
                topic=pb.Resource(name=topic), body=body, system_properties=pb.SystemProperties(
                    message_id=f"01PXPULL{i:04d}", message_type=pb.NORMAL, tag="A" if i % 3 == 0 else "B"))]),
                metadata=meta)
            assert sent.status.code == pb.OK, sent.status

        def queue(broker: str) -> pb.MessageQueue:
            return pb.MessageQueue(topic=pb.Resource(name=topic), id=0, broker=pb.Broker(name=broker))

        def pull(broker: str, offset: int, tag: str = "*") -> tuple[int, list[pb.Message], int | None]:
            req = spb.PullMessageRequest(group=group, message_queue=queue(broker), offset=offset, batch_size=32,
                                         filter_expression=pb.FilterExpression(type=pb.TAG, expression=tag))
            return pull_answer(stub.PullMessage(req, metadata=meta, timeout=30))

        def query(broker: str, policy: int) -> int:
            resp = stub.QueryOffset(spb.QueryOffsetRequest(message_queue=queue(broker), query_offset_policy=policy),
                                    metadata=meta)
            assert resp.status.code == pb.OK, resp.status
            return resp.offset

        found: list[bytes] = []
        for broker in BROKERS:
            end = admin.max_offset(MessageQueue(topic, broker, 0))
            assert (query(broker, pb.BEGINNING), query(broker, pb.END)) == (0, end)
            code, got, nxt = pull(broker, 0)
            assert (code, len(got), nxt) == (pb.OK, end, end)
            found += [m.body for m in got]
            tagged = [m.body for m in got if m.system_properties.tag == "A"]
            code, only_a, _ = pull(broker, 0, tag="A")
            assert (code, [m.body for m in only_a]) == (pb.OK if tagged else pb.MESSAGE_NOT_FOUND, tagged)
            assert pull(broker, end) == (pb.MESSAGE_NOT_FOUND, [], end)
            assert pull(broker, 100)[::2] == (pb.ILLEGAL_OFFSET, end)
        assert sorted(found) == sorted(bodies), "each group's queue 0 holds its share"
        assert pull("broker-x", 0)[0] == pb.BAD_REQUEST

        mq = queue(BROKERS[1])
        assert stub.GetOffset(spb.GetOffsetRequest(group=group, message_queue=mq),
                              metadata=meta).status.code == pb.OFFSET_NOT_FOUND
        updated = stub.UpdateOffset(spb.UpdateOffsetRequest(group=group, message_queue=mq, offset=1), metadata=meta)
        assert updated.status.code == pb.OK, updated.status
        got_offset = stub.GetOffset(spb.GetOffsetRequest(group=group, message_queue=mq), metadata=meta)
        assert (got_offset.status.code, got_offset.offset) == (pb.OK, 1)
    # On that group's broker, in the offset table the 4.x clients share.
    assert admin.query_consumer_offset("px-pull-g", MessageQueue(topic, BROKERS[1], 0)) == 1
    assert admin.query_consumer_offset("px-pull-g", MessageQueue(topic, BROKERS[0], 0)) == -1


def test_a_delivery_through_one_proxy_is_changed_and_acknowledged_through_another(
        server: ProxyCluster, admin: AdminClient) -> None:
    """Several proxies behind one address: a receipt handle names the broker group that issued
    it, so any proxy takes it."""
    topic, group = "px-two", "px-two-g"
    _create(admin, topic, 1)
    meta = [("x-mq-client-id", "px-two"), ("x-mq-language", "PYTHON"), ("x-mq-client-version", "5.1.2")]
    with grpc.insecure_channel(server.grpc) as one, grpc.insecure_channel(server.other_proxy.ready["grpc"]) as two:
        first, second = sgrpc.MessagingServiceStub(one), sgrpc.MessagingServiceStub(two)
        sent = first.SendMessage(spb.SendMessageRequest(messages=[pb.Message(
            topic=pb.Resource(name=topic), body=b"hello",
            system_properties=pb.SystemProperties(message_id="01PXTWO0001", message_type=pb.NORMAL))]),
            metadata=meta)
        assert sent.status.code == pb.OK, sent.status
        received = [r.message for r in first.ReceiveMessage(spb.ReceiveMessageRequest(
            group=pb.Resource(name=group), batch_size=16, auto_renew=False,
            message_queue=pb.MessageQueue(topic=pb.Resource(name=topic), id=-1, broker=pb.Broker(name=BROKERS[0])),
            filter_expression=pb.FilterExpression(type=pb.TAG, expression="*"),
            invisible_duration=Duration(seconds=30), long_polling_timeout=Duration(seconds=1)),
            metadata=meta, timeout=15) if r.HasField("message")]
        assert [m.body for m in received] == [b"hello"], "found on whichever group it went to"
        handle = received[0].system_properties.receipt_handle
        changed = second.ChangeInvisibleDuration(spb.ChangeInvisibleDurationRequest(
            group=pb.Resource(name=group), topic=pb.Resource(name=topic), receipt_handle=handle,
            invisible_duration=Duration(seconds=60), message_id="01PXTWO0001"), metadata=meta)
        assert changed.status.code == pb.OK, changed.status
        acked = second.AckMessage(spb.AckMessageRequest(
            group=pb.Resource(name=group), topic=pb.Resource(name=topic), entries=[spb.AckMessageEntry(
                message_id="01PXTWO0001", receipt_handle=changed.receipt_handle)]), metadata=meta)
        assert acked.status.code == pb.OK, acked.status
    wait_until(lambda: sum(p.lag for p in admin.group_progress(group)) == 0, 30, what="the ack on its broker")
    # The second proxy's metrics count what went through it.
    with urllib.request.urlopen(f"http://{server.other_proxy.ready['metrics']}/metrics", timeout=10) as page:
        text = page.read().decode()
    assert 'ferrymq_proxy_messages_total{kind="acked"} 1.0' in text, text[:2000]
    assert "process_cpu_seconds_total" in text


def test_a_proxy_sigkill_and_restart_mid_stream_loses_nothing_acknowledged(
        server: ProxyCluster, clients: Clients, admin: AdminClient) -> None:
    topic, group, n = "px-crash", "px-crash-g", 40
    _create(admin, topic, 2)
    consumer = clients.sdk5("simple", topic=topic, group=group, invisibleSec=5, awaitSec=1, requestTimeoutSec=3,
                            idleExitMs=120_000)
    consumer.wait_event("ready", 30)
    first = run_producer(clients.sdk5("produce", topic=topic, count=n // 2), n // 2, 60)
    consumer.wait_for(lambda evs: sum(e.get("event") == "acked" for e in evs) >= 5, 60, "some acks")
    server.proxy.kill()
    acked_before = {e["body"] for e in consumer.of("acked")}
    server.proxy.start()
    second = run_producer(clients.sdk5("produce", topic=topic, count=n // 2, startIndex=n // 2), n // 2, 60)
    everything = {s["body"] for s in first + second}
    consumer.wait_received(lambda evs: {e["body"] for e in evs} >= everything, 90, "every message")
    # An ack in flight when the proxy died may have reached its broker or not: one that did not
    # is delivered again after its invisible time and acknowledged then.
    wait_until(lambda: sum(p.lag for p in admin.group_progress(group)) == 0, 60,
               what="every message acknowledged on both groups")
    consumer.stop()
    received = consumer.of("received")
    again = [e["body"] for e in received if e["body"] in acked_before]
    assert len(again) == len(acked_before), f"an acknowledged message came back: {sorted(again)}"


def test_transactions_through_the_proxy_commit_roll_back_and_are_checked_back(
        clients: Clients, admin: AdminClient) -> None:
    topic, group = "px-txn", "px-txn-g"
    # The proxy reads each group's topic type: a NORMAL topic's route refuses them (SDK side).
    _create(admin, topic, 1, message_type="TRANSACTION")
    # One queue per group: the three half messages land on both groups (sends go round the queues).
    producer = clients.sdk5("produce", topic=topic, count=3, transaction=["commit", "rollback", "unknown"],
                            checkResult="commit", lingerMs=15_000)
    producer.wait_event("done", 60)
    assert not producer.of("send_error"), producer.diag()
    # The unresolved one is asked about by its broker, through the proxy, on the producer's
    # telemetry stream; the producer's checker commits it.
    check = producer.wait_event("check", 30)
    assert check["body"] == "msg-2"
    consumer = clients.sdk5("simple", topic=topic, group=group, invisibleSec=20, awaitSec=1, expect=2)
    assert consumer.wait_exit(60) == 0, consumer.diag()
    assert sorted(e["body"] for e in consumer.of("received")) == ["msg-0", "msg-2"], "msg-1 rolled back"
    producer.stop()


def test_fifo_message_groups_keep_their_order_through_the_proxy(clients: Clients, admin: AdminClient) -> None:
    topic, group, groups, per_group = "px-fifo", "px-fifo-g", ["o-a", "o-b", "o-c", "o-d", "o-e"], 8
    n = len(groups) * per_group
    _create(admin, topic, 2, order=True)
    run_producer(clients.sdk5("produce", topic=topic, count=n, messageGroup=groups, body="{i}"), n, 60)
    consumer = clients.sdk5("push", topic=topic, group=group, expect=n)
    assert consumer.wait_exit(60) == 0, consumer.diag()
    received = consumer.of("received")
    assert sorted(int(e["body"]) for e in received) == list(range(n)), "each message once"
    for g in groups:
        bodies = [int(e["body"]) for e in received if e["messageGroup"] == g]
        assert bodies == sorted(bodies), f"message group {g} out of order: {bodies}"


def test_a_controller_mode_master_sigkill_the_sdk_keeps_sending_through_the_proxy(
        tmp_path: Path, clients: Clients) -> None:
    """A broker group of its own (master and slave, SYNC_MASTER, the name server's controller
    elects) behind a proxy of its own: the module's groups run static roles. The master dies
    under a steady stream of SDK sends; once the controller has elected the slave, sends succeed
    again through the same proxy, and every acknowledged one is consumed."""
    topic, group = "px-failover", "px-failover-g"
    fast = {"register_broker_interval_ms": 500, "ha_slave_sync_interval_ms": 300, "ha_heartbeat_interval_ms": 200,
            "controller_heartbeat_interval_ms": 200, "sync_flush_timeout_ms": 1500}
    with start_cluster(tmp_path / "ctl", slaves=1, controller=True, controller_lease_ms=1000, broker_name="broker-c",
                       broker_config=fast) as cluster:
        proxy = ServerProcess("proxy-ctl", lambda: ["proxy", "--namesrv", cluster.namesrv_addrs, "--grpc-port", "0"],
                              tmp_path / "ctl" / "logs" / "proxy.log", "proxy grpc")
        try:
            proxy.start()
            with AdminClient(cluster.namesrv_addrs) as admin:
                admin.create_topic(topic, 2)
                wait_until(lambda: admin.message_queues(topic), 30, what=f"{topic}'s route")
            endpoint = proxy.ready["grpc"]
            producer = clients.sdk5("produce", endpoint=endpoint, topic=topic, count=100_000, intervalMs=20,
                                    requestTimeoutSec=3)
            producer.wait_for(lambda evs: sum(e.get("event") == "sent" for e in evs) >= 20, 60, "sends before")
            old = cluster.wait_master()
            old.kill()
            new = cluster.wait_master(30, not_addr=old.addr)
            elected_at = len(producer.of("sent"))
            producer.wait_for(lambda evs: sum(e.get("event") == "sent" for e in evs) >= elected_at + 20, 60,
                              "sends through the proxy to the new master")
            producer.kill()
            sent = {e["body"] for e in producer.of("sent")}
            failed = producer.of("send_error")
            assert new.broker_id != old.broker_id
            consumer = clients.sdk5("simple", endpoint=endpoint, topic=topic, group=group, invisibleSec=20,
                                    awaitSec=1, idleExitMs=120_000)
            consumer.wait_received(lambda evs: {e["body"] for e in evs} >= sent, 60,
                                   f"the {len(sent)} acknowledged sends ({len(failed)} failed in the failover)")
            consumer.stop()
        finally:
            proxy.kill()


ACL_RULES = """
accounts:
  - accessKey: pxAdmin
    secretKey: pxAdminSecret
    admin: true
  - accessKey: pxAppKey
    secretKey: pxAppSecret
    defaultTopicPerm: DENY
    defaultGroupPerm: SUB
    topicPerms: [px-secure=PUB|SUB]
"""


def test_acl_and_tls_through_the_proxy(server: ProxyCluster, clients: Clients, admin: AdminClient,
                                       tmp_path: Path) -> None:
    """A proxy with --acl-file and TLS enforcing (the broker's flags): the SDK over TLS signs its
    calls with an account that may publish and subscribe; a wrong secret and a plain channel
    are refused."""
    topic, n = "px-secure", 6
    _create(admin, topic, 1)
    certs = make_tls_files(tmp_path / "tls")
    rules = tmp_path / "plain_acl.yml"
    rules.write_text(ACL_RULES)
    proxy = ServerProcess("proxy-secure", lambda: [
        "proxy", "--namesrv", server.namesrv, "--grpc-port", "0", "--acl-file", str(rules), "--tls-mode", "enforcing",
        "--tls-cert", str(certs.cert), "--tls-key", str(certs.key)], tmp_path / "proxy-secure.log", "proxy grpc")
    try:
        proxy.start()
        secure = {"endpoint": proxy.ready["grpc"], "tlsCa": str(certs.ca), "accessKey": "pxAppKey"}
        sent = run_producer(clients.sdk5("produce", topic=topic, count=n, secretKey="pxAppSecret", **secure), n, 60)
        consumer = clients.sdk5("simple", topic=topic, group="px-secure-g", expect=n, invisibleSec=20, awaitSec=1,
                                secretKey="pxAppSecret", **secure)
        assert consumer.wait_exit(60) == 0, consumer.diag()
        assert sorted(e["body"] for e in consumer.of("received")) == sorted(e["body"] for e in sent)

        wrong = clients.sdk5("produce", topic=topic, count=1, secretKey="not-the-secret", **secure)
        wrong.wait_any(("done", "fatal"), 60, "a refused start or send")
        assert not wrong.of("sent"), wrong.diag()
        with grpc.insecure_channel(proxy.ready["grpc"]) as channel:
            with pytest.raises(grpc.RpcError) as info:
                sgrpc.MessagingServiceStub(channel).QueryRoute(
                    spb.QueryRouteRequest(topic=pb.Resource(name=topic)),
                    metadata=[("x-mq-client-id", "px-plain")], timeout=5)
            assert info.value.code() == grpc.StatusCode.UNAVAILABLE
    finally:
        proxy.kill()


def test_a_frozen_broker_group_leaves_the_other_one_served(server: ProxyCluster, clients: Clients,
                                                         admin: AdminClient) -> None:
    """Last in the module: it freezes broker-b (SIGSTOP: its connections stay open, so the name
    server keeps listing it until it expires it). A receive that names broker-b is served from
    broker-a, not failed. Sends succeed: the first one forwarded to broker-b is answered
    PROXY_TIMEOUT within the SDK's deadline (the SDK retries it) and isolates broker-b, and the
    sends after it pass over broker-b (RocketMQ's fault strategy), where turn by turn every other
    one would wait for broker-b until the SDK's deadline. With both groups isolated, sends go to
    both again."""
    topic, group, n = "px-dead", "px-dead-g", 10
    _create(admin, topic, 1)
    sent = run_producer(clients.sdk5("produce", topic=topic, count=n), n, 60)
    on_a = admin.max_offset(MessageQueue(topic, BROKERS[0], 0))
    assert 0 < on_a < n, "sends go round both groups"
    server.brokers[1].pause()
    consumer = clients.sdk5("simple", topic=topic, group=group, expect=on_a, invisibleSec=20, awaitSec=1)
    assert consumer.wait_exit(60) == 0, consumer.diag()
    assert {e["body"] for e in consumer.of("received")} < {s["body"] for s in sent}
    assert not consumer.of("receive_error"), consumer.of("receive_error")[:2]

    # A raw send with a 2.5 s deadline (the proxy's own request timeout is 3 s): the one that
    # goes to broker-b is answered PROXY_TIMEOUT before the deadline (the forward is bounded by
    # it), not left to end in DEADLINE_EXCEEDED.
    codes = []
    with grpc.insecure_channel(server.grpc) as channel:
        stub = sgrpc.MessagingServiceStub(channel)
        for i in range(3):
            answer = stub.SendMessage(spb.SendMessageRequest(messages=[pb.Message(
                topic=pb.Resource(name=topic), body=b"raw",
                system_properties=pb.SystemProperties(message_id=f"01PXFROZEN{i:03d}", message_type=pb.NORMAL))]),
                metadata=[("x-mq-client-id", "px-frozen"), ("x-mq-language", "PYTHON")], timeout=2.5)
            codes.append(answer.status.code)
            if answer.status.code != pb.OK:
                break
    assert codes[-1] == pb.PROXY_TIMEOUT and all(c == pb.OK for c in codes[:-1]), codes

    # Through the second proxy, whose metrics count its forwarded sends that failed, by group.
    m = 20
    before_a = admin.max_offset(MessageQueue(topic, BROKERS[0], 0))
    run_producer(clients.sdk5("produce", endpoint=server.other_proxy.ready["grpc"], topic=topic, count=m,
                              body="frozen-{i}"), m, 90)
    assert admin.max_offset(MessageQueue(topic, BROKERS[0], 0)) - before_a == m, "every send stored on broker-a"
    with urllib.request.urlopen(f"http://{server.other_proxy.ready['metrics']}/metrics", timeout=10) as page:
        failures = [line for line in page.read().decode().splitlines()
                    if line.startswith("ferrymq_proxy_send_failures_total{")]
    assert failures and failures[0].startswith('ferrymq_proxy_send_failures_total{broker="broker-b"}'), failures
    # One: the failed send isolated broker-b for the 600 s the second proxy was started with.
    assert float(failures[0].rsplit(" ", 1)[1]) == 1, failures

    # Every group out of reach: broker-a frozen too, and the send to it isolates it. With
    # every group isolated the sends go to all of them again (RocketMQ's fallback), so once
    # the brokers answer a send is stored, where it would be refused for the 600 s isolation.
    server.brokers[0].pause()
    try:
        with grpc.insecure_channel(server.other_proxy.ready["grpc"]) as channel:
            stub = sgrpc.MessagingServiceStub(channel)
            meta = [("x-mq-client-id", "px-isolated"), ("x-mq-language", "PYTHON")]
            ids = iter(range(1000))

            def raw_send(timeout: float) -> pb.Code:
                return stub.SendMessage(spb.SendMessageRequest(messages=[pb.Message(
                    topic=pb.Resource(name=topic), body=b"after",
                    system_properties=pb.SystemProperties(message_id=f"01PXISOL{next(ids):04d}",
                                                          message_type=pb.NORMAL))]),
                    metadata=meta, timeout=timeout).status.code

            assert raw_send(2.5) == pb.PROXY_TIMEOUT
            server.brokers[0].resume()
            server.brokers[1].resume()
            before = sum(admin.max_offset(MessageQueue(topic, b, 0)) for b in BROKERS)
            wait_until(lambda: raw_send(10) == pb.OK, 60, what="a send with every broker group isolated")
            assert sum(admin.max_offset(MessageQueue(topic, b, 0)) for b in BROKERS) > before
    finally:
        for broker in server.brokers:
            if broker.paused:
                broker.resume()
