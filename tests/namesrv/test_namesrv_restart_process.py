"""Name servers are stateless peers (issue 24): a broker registers with every one, and one that
was SIGKILLed and restarted holds nothing of the broker's table, so the broker's next
(incremental) registration is answered 'send it whole' and refills it. Real `ferrymq namesrv`
and `ferrymq broker` processes; with three name servers, clients (a producer and a push consumer
under load) rotate past a dead one, and nothing acknowledged is lost."""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from topic_seed import seed_topics

from ferrymq import AdminClient, ConsumeFromWhere, ConsumeStatus, Message, MessageExt, Producer, PushConsumer
from ferrymq.embedded.cluster import NamesrvProcess
from ferrymq.embedded.process import ServerProcess
from waits import wait_until

SEEDED = 2000


def _namesrvs(base: Path, count: int) -> list[NamesrvProcess]:
    servers = [NamesrvProcess(base / f"ns{i}", controller=False, lease_ms=0, extra=(), timeout=30.0)
               for i in range(count)]
    for s in servers:
        s.start()
    return servers


def _broker(base: Path, namesrv: str) -> ServerProcess:
    store = base / "broker"
    seed_topics(store, SEEDED)
    # Registrations every half second: the refill of a restarted name server waits for one.
    conf = base / "broker.toml"
    conf.write_text("register_broker_interval_ms = 500\n")
    argv = ["broker", "--namesrv", namesrv, "--store-dir", str(store), "--broker-port", "0",
            "--ha-port", "0", "--grpc-port", "-1", "--config", str(conf)]
    broker = ServerProcess("broker", lambda: argv, base / "logs" / "broker.log", "broker", timeout=30.0)
    broker.start()
    return broker


@pytest.fixture
def processes() -> Iterator[list[ServerProcess]]:
    started: list[ServerProcess] = []
    yield started
    for p in reversed(started):
        p.kill()


def _topics(addr: str) -> set[str]:
    with AdminClient(addr) as admin:
        try:
            return set(admin.topic_list())
        except Exception:  # not up yet
            return set()


def test_restarted_namesrv_is_refilled_with_the_whole_table(tmp_path: Path,
                                                           processes: list[ServerProcess]) -> None:
    (ns,) = _namesrvs(tmp_path, 1)
    processes.append(ns)
    processes.append(_broker(tmp_path, ns.addr))
    full = wait_until(lambda: len(t := _topics(ns.addr)) > SEEDED and t, what="the first registration")
    with AdminClient(ns.addr) as admin:
        admin.create_topic("before-crash", 2)
    ns.restart(crash=True)
    assert ns.addr and ns.starts == 2
    refilled = wait_until(lambda: _topics(ns.addr) >= full | {"before-crash"} and _topics(ns.addr),
                          what="the restarted name server refilled")
    assert refilled == full | {"before-crash"}
    with AdminClient(ns.addr) as admin:
        admin.create_topic("after-restart", 2)
        assert admin.topic_route("after-restart").queue_datas[0].write_queue_nums == 2
        assert admin.topic_route("seed-01999").queue_datas[0].write_queue_nums == 2


def test_one_of_three_namesrvs_killed_and_restarted_under_load(tmp_path: Path, processes: list[ServerProcess],
                                                               run_report: list[str]) -> None:
    servers = _namesrvs(tmp_path, 3)
    processes.extend(servers)
    all_addrs = ";".join(s.addr for s in servers)
    processes.append(_broker(tmp_path, all_addrs))
    for s in servers:
        wait_until(lambda s=s: len(_topics(s.addr)) > SEEDED, what=f"name server {s.addr} filled")
    with AdminClient(all_addrs) as admin:
        admin.create_topic("load", 4)
    failures: list[BaseException] = []
    sent = [0]
    acked: set[str] = set()
    ack_times: list[float] = []
    received: set[str] = set()
    stop = threading.Event()

    def on_messages(msgs: list[MessageExt], ctx: object) -> ConsumeStatus:
        received.update(m.body.decode() for m in msgs)
        return ConsumeStatus.CONSUME_SUCCESS

    # Clients try the name servers in the order given: the first one is the one to kill. The
    # consumer refreshes its routes and rebalances often, so it asks the name servers throughout.
    consumer = PushConsumer("restart-load-consumer", all_addrs, consume_from_where=ConsumeFromWhere.FIRST_OFFSET,
                            route_refresh_interval=0.3, rebalance_interval=0.3, heartbeat_interval=0.5)
    consumer.subscribe("load", "*")
    consumer.register_listener(on_messages)
    with consumer, Producer("restart-load", all_addrs, route_refresh_interval=0.3) as producer:
        def send_loop() -> None:
            while not stop.is_set():
                body = f"m-{sent[0]}"
                try:
                    producer.send(Message("load", body.encode()))
                    sent[0] += 1
                    acked.add(body)
                    ack_times.append(time.monotonic())
                except BaseException as exc:  # every failure is the finding
                    failures.append(exc)

        sender = threading.Thread(target=send_loop, daemon=True)
        sender.start()
        try:
            wait_until(lambda: sent[0] >= 20, what="sends before the crash")
            servers[0].kill()
            # A topic made while it is down: its route can only come from the other two.
            with AdminClient(all_addrs) as admin:
                admin.create_topic("during", 2)
            producer.send(Message("during", b"y"))
            at_crash, got_at_crash = sent[0], len(received)
            wait_until(lambda: sent[0] >= at_crash + 20, what="sends while a name server is down")
            wait_until(lambda: len(received) >= got_at_crash + 20, what="deliveries while a name server is down")
            servers[0].start()
            expected = _topics(servers[1].addr)
            assert {"load", "during", "seed-00000"} <= expected
            wait_until(lambda: _topics(servers[0].addr) == expected, what="the restarted one refilled")
            at_restart = sent[0]
            wait_until(lambda: sent[0] >= at_restart + 20, what="sends after the restart")
        finally:
            stop.set()
            sender.join(30)
        wait_until(lambda: acked <= received, what="every acknowledged message delivered")
    assert failures == []
    assert len(acked) >= 60
    gap = max(b - a for a, b in itertools.pairwise(ack_times))
    run_report.append(f"3 name servers, one SIGKILLed and restarted under load: {len(acked)} sends acked, "
                      f"0 failed, 0 lost; longest pause between acks {gap * 1000:.0f} ms")
    for s in servers:
        with AdminClient(s.addr) as admin:
            assert admin.topic_route("during").queue_datas[0].write_queue_nums == 2
