"""The exactly-once sink under SIGKILLed drivers: one name server and two broker groups for the
module (the topics' queues spread over both), and one chain of real Spark drivers run as child
processes (eos_child.py) on one checkpoint. The sink's fault hook kills the driver (a) after
the tasks prepared and before the driver committed, (b) after the driver committed and before
Spark wrote its commit log, (c) in the middle of the broker-side commit; each next driver
restarts from the checkpoint; (d) last, broker-b is SIGKILLed while a driver, stopped by the
hook in the middle of a commit, still has half messages on it to end: the driver goes on against
the dead broker and fails, broker-b restarts on its store and the next driver finishes the
batch from its record. At the end every input row is in the output topic exactly once and every
half message is decided, so none of a killed attempt can still turn up.

The brokers check open transactions every 500 ms after 1 s, up to 600 times: the halves a
killed attempt left are asked about (and rolled back) while the next driver runs, and a
micro-batch has five minutes to commit before its own halves would be discarded (on a loaded
two-core machine a driver has taken over a minute to start and commit its first batch)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

import ferrymq.spark  # noqa: F401  (sets the Spark environment for the children)
from conftest import Standalone, start_standalone
from ferrymq import AdminClient, Message, Producer
from ferrymq.common.message import MessageQueue
from ferrymq.common.names import CID_SYS_RMQ_TRANS, TRANS_HALF_TOPIC
from ferrymq.embedded.process import ServerProcess
from ferrymq.spark.exactly_once import FAULT_ENV, FAULT_STOP_ENV
from ferrymq.spark.sink_record import find_record
from waits import wait_until

pytestmark = [pytest.mark.spark, pytest.mark.timeout(1200)]

HERE = Path(__file__).parent
BROKERS = ("broker-a", "broker-b")
ROWS = 120
PER_TRIGGER = 30  # four micro-batches
# Rows per half message. Case (d) needs broker-b among the halves its driver leaves open (the
# second half of the batch's list, tasks' halves in send order): a producer picks queues round
# robin over eos-out's four (two a group), so any four halves in a row of one task cover both
# groups. 2 rows a half gives 15 halves a batch and 8 in its second half, at least 4 of them one
# task's in a row; with 8 rows a half (4 halves) the open ones were now and then all broker-a's.
SEND_BATCH = 2
CONFIG = """transaction_check_interval_ms = 500
transaction_timeout_ms = 1000
transaction_check_max = 600
"""


@pytest.fixture(scope="module")
def two_groups(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Standalone, ServerProcess]]:
    base = tmp_path_factory.mktemp("eos")
    config = base / "broker.toml"
    config.write_text(CONFIG)
    a = start_standalone(base / "store-a", "--config", str(config))
    b = ServerProcess(
        "broker-b",
        lambda: ["broker", "--namesrv", a.namesrv, "--broker-name", "broker-b", "--broker-port", "0",
                 "--ha-port", "0", "--grpc-port", "-1", "--store-dir", str(base / "store-b"),
                 "--config", str(config)],
        base / "broker-b.log", "broker",
    )
    try:
        b.start()
        yield a, b
    finally:
        b.stop()
        a.stop()


def output(admin: AdminClient, topic: str) -> list[tuple[str, str]]:
    """(keys, body) of every message of the topic, every queue read to its end."""
    rows: list[tuple[str, str]] = []
    for mq in admin.message_queues(topic):
        offset = 0
        while True:
            result = admin.pull(mq, offset, 32)
            if not result.messages:
                break
            rows += [(m.keys or "", m.body.decode()) for m in result.messages]
            offset = result.next_begin_offset
    return rows


def open_halves(admin: AdminClient) -> int:
    """Half-queue entries the brokers' checks have not yet passed as decided."""
    total = 0
    for broker in BROKERS:
        mq = MessageQueue(TRANS_HALF_TOPIC, broker, 0)
        total += admin.max_offset(mq) - admin.query_consumer_offset(CID_SYS_RMQ_TRANS, mq)
    return total


