"""The trace record codec, RocketMQ's client trace text, and the timeline's ordering: pure
functions, no server."""

from __future__ import annotations

from typing import Any

from ferrymq.broker.trace import codec as C
from ferrymq.broker.trace.timeline import build
from ferrymq.common import props as P

CS, FS = C.CONTENT_SPLITOR, C.FIELD_SPLITOR


def test_range_events_get_one_position_key_per_bucket_and_ids_their_own() -> None:
    ev = {"k": C.R_DELIVERED, "t": "T", "q": 1, "o": 1000, "e": 2100, "g": "G"}
    assert list(C.event_keys(ev)) == ["T@1@0", "T@1@1", "T@1@2"]
    assert list(C.event_keys({"k": C.R_SENT_BACK, "t": "T", "q": 0, "o": 5, "id": "ID1"})) == [
        "ID1", "T@0@0"]
    assert list(C.event_keys({"k": C.R_POPPED, "t": "T", "q": 0, "os": [1, 2000, 2001]})) == [
        "T@0@0", "T@0@1"]
    wide = {"k": C.R_COMMITTED, "t": "T", "q": 0, "o": 0, "e": 1024 * 1000}
    assert list(C.event_keys(wide)) == ["T@0@0", "T@0@999"]  # an offset reset: its two ends


def test_keys_given_by_the_writer_are_those_the_events_would_get() -> None:
    # The recorder builds a delivery's or a commit's keys from its tuple (range_keys) instead
    # of from its dict (event_keys); the records must come out the same either way.
    cache: dict[tuple[str, int, int], str] = {}
    for start, end in ((0, 32), (1000, 1056), (1000, 2100), (0, 1024 * 1000), (5, 5)):
        ev = {"k": C.R_DELIVERED, "t": "T", "q": 1, "o": start, "e": end, "g": "G"}
        assert C.range_keys("T", 1, start, end, cache) == C.event_keys(ev)
    events = [{"ts": i, "k": C.R_COMMITTED, "t": "T", "q": i % 3, "o": 32 * i, "e": 32 * i + 32,
               "g": "G"} for i in range(200)]
    keys = [C.range_keys("T", e["q"], e["o"], e["e"], cache) for e in events]
    assert C.encode_records("b", events, keys) == C.encode_records("b", events)


def test_records_split_before_their_keys_outgrow_the_properties() -> None:
    events = [{"ts": i, "k": C.R_SENT_BACK, "t": "T", "q": 0, "o": i, "id": f"{i:032X}"}
              for i in range(2000)]
    records = C.encode_records("b", events)
    assert len(records) > 1
    assert all(len(r.keys) <= C.MAX_KEYS_CHARS for r in records)
    back = [e for r in records for e in C.decode_record(r.body)[1]]
    assert back == events  # every event once, in order
    broker, first = C.decode_record(records[0].body)
    assert broker == "b" and set(records[0].keys.split(P.KEY_SEPARATOR)) >= {e["id"] for e in first}


def test_client_trace_text_as_rocketmq_clients_write_it() -> None:
    pub_old = CS.join(["Pub", "100", "DefaultRegion", "PG", "T", "MSG1", "tag", "k1",
                       "10.0.0.1:10911", "12", "3", "0", "true"])  # 13 fields: no offset id
    pub_new = CS.join(["Pub", "101", "DefaultRegion", "PG", "T", "MSG2", "tag", "k1",
                       "10.0.0.1:10911", "12", "3", "0", "OFFSETID", "false", "10.0.0.9"])
    sub_before = CS.join(["SubBefore", "110", "DefaultRegion", "CG", "REQ", "MSG1", "2", "k1"])
    sub_after_old = CS.join(["SubAfter", "REQ", "MSG1", "7", "true", "k1"])  # no code, no time
    end_tx = CS.join(["EndTransaction", "120", "R", "PG", "T", "MSG3", "tag", "k", "h:1", "3",
                      "TX1", "COMMIT_MESSAGE", "true"])
    text = FS.join([pub_old, pub_new, sub_before, sub_after_old, end_tx, "Unknown" + CS + "x"])
    got = C.decode_client_trace(text + FS)
    assert [(t.trace_type, t.msg_id) for t in got] == [
        ("Pub", "MSG1"), ("Pub", "MSG2"), ("SubBefore", "MSG1"), ("SubAfter", "MSG1"),
        ("EndTransaction", "MSG3")]
    assert got[0].success is True and got[0].offset_msg_id == ""
    assert (got[1].offset_msg_id, got[1].success, got[1].client_host) == ("OFFSETID", False, "10.0.0.9")
    assert (got[2].group, got[2].retry_times, got[2].request_id) == ("CG", 2, "REQ")
    assert (got[3].cost_ms, got[3].ts, got[3].context_code) == (7, -1, -1)
    assert (got[4].transaction_state, got[4].from_check) == ("COMMIT_MESSAGE", True)
    again = C.decode_client_trace(C.encode_client_trace(got[1:]))
    assert [(t.trace_type, t.msg_id, t.ts, t.group) for t in again] == [
        (t.trace_type, t.msg_id, t.ts if t.trace_type != "SubAfter" else -1, t.group)
        for t in got[1:]]


