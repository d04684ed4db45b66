"""Message trace recorded by the broker (docs/trace.md), through a real standalone server,
real consumers and the `ferrymq msg trace` command."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest
from cli_util import ferrymq, json_out

from conftest import start_standalone
from ferrymq import (
    AdminClient,
    ConsumeFromWhere,
    ConsumeStatus,
    LocalTransactionState,
    Message,
    Producer,
    PushConsumer,
    SimpleConsumer,
    TransactionProducer,
)
from ferrymq.broker.trace.codec import TRACE_TOPIC, ClientTrace, encode_client_trace
from ferrymq.common.trace_events import TraceEvent
from waits import wait_until


def _kinds(events: Sequence[TraceEvent]) -> list[str]:
    return [e.kind for e in events]


def _in_order(events: Sequence[TraceEvent], *wanted: Callable[[TraceEvent], bool]) -> bool:
    """Each predicate matches an event after the one the previous predicate matched."""
    it = iter(events)
    return all(any(w(e) for e in it) for w in wanted)


def _is(kind: str, **fields: Any) -> Callable[[TraceEvent], bool]:
    def match(e: TraceEvent) -> bool:
        return e.kind == kind and all(
            (e.detail.get(k[7:]) if k.startswith("detail_") else getattr(e, k)) == v
            for k, v in fields.items()
        )

    return match


def _consumer(server: Any, group: str, topic: str, fail_first: set[bytes],
              **options: Any) -> tuple[PushConsumer, list[bytes]]:
    """A push consumer that fails the first delivery of each body in fail_first."""
    done: list[bytes] = []

    def listener(msgs: list[Any], ctx: Any) -> ConsumeStatus:
        for m in msgs:
            if m.body in fail_first:
                fail_first.discard(m.body)
                return ConsumeStatus.RECONSUME_LATER
            done.append(m.body)
        return ConsumeStatus.CONSUME_SUCCESS

    consumer = PushConsumer(group, server.namesrv, rebalance_interval=0.3,
                            consume_from_where=ConsumeFromWhere.FIRST_OFFSET, **options)
    consumer.subscribe(topic, "*")
    consumer.register_listener(listener)
    return consumer, done


def test_a_failed_then_retried_message_and_a_redriven_dead_letter(tmp_path: Path) -> None:
    server = start_standalone(tmp_path / "store")
    try:
        ferrymq(server, "topic", "create", "tr-life", "--queues", "1")
        ferrymq(server, "topic", "create", "tr-dead", "--queues", "1")
        retried = json_out(server, "send", "tr-life", "retried-once", "--tags", "T1")
        dead = json_out(server, "send", "tr-dead", "dead-lettered")

        life, life_done = _consumer(server, "tr-life-g", "tr-life", {b"retried-once"})
        # max_reconsume_times 0: the first failure sends the message to the DLQ.
        doomed, doomed_done = _consumer(server, "tr-dead-g", "tr-dead", {b"dead-lettered"},
                                        max_reconsume_times=0)
        with life, doomed, AdminClient(server.namesrv) as admin:
            wait_until(lambda: life_done, timeout=30, what="the retry to be consumed")

            def retried_trace() -> Sequence[TraceEvent] | None:
                events = admin.message_trace(retried["msg_id"]).events
                return events if any(
                    e.kind == "consumed" and e.topic == "%RETRY%tr-life-g" for e in events
                ) else None

            events = wait_until(retried_trace, timeout=30, what="the retry's commit traced")
            assert _in_order(
                events,
                _is("stored", topic="tr-life", queue_offset=retried["queue_offset"]),
                _is("delivered", topic="tr-life", group="tr-life-g"),
                _is("failed", group="tr-life-g", detail_retry_level="1"),
                _is("scheduled", detail_delay_level="3"),
                _is("retry", topic="%RETRY%tr-life-g", detail_retry_level="1"),
                _is("delivered", topic="%RETRY%tr-life-g", group="tr-life-g"),
                _is("consumed", topic="%RETRY%tr-life-g", group="tr-life-g"),
            ), _kinds(events)
            delivered = next(e for e in events if e.kind == "delivered")
            assert "@127.0.0.1:" in delivered.client  # client id @ address
            assert all(a.ts <= b.ts for a, b in itertools.pairwise(events))

            def dead_lettered() -> Sequence[TraceEvent] | None:
                events = admin.message_trace(dead["msg_id"]).events
                return events if any(e.kind == "dlq_stored" for e in events) else None

            wait_until(dead_lettered, timeout=30, what="the dead letter traced")
            ferrymq(server, "dlq", "resend", "tr-dead-g", "--msg-id", dead["msg_id"])
            wait_until(lambda: doomed_done, timeout=30, what="the re-driven message consumed")

            def redriven_trace() -> Sequence[TraceEvent] | None:
                events = admin.message_trace(dead["msg_id"]).events
                return events if any(
                    e.kind == "consumed" and e.topic == "%RETRY%tr-dead-g" for e in events
                ) else None

            events = wait_until(redriven_trace, timeout=30, what="the redrive traced")
            assert _in_order(
                events,
                _is("stored", topic="tr-dead"),
                _is("delivered", group="tr-dead-g"),
                _is("dead_lettered", group="tr-dead-g"),
                _is("dlq_stored", topic="%DLQ%tr-dead-g"),
                _is("redriven", topic="%RETRY%tr-dead-g"),
                _is("delivered", topic="%RETRY%tr-dead-g", group="tr-dead-g"),
                _is("consumed", topic="%RETRY%tr-dead-g", group="tr-dead-g"),
            ), _kinds(events)

        doc = json_out(server, "msg", "trace", retried["msg_id"])
        assert [e["kind"] for e in doc["timeline"]] == _kinds(
            [TraceEvent.from_json(e) for e in doc["timeline"]])
        assert "failed" in [e["kind"] for e in doc["timeline"]]
        assert doc["trace_enable"] == {"broker-a": True}
        assert doc["tracks"] and doc["copies"]  # the fields from before the timeline stay
        runtime = json_out(server, "broker", "status", "broker-a")["runtime"]
        assert runtime["traceEnable"] == "true" and int(runtime["traceEventsWritten"]) > 0
        assert runtime["traceEventsDropped"] == "0"
        table = ferrymq(server, "msg", "trace", retried["msg_id"], env={"COLUMNS": "200"}).stdout
        assert "timeline" in table and "failed" in table and "%RETRY%tr-life-g" in table

        # A restart (and then a crash) keeps the trace: it is in the store.
        before = _kinds(admin_trace(server, retried["msg_id"]))
        server.stop()
        server = start_standalone(tmp_path / "store")
        assert _kinds(admin_trace(server, retried["msg_id"]))[: len(before)] == before
        server.kill()
        server = start_standalone(tmp_path / "store")
        assert _kinds(admin_trace(server, dead["msg_id"]))[-1] == "consumed"
    finally:
        server.stop()


def admin_trace(server: Any, msg_id: str) -> Sequence[TraceEvent]:
    with AdminClient(server.namesrv) as admin:
        return admin.message_trace(msg_id).events


@pytest.fixture
def untraced(tmp_path: Path) -> Any:
    conf = tmp_path / "broker.toml"
    conf.write_text("trace_enable = false\n")
    server = start_standalone(tmp_path / "store", "--config", str(conf))
    try:
        yield server
    finally:
        server.stop()


def test_trace_off_records_nothing(untraced: Any, tmp_path: Path) -> None:
    ferrymq(untraced, "topic", "create", "tr-off", "--queues", "1")
    sent = json_out(untraced, "send", "tr-off", "quiet")
    consumer, done = _consumer(untraced, "tr-off-g", "tr-off", set())
    with consumer:
        wait_until(lambda: done, timeout=30, what="the message consumed")
    doc = json_out(untraced, "msg", "trace", sent["msg_id"])
    # The stored copy is the message itself in the log; nothing else is recorded.
    assert [e["kind"] for e in doc["timeline"]] == ["stored"]
    assert doc["trace_enable"] == {"broker-a": False}
    assert doc["copies"][0]["offset_msg_id"] == sent["offset_msg_id"]
    assert not (tmp_path / "store" / "consumequeue" / "RMQ_SYS_TRACE_TOPIC").exists()
    assert json_out(untraced, "broker", "status", "broker-a")["runtime"]["traceEnable"] == "false"
    assert "trace_enable is off" in ferrymq(untraced, "msg", "trace", sent["msg_id"]).stdout


class _Tx:
    def execute_local_transaction(self, msg: Any, arg: Any) -> Any:
        return arg

    def check_local_transaction(self, msg: Any) -> Any:
        return LocalTransactionState.ROLLBACK_MESSAGE


def test_transactions_pop_delay_and_client_trace_data(standalone: Any) -> None:
    for topic in ("tr-tx", "tr-pop", "tr-delay"):
        ferrymq(standalone, "topic", "create", topic, "--queues", "1")
    with TransactionProducer("tr-tx-p", standalone.namesrv, listener=_Tx()) as tx:
        committed = tx.send_message_in_transaction(Message("tr-tx", b"paid"),
                                                   LocalTransactionState.COMMIT_MESSAGE)
        rolled = tx.send_message_in_transaction(Message("tr-tx", b"void"),
                                                LocalTransactionState.ROLLBACK_MESSAGE)
    popped = json_out(standalone, "send", "tr-pop", "popped")
    delayed = json_out(standalone, "send", "tr-delay", "later", "--delay-level", "1")
    timed = json_out(standalone, "send", "tr-delay", "timed", "--property", "TIMER_DELAY_MS=300")
    consumer = SimpleConsumer("tr-pop-g", standalone.namesrv, await_duration=5.0)
    consumer.subscribe("tr-pop")
    with consumer, AdminClient(standalone.namesrv) as admin:
        (view,) = wait_until(lambda: consumer.receive(1, 30.0), timeout=30, what="a pop")
        consumer.change_invisible_duration(view, 20.0)
        consumer.ack(view)

        events = admin.message_trace(committed.msg_id).events
        assert _in_order(events, _is("prepared", topic="RMQ_SYS_TRANS_HALF_TOPIC"),
                         _is("transaction_committed", topic="tr-tx")), _kinds(events)
        events = admin.message_trace(rolled.msg_id).events
        assert _kinds(events) == ["prepared", "transaction_rolled_back"]
        assert events[1].group == "tr-tx-p"
        events = admin.message_trace(popped["msg_id"]).events
        assert _in_order(events, _is("stored"), _is("popped", group="tr-pop-g"),
                         _is("invisible_changed", group="tr-pop-g", detail_invisible_ms="20000"),
                         _is("acked", group="tr-pop-g")), _kinds(events)
        assert "127.0.0.1:" in next(e for e in events if e.kind == "popped").client
        events = wait_until(
            lambda: (lambda ev: ev if "stored" in _kinds(ev) else None)(
                admin.message_trace(delayed["msg_id"]).events),
            timeout=30, what="the delayed message's delivery traced")
        assert _kinds(events)[:2] == ["scheduled", "stored"], _kinds(events)
        assert events[0].detail["delay_level"] == "1" and events[1].topic == "tr-delay"
        events = wait_until(
            lambda: (lambda ev: ev if "stored" in _kinds(ev) else None)(
                admin.message_trace(timed["msg_id"]).events),
            timeout=30, what="the timer message's delivery traced")
        assert _kinds(events)[:2] == ["timer_scheduled", "stored"], _kinds(events)
        assert int(events[0].detail["deliver_ms"]) >= events[0].ts + 300 - 5
        assert events[1].topic == "tr-delay" and events[1].ts >= int(events[0].detail["deliver_ms"]) - 100

        # A RocketMQ client's trace data (TraceDataEncoder text, keyed by message id) is merged.
        text = encode_client_trace([
            ClientTrace("Pub", popped["msg_id"], ts=events[0].ts - 1, region="DefaultRegion",
                        group="java-producer", topic="tr-pop", cost_ms=3, success=True,
                        store_host="127.0.0.1:10911", offset_msg_id=popped["offset_msg_id"]),
            ClientTrace("SubBefore", popped["msg_id"], ts=events[0].ts + 10, group="java-g",
                        request_id="r1", retry_times=0),
            ClientTrace("SubAfter", popped["msg_id"], ts=events[0].ts + 20, request_id="r1",
                        cost_ms=10, success=True, context_code=0),
        ])
        with Producer("java-trace-p", standalone.namesrv) as p:
            p.send(Message(TRACE_TOPIC, text.encode(), keys=popped["msg_id"]))
        events = admin.message_trace(popped["msg_id"]).events
        client = [e for e in events if e.source == "client"]
        assert [e.kind for e in client] == ["client_pub", "client_sub_before", "client_sub_after"]
        assert client[0].group == "java-producer" and client[0].detail["success"] == "true"
        assert client[2].detail["cost_ms"] == "10"
