"""Pop consumption across crashes, with real processes killed by SIGKILL: a broker restarted
on its store keeps acknowledged messages acknowledged and hands out again the ones that were
not once their invisible time (changed or not) has passed; a consumer killed mid-stream gets
back to its group only what it held unacknowledged (at most one receive batch), never what it
acknowledged."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

from scenario_util import FAST_PRODUCER

from conftest import start_standalone
from ferrymq import AdminClient, Message, Producer, SimpleConsumer
from waits import wait_until

HERE = Path(__file__).parent
Key = tuple[int, int]


def _send(namesrv: str, topic: str, n: int) -> None:
    with Producer("p-pop", namesrv, **FAST_PRODUCER) as producer:
        for i in range(n):
            producer.send(Message(topic, f"m{i}".encode()))


def _drain(consumer: SimpleConsumer, expect: int, invisible: float = 30.0) -> list[Key]:
    got: list[Key] = []

    def more() -> bool:
        for v in consumer.receive(32, invisible, await_duration=0.5):
            got.append((v.message.queue_id, v.queue_offset))
            consumer.ack(v)
        return len(got) >= expect

    wait_until(more, timeout=30.0, what=f"{expect} messages")
    return got


def test_broker_kill_keeps_acks_and_invisibility(tmp_path: Path) -> None:
    store = tmp_path / "store"
    server = start_standalone(store)
    ports = dict(namesrv_port=int(server.namesrv.rsplit(":", 1)[1]),
                 broker_port=int(server.broker.rsplit(":", 1)[1]))
    try:
        admin = AdminClient(server.namesrv)
        admin.create_topic("popkill", 2)
        admin.close()
        _send(server.namesrv, "popkill", 20)
        consumer = SimpleConsumer("g-popkill", server.namesrv, await_duration=0.5)
        consumer.subscribe("popkill")
        with consumer:
            views: list[Any] = []
            wait_until(lambda: views.extend(consumer.receive(32, 300)) or len(views) >= 20,
                     what="all 20 received")
            for v in views[::2]:
                consumer.ack(v)  # answered: on the broker's disk
            # Of the unacknowledged ones, half are made visible again (almost) at once; the
            # rest stay invisible for the 300 s of the receive.
            shortened = views[1::4]
            for v in shortened:
                consumer.change_invisible_duration(v, 0.001)
    finally:
        server.kill()  # SIGKILL: no snapshot, only the journal
    server = start_standalone(store, **ports)
    try:
        consumer = SimpleConsumer("g-popkill", server.namesrv, await_duration=0.5,
                                  route_refresh_interval=0.3)
        consumer.subscribe("popkill")
        with consumer:
            # The invisible times were checkpointed: only the shortened ones come back.
            again = _drain(consumer, len(shortened))
            assert set(again) == {(v.message.queue_id, v.queue_offset) for v in shortened}
            assert len(again) == len(shortened) == 5
            assert consumer.receive(32, 30, await_duration=0.5) == []
    finally:
        server.stop()


def test_consumer_kill_redelivers_only_what_was_in_flight(standalone: Any,
                                                          run_report: list[str]) -> None:
    total = 400
    admin = AdminClient(standalone.namesrv)
    admin.create_topic("popcrash", 4)
    _send(standalone.namesrv, "popcrash", total)
    everything = {(mq.queue_id, o) for mq in admin.message_queues("popcrash")
                  for o in range(admin.max_offset(mq))}
    assert len(everything) == total
    invisible = 2.0
    child = subprocess.Popen(
        [sys.executable, str(HERE / "pop_crash_consumer.py"), standalone.namesrv, "popcrash",
         "g-popcrash", str(invisible)], stdout=subprocess.PIPE, text=True)
    assert child.stdout is not None
    received: set[Key] = set()
    acked: set[Key] = set()
    try:
        for line in child.stdout:
            parts = line.split()
            if parts[0] == "RECV":
                received.add((int(parts[1]), int(parts[2])))
            elif parts[0] == "ACK":
                acked.add((int(parts[1]), int(parts[2])))
                if len(acked) >= total // 2 + 3:  # inside a receive batch
                    break
    finally:
        child.kill()  # SIGKILL mid-stream
        child.wait()
    in_flight = received - acked
    assert len(in_flight) <= 8  # one receive batch
    survivor = SimpleConsumer("g-popcrash", standalone.namesrv, await_duration=0.5)
    survivor.subscribe("popcrash")
    with survivor:
        second = _drain(survivor, total - len(acked))
    duplicates = set(second) & received
    assert duplicates <= in_flight
    assert len(duplicates) <= len(in_flight)
    assert set(second) | acked == everything
    assert len(second) == len(set(second))  # nothing twice to the survivor either
    # The group's offsets followed the acknowledgements: its lag reads 0.
    wait_until(lambda: all(p.lag == 0 for p in admin.group_progress("g-popcrash")
                         if p.topic == "popcrash"), what="lag 0")
    admin.close()
    run_report.append(f"pop consumer SIGKILL: {len(received)} received, {len(acked)} acked, "
                      f"{len(in_flight)} in flight at the kill, {len(duplicates)} delivered again")
