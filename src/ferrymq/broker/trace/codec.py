"""What the broker writes to RMQ_SYS_TRACE_TOPIC, and RocketMQ's client trace data read back.

A broker trace record is one stored message per batch of events: its body is JSON
{"v": 1, "broker": name, "events": [raw event, ...]}, its KEYS the unique ids of the messages
it mentions and one position key per 1024 queue offsets its range events cover, so the key
index finds a message's records without a scan. Raw events use short field names: ts, k
(raw kind), t/q/o (topic, queue, offset), e (exclusive end of an offset range), os (offsets,
for pop), g (group), c (client), id (unique id), p (commit-log offset), d (detail), r (splits
of a range coalesced from several pulls or commits: [[from offset, ts], ...], the offsets
from each on at that ts; the range's start has "ts")."""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from ...common import props as P
from ...common.errors import FerryMQError

TRACE_TOPIC = "RMQ_SYS_TRACE_TOPIC"
# Marks a record written by a broker (a client's trace message has no such property).
PROPERTY_BROKER_TRACE = "FERRYMQ_TRACE"
BUCKET = 1024
# A range event wider than this many buckets (an offset reset) is indexed at its two ends.
MAX_BUCKETS = 64
# A record's KEYS stay well inside the 32 KiB the properties of a message may take.
MAX_KEYS_CHARS = 16_000
MAX_EVENTS_PER_RECORD = 2_000

# Raw kinds (what the broker saw), turned into timeline kinds by timeline.py.
R_STORED = "stored"
R_DELIVERED = "delivered"
R_COMMITTED = "committed"
R_SENT_BACK = "sent_back"
R_DEAD_LETTERED = "dead_lettered"
R_POPPED = "popped"
R_ACKED = "acked"
R_INVISIBLE = "invisible_changed"
R_ROLLED_BACK = "rolled_back"


class TraceRecordError(FerryMQError, ValueError):
    def __init__(self, reason: str) -> None:
        super().__init__(f"not a broker trace record: {reason}")
        self.reason = reason


def position_key(topic: str, queue_id: int, bucket: int) -> str:
    return f"{topic}@{queue_id}@{bucket}"


