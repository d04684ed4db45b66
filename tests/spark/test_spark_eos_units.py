"""The exactly-once sink's pure parts, no processes: the check's answer from a batch record,
the record's encoding, the guarantee option and the fault hook's parsing."""

from __future__ import annotations

import pytest

pytest.importorskip("pyspark")

from ferrymq.client.transaction import LocalTransactionState
from ferrymq.spark.errors import OptionError
from ferrymq.spark.exactly_once import FAULT_ENV, FAULT_STOP_ENV, FaultHook
from ferrymq.spark.options import writer_options
from ferrymq.spark.sink_record import (
    PROPERTY_BATCH,
    PROPERTY_QUERY,
    PROPERTY_TASK,
    BatchRecord,
    Half,
    SinkRecordError,
    decide,
)

HALF = Half("broker-b", "out", "TX1", 7, 4096, "K1")
RECORD = BatchRecord("q1", 3, frozenset({"t-kept"}), (HALF,))


def lookup(query: str, batch: int) -> BatchRecord | None:
    return RECORD if (query, batch) == ("q1", 3) else None


def props(query: str, batch: int, token: str) -> dict[str, str]:
    return {PROPERTY_QUERY: query, PROPERTY_BATCH: str(batch), PROPERTY_TASK: token}


def test_the_check_commits_only_the_task_attempts_the_batch_recorded() -> None:
    assert decide(props("q1", 3, "t-kept"), lookup) is LocalTransactionState.COMMIT_MESSAGE
    # A failed or killed attempt of a committed batch, or a replay of it: rolled back.
    assert decide(props("q1", 3, "t-other"), lookup) is LocalTransactionState.ROLLBACK_MESSAGE
    # Not recorded yet (the driver may still commit it), or not a sink half at all.
    assert decide(props("q1", 4, "t-kept"), lookup) is LocalTransactionState.UNKNOW
    assert decide(props("q2", 3, "t-kept"), lookup) is LocalTransactionState.UNKNOW
    assert decide({}, lookup) is LocalTransactionState.UNKNOW
    assert decide({**props("q1", 3, "t-kept"), PROPERTY_BATCH: "x"}, lookup) is LocalTransactionState.UNKNOW


def test_a_record_reads_back_as_written() -> None:
    assert BatchRecord.decode(RECORD.key, RECORD.encode()) == RECORD
    assert RECORD.key == "q1:3"
    with pytest.raises(SinkRecordError) as caught:
        BatchRecord.decode("q1:3", b"{}")
    assert caught.value.key == "q1:3"


def test_the_guarantee_option() -> None:
    plain = writer_options({"topic": "t"})
    assert not plain.exactly_once and plain.producer_group == "ferrymq-spark-writer"
    assert plain.send_batch_size == 4096
    eos = writer_options({"topic": "t", "guarantee": "Exactly-Once"}, streaming=True)
    assert eos.exactly_once and eos.producer_group == "ferrymq-spark-eos"
    assert eos.send_batch_size == 4096
    assert writer_options({"topic": "t", "guarantee": "exactly-once", "sendBatchSize": "10"}).send_batch_size == 10
    with pytest.raises(OptionError) as caught:
        writer_options({"topic": "t", "guarantee": "exactly-twice"})
    assert "at-least-once, exactly-once" in str(caught.value)


def test_the_fault_hook_is_read_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(FAULT_ENV, raising=False)
    monkeypatch.delenv(FAULT_STOP_ENV, raising=False)
    assert FaultHook.from_env() is None
    monkeypatch.setenv(FAULT_ENV, "mid-commit:2")
    assert FaultHook.from_env() == FaultHook("mid-commit", 2)
    monkeypatch.setenv(FAULT_STOP_ENV, "/tmp/stopped")
    assert FaultHook.from_env() == FaultHook("mid-commit", 2, "/tmp/stopped")
    monkeypatch.delenv(FAULT_STOP_ENV)
    monkeypatch.setenv(FAULT_ENV, "after-commit")
    assert FaultHook.from_env() == FaultHook("after-commit", None)
    monkeypatch.setenv(FAULT_ENV, "never")
    with pytest.raises(OptionError):
        FaultHook.from_env()
