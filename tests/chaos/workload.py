"""The load a fault run puts on a cluster: producer threads sending unique bodies (the body is
the message's id, also its key) and recording which sends were acknowledged (SEND_OK), and one
clustering PushConsumer recording every delivery. After the faults: drain until every
acknowledged id has arrived or a deadline passes, then hand everything to the checker."""

from __future__ import annotations

import threading
import time
from collections import Counter
from dataclasses import dataclass, field

from checker import CheckResult, check

from ferrymq import (
    AdminClient,
    ConsumeFromWhere,
    ConsumeStatus,
    Message,
    MessageExt,
    Producer,
    PushConsumer,
    SendStatus,
)

FAST_CONSUMER = dict(
    rebalance_interval=0.3,
    persist_interval=0.2,
    route_refresh_interval=0.3,
    heartbeat_interval=0.5,
    pull_suspend_timeout=1.0,
    pull_delay_on_error=0.2,
    local_retry_delay=0.3,
    request_timeout=1.0,
    shutdown_timeout=10.0,
)


@dataclass(frozen=True, slots=True)
class WorkloadConfig:
    topic: str = "chaos"
    group: str = "chaos-consumer"
    queues: int = 4
    producers: int = 2
    # Pause between one producer's sends; 0 sends as fast as the broker answers.
    send_interval: float = 0.005
    # RocketMQ's default: longer than a short freeze, so a send held by a frozen master is
    # still waiting for its answer when the master runs again.
    send_timeout: float = 3.0
    retries: int = 2


@dataclass
class Ledger:
    """Everything the run did, from any thread."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    changed: threading.Condition = field(init=False)
    attempted: set[str] = field(default_factory=set)
    acked: set[str] = field(default_factory=set)
    send_ms: dict[str, float] = field(default_factory=dict)
    received: Counter[str] = field(default_factory=Counter)
    send_errors: Counter[str] = field(default_factory=Counter)
    events: list[tuple[float, str]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.changed = threading.Condition(self.lock)


class Workload:
    def __init__(self, namesrv: str, config: WorkloadConfig = WorkloadConfig()) -> None:
        self.namesrv = namesrv
        self.config = config
        self.ledger = Ledger()
        self._t0 = time.monotonic()
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._producers: list[Producer] = []
        self._consumer: PushConsumer | None = None

    def now_ms(self) -> float:
        return (time.monotonic() - self._t0) * 1000.0

    def mark(self, what: str) -> None:
        """A fault or repair on the run's timeline, to read loss windows against."""
        with self.ledger.lock:
            self.ledger.events.append((self.now_ms(), what))

    # --- setup ---------------------------------------------------------------------------------
    def create_topic(self) -> None:
        with AdminClient(self.namesrv, timeout=2.0) as admin:
            admin.create_topic(self.config.topic, self.config.queues)

    def start_consumer(self) -> None:
        consumer = PushConsumer(self.config.group, self.namesrv,
                                consume_from_where=ConsumeFromWhere.FIRST_OFFSET, **FAST_CONSUMER)
        consumer.subscribe(self.config.topic, "*")
        consumer.register_listener(self._on_messages)
        consumer.start()
        self._consumer = consumer

    def _on_messages(self, msgs: list[MessageExt], ctx: object) -> ConsumeStatus:
        with self.ledger.changed:
            for m in msgs:
                self.ledger.received[m.body.decode()] += 1
            self.ledger.changed.notify_all()
        return ConsumeStatus.CONSUME_SUCCESS

    def start_producers(self) -> None:
        for n in range(self.config.producers):
            producer = Producer(f"chaos-producer-{n}", self.namesrv, send_timeout=self.config.send_timeout,
                                retry_times_when_send_failed=self.config.retries,
                                route_refresh_interval=0.3, heartbeat_interval=0.5).start()
            self._producers.append(producer)
            t = threading.Thread(target=self._produce, args=(n, producer), name=f"chaos-producer-{n}", daemon=True)
            self._threads.append(t)
            t.start()

    def _produce(self, n: int, producer: Producer) -> None:
        seq = 0
        ledger = self.ledger
        while not self._stop.is_set():
            mid = f"p{n}-{seq:07d}"
            seq += 1
            with ledger.lock:
                ledger.attempted.add(mid)
                ledger.send_ms[mid] = self.now_ms()
            try:
                result = producer.send(Message(self.config.topic, mid.encode(), keys=mid))
            except Exception as exc:  # every failure is data: the id stays unacknowledged
                with ledger.lock:
                    ledger.send_errors[type(exc).__name__] += 1
                # Back off a little so a dead cluster is not spun against.
                self._stop.wait(0.05)
                continue
            with ledger.lock:
                if result.status is SendStatus.SEND_OK:
                    ledger.acked.add(mid)
                else:
                    ledger.send_errors[result.status.value] += 1
            if self.config.send_interval:
                self._stop.wait(self.config.send_interval)

    # --- progress --------------------------------------------------------------------------------
    def acked_count(self) -> int:
        with self.ledger.lock:
            return len(self.ledger.acked)

    def wait_acked(self, more_than: int, timeout: float) -> bool:
        """True once more than `more_than` sends were acknowledged (load is flowing)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.acked_count() > more_than:
                return True
            self._stop.wait(0.02)
        return False

    def stop_producers(self) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(self.config.send_timeout * (self.config.retries + 2) + 10)
        for p in self._producers:
            p.shutdown()
        self._producers.clear()

    def drain(self, timeout: float) -> bool:
        """Wait until every acknowledged id was received; False at the deadline."""
        deadline = time.monotonic() + timeout
        with self.ledger.changed:
            while True:
                missing = self.ledger.acked - self.ledger.received.keys()
                if not missing:
                    return True
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self.ledger.changed.wait(min(left, 0.2))

    def result(self) -> CheckResult:
        with self.ledger.lock:
            return check(set(self.ledger.attempted), set(self.ledger.acked), Counter(self.ledger.received),
                         dict(self.ledger.send_ms))

    def timeline(self) -> list[tuple[float, str]]:
        with self.ledger.lock:
            return list(self.ledger.events)

    def close(self) -> None:
        if not self._stop.is_set():
            self.stop_producers()
        if self._consumer is not None:
            self._consumer.shutdown()
            self._consumer = None
