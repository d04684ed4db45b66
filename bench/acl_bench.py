"""ACL on against off, in the same run: two `ferrymq standalone` servers, one checking a
plain_acl.yml (every request signed by the clients, verified by the broker: HMAC-SHA1 over the
header fields and the body, then the account's permissions), one without.

- produce throughput of 1 KiB messages (send_async with a window of 512),
- consume-with-ack throughput (push consumer, listener batches of 32).

Runs alternate between the two servers so drift on the machine hits both alike. `value` is
ACL on, the peer ACL off; the ratio is the share of throughput ACL keeps."""

from __future__ import annotations

import statistics
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from ferrymq import AdminClient, ConsumeFromWhere, ConsumeStatus, Message, MessageExt, Producer, PushConsumer
from ferrymq.embedded import standalone

BODY = b"x" * 1024
WINDOW = 512
RUNS = 3
CREDS = {"access_key": "benchKey01", "secret_key": "benchSecret01"}
RULES = """
accounts:
  - accessKey: benchKey01
    secretKey: benchSecret01
    defaultTopicPerm: DENY
    defaultGroupPerm: SUB
    topicPerms: [acl-bench=PUB|SUB]
  - accessKey: benchAdmin1
    secretKey: benchAdmin1Secret
    admin: true
"""
ADMIN = {"access_key": "benchAdmin1", "secret_key": "benchAdmin1Secret"}


def produce(namesrv: str, n: int, creds: dict[str, str]) -> float:
    errors: list[BaseException] = []
    with Producer("acl-bench-p", namesrv, **creds) as producer:
        producer.send(Message("acl-bench", BODY))
        sem = threading.Semaphore(WINDOW)

        def done(f: Any) -> None:
            sem.release()
            if f.exception() is not None:
                errors.append(f.exception())

        began = time.perf_counter()
        for _ in range(n):
            sem.acquire()
            producer.send_async(Message("acl-bench", BODY)).add_done_callback(done)
        for _ in range(WINDOW):
            sem.acquire()
        elapsed = time.perf_counter() - began
    if errors:
        raise RuntimeError(f"{len(errors)} sends failed: {errors[0]}")
    return n / elapsed


def consume(namesrv: str, group: str, n: int, creds: dict[str, str]) -> float:
    count = [0]
    lock = threading.Lock()
    finished = threading.Event()

    def listener(msgs: list[MessageExt], ctx: Any) -> ConsumeStatus:
        with lock:
            count[0] += len(msgs)
            if count[0] >= n:
                finished.set()
        return ConsumeStatus.CONSUME_SUCCESS

    consumer = PushConsumer(group, namesrv, consume_from_where=ConsumeFromWhere.FIRST_OFFSET,
                            consume_message_batch_max_size=32, **creds)
    consumer.subscribe("acl-bench")
    consumer.register_listener(listener)
    began = time.perf_counter()
    consumer.start()
    try:
        if not finished.wait(300):
            raise RuntimeError(f"consumed {count[0]} of {n}")
        elapsed = time.perf_counter() - began
    finally:
        consumer.shutdown()
    return n / elapsed


def run(quick: bool) -> list[dict[str, Any]]:
    n = 5_000 if quick else 30_000
    results: dict[tuple[str, bool], list[float]] = {}
    with tempfile.TemporaryDirectory(prefix="ferrymq-acl-bench-") as tmp:
        home = Path(tmp)
        acl = home / "plain_acl.yml"
        acl.write_text(RULES)
        with standalone(home / "on", "--acl-file", str(acl)) as on, standalone(home / "off") as off:
            servers = {True: (on.namesrv, CREDS), False: (off.namesrv, {})}
            for acl_on, (namesrv, _) in servers.items():
                with AdminClient(namesrv, **(ADMIN if acl_on else {})) as admin:
                    admin.create_topic("acl-bench", 4)
            for i in range(RUNS):
                for acl_on in (i % 2 == 0, i % 2 != 0):
                    namesrv, creds = servers[acl_on]
                    results.setdefault(("produce", acl_on), []).append(produce(namesrv, n, creds))
                    results.setdefault(("consume", acl_on), []).append(
                        consume(namesrv, f"acl-bench-g{i}", n, creds))
    rows = []
    for what, label in (("produce", "produce 1 KiB, send_async window 512"),
                        ("consume", "consume with ack, push consumer, batches of 32")):
        on_runs, off_runs = results[(what, True)], results[(what, False)]
        rows.append({"workload": "acl", "measurement": f"{label}, ACL on", "unit": "msg/s",
                     "value": statistics.median(on_runs), "runs": on_runs,
                     "peer_name": "ACL off", "peer_value": statistics.median(off_runs), "peer_runs": off_runs})
    return rows