def stopped(pid: int) -> bool:
    """The process is in state T (SIGSTOP took effect)."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    return stat[stat.rfind(")") + 2] == "T"


@pytest.fixture
def driver_groups() -> Iterator[list[int]]:
    """The drivers' process groups, SIGKILLed at the end: a killed PySpark driver does not take
    its JVM and Python workers with it (they are in its group), and a failed assertion must not
    leave a SIGSTOPped driver and its JVM behind."""
    groups: list[int] = []
    yield groups
    for pgid in groups:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pgid, signal.SIGKILL)


def test_killed_drivers_restart_into_exactly_once_output(
    two_groups: tuple[Standalone, ServerProcess], tmp_path: Path, driver_groups: list[int],
) -> None:
    standalone, broker_b = two_groups
    namesrv = standalone.namesrv
    with AdminClient(namesrv) as admin:
        wait_until(lambda: set(admin.cluster_brokers()) == set(BROKERS), what="both groups registered")
        admin.create_topic("eos-in", 2)
        admin.create_topic("eos-out", 2)
        assert {mq.broker_name for mq in admin.message_queues("eos-out")} == set(BROKERS)
        with Producer("eos-test-producer", namesrv) as producer:
            for lo in range(0, ROWS, 10):
                producer.send_batch([Message("eos-in", f"m{i}".encode(), keys=f"k{i}")
                                     for i in range(lo, lo + 10)])
        checkpoint = tmp_path / "cp"

        def start_driver(fault: str | None, stop_file: Path | None = None) -> subprocess.Popen[bytes]:
            env = {k: v for k, v in os.environ.items() if k not in (FAULT_ENV, FAULT_STOP_ENV)}
            if fault is not None:
                env[FAULT_ENV] = fault
            if stop_file is not None:
                env[FAULT_STOP_ENV] = str(stop_file)
            with (tmp_path / f"driver-{fault}.log").open("w") as log:  # read when a run fails
                proc = subprocess.Popen(
                    [sys.executable, str(HERE / "eos_child.py"), namesrv, "eos-in", "eos-out",
                     str(checkpoint), str(PER_TRIGGER), str(SEND_BATCH)],
                    env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                )
            driver_groups.append(proc.pid)  # its own session: the group is its pid
            return proc

        def driver(fault: str | None) -> int:
            return start_driver(fault).wait(timeout=300)

        def no_duplicates() -> list[tuple[str, str]]:
            rows = output(admin, "eos-out")
            assert len(rows) == len(set(rows)), "a row was written twice"
            return rows

        # (a) batch 0 prepared, nothing recorded: none of it is visible.
        assert driver("before-commit:0") == -signal.SIGKILL
        assert no_duplicates() == []
        # (b) batch 1 recorded and ended, Spark's commit log not written: its replay is rolled back.
        assert driver("after-commit:1") == -signal.SIGKILL
        after_b = no_duplicates()
        assert len(after_b) == 2 * PER_TRIGGER
        # (c) batch 2 recorded, half of its halves ended: the replay ends the rest.
        assert driver("mid-commit:2") == -signal.SIGKILL
        assert len(no_duplicates()) < ROWS
        # (d) batch 3 recorded, the first half of its halves ended, the driver stopped there;
        # broker-b holds some of the rest. Killed, it is down when the driver goes on.
        stop_file = tmp_path / "stopped-pid"
        child = start_driver("mid-commit:3", stop_file)
        wait_until(lambda: stop_file.exists() or child.poll() is not None, timeout=300,
                   what="the driver stopped in batch 3's commit")
        pid = int(stop_file.read_text())
        wait_until(lambda: stopped(pid), what="SIGSTOP taken")
        query_id = json.loads((checkpoint / "metadata").read_text())["id"]
        record = find_record(admin, query_id, 3)
        assert record is not None
        assert "broker-b" in {h.broker for h in record.halves[len(record.halves) // 2:]}
        broker_b.kill()
        os.kill(pid, signal.SIGCONT)
        assert child.wait(timeout=300) != 0  # its commit failed on the dead broker
        address = broker_b.start()["broker"]  # the same store, another port
        wait_until(lambda: admin.cluster_brokers().get("broker-b") == address, what="broker-b back")
        assert driver(None) == 0

        wait_until(lambda: open_halves(admin) == 0, timeout=60, what="every half message decided")
        rows = output(admin, "eos-out")
        assert len(rows) == ROWS
        assert sorted(rows) == sorted((f"k{i}", f"enriched:m{i}") for i in range(ROWS))