def offset_key(topic: str, queue_id: int, offset: int) -> str:
    return position_key(topic, queue_id, offset // BUCKET)


def range_keys(topic: str, queue_id: int, start: int, end: int,
               cache: dict[tuple[str, int, int], str]) -> list[str]:
    """The position keys of the queue offsets [start, end): one per bucket, or the two ends of
    a range wider than MAX_BUCKETS buckets (an offset reset). `cache` keeps the keys built."""
    first, last = start // BUCKET, max(start, end - 1) // BUCKET
    if first == last:  # a pull's or a commit's range, nearly always
        key = cache.get((topic, queue_id, first))
        if key is None:
            key = cache[(topic, queue_id, first)] = position_key(topic, queue_id, first)
        return [key]
    buckets = (first, last) if last - first + 1 > MAX_BUCKETS else range(first, last + 1)
    return [_cached_key(topic, queue_id, b, cache) for b in buckets]


def _cached_key(topic: str, queue_id: int, bucket: int,
                cache: dict[tuple[str, int, int], str]) -> str:
    key = cache.get((topic, queue_id, bucket))
    if key is None:
        key = cache[(topic, queue_id, bucket)] = position_key(topic, queue_id, bucket)
    return key


def event_keys(ev: dict[str, Any], cache: dict[tuple[str, int, int], str] | None = None) -> list[str]:
    """The index keys one raw event needs (`cache` keeps position keys built already)."""
    out: list[str] = []
    msg_id = ev.get("id")
    if msg_id:
        out.append(str(msg_id))
    topic, qid = ev.get("t"), ev.get("q")
    if topic is None or qid is None:
        return out
    if cache is None:
        cache = {}
    offsets = ev.get("os")
    if offsets is not None:
        out += [_cached_key(topic, qid, b, cache) for b in sorted({int(o) // BUCKET for o in offsets})]
        return out
    start = int(ev.get("o", -1))
    if start < 0:
        return out
    out += range_keys(topic, qid, start, int(ev.get("e", start + 1)), cache)
    return out


@dataclass(frozen=True, slots=True)
class EncodedRecord:
    body: bytes
    keys: str
    events: int


def encode_records(broker: str, events: Sequence[dict[str, Any]],
                   keys: Sequence[list[str]] | None = None) -> list[EncodedRecord]:
    """Events in records of bounded key length, in order. `keys`, when given, holds each
    event's index keys (what event_keys would give), built by the caller from what it had at
    hand: for deliveries and commits, the bulk of the events, that is a third of the writer's
    CPU saved."""
    out: list[EncodedRecord] = []
    batch: list[dict[str, Any]] = []
    record_keys: dict[str, None] = {}
    chars = 0

    def close() -> None:
        nonlocal batch, record_keys, chars
        if batch:
            # Plain JSON through the C encoder: this runs for every event recorded.
            body = json.dumps({"v": 1, "broker": broker, "events": batch},
                              separators=(",", ":")).encode()
            out.append(EncodedRecord(body, P.KEY_SEPARATOR.join(record_keys), len(batch)))
        batch, record_keys, chars = [], {}, 0

    if keys is None:
        cache: dict[tuple[str, int, int], str] = {}
        keys = [event_keys(ev, cache) for ev in events]
    for ev, mine in zip(events, keys, strict=True):
        new = [k for k in mine if k not in record_keys]
        cost = 0
        for k in new:
            cost += len(k) + 1
        if batch and (chars + cost > MAX_KEYS_CHARS or len(batch) >= MAX_EVENTS_PER_RECORD):
            close()
            new = list(dict.fromkeys(mine))
            cost = sum(len(k) + 1 for k in new)
        batch.append(ev)
        for k in new:
            record_keys[k] = None
        chars += cost
    close()
    return out


def decode_record(body: bytes) -> tuple[str, list[dict[str, Any]]]:
    """(broker name, raw events) of a broker trace record's body."""
    try:
        doc = json.loads(body)
    except ValueError as exc:
        raise TraceRecordError(str(exc)) from None
    if not isinstance(doc, dict) or not isinstance(doc.get("events"), list):
        raise TraceRecordError("no events list")
    events = [e for e in doc["events"] if isinstance(e, dict)]
    return str(doc.get("broker", "")), events


# --- RocketMQ's client trace data (TraceDataEncoder) ---------------------------------------

CONTENT_SPLITOR = "\x01"
FIELD_SPLITOR = "\x02"


@dataclass(frozen=True, slots=True)
class ClientTrace:
    """One context of a client's trace message: Pub, SubBefore, SubAfter or EndTransaction.
    Fields a type does not carry are empty (or -1)."""

    trace_type: str
    msg_id: str
    ts: int = -1
    region: str = ""
    group: str = ""
    topic: str = ""
    tags: str = ""
    keys: str = ""
    store_host: str = ""
    client_host: str = ""
    offset_msg_id: str = ""
    request_id: str = ""
    cost_ms: int = -1
    success: bool | None = None
    retry_times: int = -1
    transaction_state: str = ""
    transaction_id: str = ""
    from_check: bool | None = None
    context_code: int = -1


def _int(text: str, default: int = -1) -> int:
    try:
        return int(text)
    except ValueError:
        return default


def _bool(text: str) -> bool:
    return text.strip().lower() == "true"


def decode_client_trace(text: str) -> list[ClientTrace]:
    """TraceDataEncoder.decoderFromTraceDataString: contexts split by \\x02, fields by \\x01.
    Lines of unknown types, or too short for their type, are skipped."""
    out: list[ClientTrace] = []
    for context in text.split(FIELD_SPLITOR):
        f = context.split(CONTENT_SPLITOR)
        kind = f[0]
        if kind == "Pub" and len(f) >= 12:
            success: bool | None = None
            offset_id = client_host = ""
            if len(f) == 13:
                success = _bool(f[12])
            elif len(f) >= 14:
                offset_id, success = f[12], _bool(f[13])
                if len(f) >= 15:
                    client_host = f[14]
            out.append(ClientTrace("Pub", f[5], ts=_int(f[1]), region=f[2], group=f[3],
                                   topic=f[4], tags=f[6], keys=f[7], store_host=f[8],
                                   cost_ms=_int(f[10]), success=success,
                                   offset_msg_id=offset_id, client_host=client_host))
        elif kind == "SubBefore" and len(f) >= 8:
            out.append(ClientTrace("SubBefore", f[5], ts=_int(f[1]), region=f[2], group=f[3],
                                   request_id=f[4], retry_times=_int(f[6]), keys=f[7]))
        elif kind == "SubAfter" and len(f) >= 6:
            out.append(ClientTrace("SubAfter", f[2], request_id=f[1], cost_ms=_int(f[3]),
                                   success=_bool(f[4]), keys=f[5],
                                   context_code=_int(f[6]) if len(f) >= 7 else -1,
                                   ts=_int(f[7]) if len(f) >= 8 else -1))
        elif kind == "EndTransaction" and len(f) >= 13:
            out.append(ClientTrace("EndTransaction", f[5], ts=_int(f[1]), region=f[2],
                                   group=f[3], topic=f[4], tags=f[6], keys=f[7],
                                   store_host=f[8], transaction_id=f[10],
                                   transaction_state=f[11], from_check=_bool(f[12])))
    return out


def encode_client_trace(traces: Iterable[ClientTrace]) -> str:
    """The text a RocketMQ client sends (TraceDataEncoder.encoderFromContextBean), for tests
    and tools that play a client."""
    parts: list[str] = []
    for t in traces:
        if t.trace_type == "Pub":
            fields = ["Pub", str(t.ts), t.region, t.group, t.topic, t.msg_id, t.tags, t.keys,
                      t.store_host, "0", str(max(t.cost_ms, 0)), "0", t.offset_msg_id,
                      "true" if t.success else "false"]
        elif t.trace_type == "SubBefore":
            fields = ["SubBefore", str(t.ts), t.region, t.group, t.request_id, t.msg_id,
                      str(max(t.retry_times, 0)), t.keys]
        elif t.trace_type == "SubAfter":
            fields = ["SubAfter", t.request_id, t.msg_id, str(max(t.cost_ms, 0)),
                      "true" if t.success else "false", t.keys, str(max(t.context_code, 0)),
                      str(t.ts)]
        else:
            fields = ["EndTransaction", str(t.ts), t.region, t.group, t.topic, t.msg_id,
                      t.tags, t.keys, t.store_host, "0", t.transaction_id,
                      t.transaction_state, "true" if t.from_check else "false"]
        parts.append(CONTENT_SPLITOR.join(fields) + FIELD_SPLITOR)
    return "".join(parts)