def _stored(ts: int, topic: str, offset: int, phys: int,
            **detail: str) -> tuple[int, int, str, dict[str, Any]]:
    return (phys, 0, "b", {"ts": ts, "k": C.R_STORED, "t": topic, "q": 0, "o": offset, "p": phys,
                           "id": "M", "d": dict(detail)})


def test_same_millisecond_events_keep_cause_before_effect() -> None:
    stored = [_stored(10, "T", 0, 100), _stored(12, "SCHEDULE_TOPIC_XXXX", 0, 200, delay_level="3"),
              _stored(20, "%RETRY%G", 0, 300, reconsume_times="1")]
    # The send-back is recorded after the copy it made was stored (ts 13 > 12).
    by_id = [(400, 0, "b", {"ts": 13, "k": C.R_SENT_BACK, "t": "T", "q": 0, "o": 0, "g": "G",
                            "id": "M", "d": {"target": "%RETRY%G", "reconsume_times": "1"}})]
    ranged = [
        (500, 0, "b", {"ts": 20, "k": C.R_DELIVERED, "t": "%RETRY%G", "q": 0, "o": 0, "e": 5,
                       "g": "G", "c": "cid@1.2.3.4:5"}),
        (500, 1, "b", {"ts": 10, "k": C.R_DELIVERED, "t": "T", "q": 0, "o": 0, "e": 1, "g": "G"}),
        (500, 2, "b", {"ts": 21, "k": C.R_COMMITTED, "t": "%RETRY%G", "q": 0, "o": 0, "e": 1,
                       "g": "G"}),
        (500, 3, "b", {"ts": 21, "k": C.R_COMMITTED, "t": "T", "q": 0, "o": 3, "e": 9, "g": "H"}),
    ]
    positions = {("T", 0, 0), ("SCHEDULE_TOPIC_XXXX", 0, 0), ("%RETRY%G", 0, 0)}
    events = build("M", stored, by_id, ranged, positions, [])
    assert [(e.kind, e.ts) for e in events] == [
        ("stored", 10), ("delivered", 10), ("failed", 12), ("scheduled", 12), ("retry", 20),
        ("delivered", 20), ("consumed", 21)]  # H's commit (3..9) does not cover offset 0
    assert events[2].detail["retry_level"] == "1" and events[4].detail["retry_level"] == "1"
    assert events[5].client == "cid@1.2.3.4:5"


def test_a_redrive_and_a_transaction_are_named_by_the_copy_before() -> None:
    stored = [_stored(1, "T", 0, 10), _stored(2, "%DLQ%G", 0, 20), _stored(3, "%RETRY%G", 0, 30)]
    kinds = [e.kind for e in build("M", stored, [], [], set(), [])]
    assert kinds == ["stored", "dlq_stored", "redriven"]
    stored = [_stored(1, "RMQ_SYS_TRANS_HALF_TOPIC", 0, 10), _stored(2, "T", 0, 20)]
    assert [e.kind for e in build("M", stored, [], [], set(), [])] == [
        "prepared", "transaction_committed"]


def test_client_records_join_the_timeline_and_an_old_sub_after_gets_a_time() -> None:
    clients = [C.ClientTrace("SubBefore", "M", ts=50, group="CG", request_id="R"),
               C.ClientTrace("SubAfter", "M", request_id="R", cost_ms=7, success=True),
               C.ClientTrace("Pub", "M", ts=5, group="PG", success=True)]
    events = build("M", [_stored(6, "T", 0, 10)], [], [], {("T", 0, 0)}, clients)
    assert [(e.kind, e.ts, e.source) for e in events] == [
        ("client_pub", 5, "client"), ("stored", 6, "broker"), ("client_sub_before", 50, "client"),
        ("client_sub_after", 57, "client")]
