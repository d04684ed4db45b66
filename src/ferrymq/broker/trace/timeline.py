"""A message's timeline from the trace records of this broker's store: its records are found
by unique id in the key index, then the range events (deliveries, commits, pops) of every
position it was stored at by position key; RocketMQ client trace messages found under the
same id are merged in."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import Any

from ...common import props as P
from ...common import trace_events as K
from ...common.names import (
    DLQ_GROUP_TOPIC_PREFIX,
    RETRY_GROUP_TOPIC_PREFIX,
    SCHEDULE_TOPIC,
    TIMER_TOPIC,
    TRANS_HALF_TOPIC,
)
from ...common.record import MessageDecodeError, decode_record
from ...common.trace_events import TraceEvent
from ...store import MessageStore
from . import codec as C

# How many records one key may bring back: a busy queue's bucket has one per flush that
# touched it.
MAX_RECORDS_PER_KEY = 1024

# Within one millisecond: a copy's own events in the order they can happen.
_RANK = {K.PREPARED: 0, K.STORED: 0, K.SCHEDULED: 0, K.TIMER_SCHEDULED: 0, K.RETRY: 0,
         K.DLQ_STORED: 0, K.REDRIVEN: 0, K.TRANSACTION_COMMITTED: 0, K.CLIENT_PUB: 1,
         K.DELIVERED: 2, K.POPPED: 2, K.CLIENT_SUB_BEFORE: 3, K.INVISIBLE_CHANGED: 3,
         K.CLIENT_SUB_AFTER: 4, K.CONSUMED: 5, K.ACKED: 5, K.FAILED: 6, K.DEAD_LETTERED: 6,
         K.TRANSACTION_ROLLED_BACK: 6, K.CLIENT_END_TRANSACTION: 6}


@dataclass(frozen=True, slots=True)
class _Record:
    phys: int
    broker: str
    events: list[dict[str, Any]] | None  # None: a client's trace message
    text: str


def _records(store: MessageStore, key: str) -> list[_Record]:
    out = []
    for hit in store.reads.find_by_key(C.TRACE_TOPIC, key, MAX_RECORDS_PER_KEY):
        phys = hit.phys
        try:
            msg = decode_record(hit.raw)  # again, for the body: the lookup leaves it compressed
        except MessageDecodeError:
            continue
        if msg.properties.get(C.PROPERTY_BROKER_TRACE) == "1":
            try:
                broker, events = C.decode_record(msg.body)
            except C.TraceRecordError:
                continue
            out.append(_Record(phys, broker, events, ""))
        else:
            out.append(_Record(phys, "", None, msg.body.decode("utf-8", "replace")))
    return out


def stored_copies(store: MessageStore, msg_id: str) -> list[dict[str, Any]]:
    """The message's stored copies in every topic of this store, as raw stored events, from
    the store's own unique-key index (one hash lookup per topic)."""
    out: list[dict[str, Any]] = []
    for topic in sorted(store.reads.queues()):
        if topic == C.TRACE_TOPIC:
            continue
        for hit in store.reads.find_by_uniq_key(topic, msg_id):
            m = hit.message
            props = m.properties
            detail: dict[str, str] = {"offset_msg_id": m.offset_msg_id}
            if m.reconsume_times:
                detail["reconsume_times"] = str(m.reconsume_times)
            for name, key in ((P.PROPERTY_DELAY_TIME_LEVEL, "delay_level"),
                              (P.PROPERTY_REAL_TOPIC, "real_topic"), (P.PROPERTY_TAGS, "tags"),
                              (P.PROPERTY_KEYS, "keys"), (P.PROPERTY_TIMER_OUT_MS, "deliver_ms")):
                value = props.get(name)
                if value:
                    detail[key] = value
            out.append({"ts": m.store_timestamp, "k": C.R_STORED, "t": m.topic,
                        "q": m.queue_id, "o": m.queue_offset, "p": hit.phys, "id": msg_id,
                        "d": detail})
    return out


def lookup(store: MessageStore, msg_id: str, broker_name: str) -> list[TraceEvent]:
    """Every recorded event of the message with unique id `msg_id` on this broker."""
    seen: set[int] = set()
    stored: list[tuple[int, int, str, dict[str, Any]]] = [
        (int(ev["p"]), 0, broker_name, ev) for ev in stored_copies(store, msg_id)]
    by_id: list[tuple[int, int, str, dict[str, Any]]] = []
    clients: list[C.ClientTrace] = []
    for rec in _records(store, msg_id):
        if rec.phys in seen:
            continue
        seen.add(rec.phys)
        if rec.events is None:
            clients += [t for t in C.decode_client_trace(rec.text) if t.msg_id == msg_id]
            continue
        for i, ev in enumerate(rec.events):
            if ev.get("id") != msg_id:
                continue
            if ev.get("k") != C.R_STORED:
                by_id.append((rec.phys, i, rec.broker or broker_name, ev))
    positions = {(str(ev["t"]), int(ev["q"]), int(ev["o"])) for _, _, _, ev in stored}
    ranged: list[tuple[int, int, str, dict[str, Any]]] = []
    range_seen = {(phys, i) for phys, i, _, _ in by_id}
    for key in sorted({C.offset_key(t, q, o) for t, q, o in positions}):
        for rec in _records(store, key):
            if rec.events is None:
                continue
            for i, ev in enumerate(rec.events):
                if ev.get("k") == C.R_STORED or (rec.phys, i) in range_seen:
                    continue
                if _covered(ev, positions):
                    range_seen.add((rec.phys, i))
                    ranged.append((rec.phys, i, rec.broker or broker_name, ev))
    return build(msg_id, stored, by_id, ranged, positions, clients)


def _covered(ev: dict[str, Any], positions: set[tuple[str, int, int]]) -> bool:
    return bool(_offsets_of(ev, positions))


def _offsets_of(ev: dict[str, Any], positions: set[tuple[str, int, int]]) -> list[int]:
    topic, qid = ev.get("t"), ev.get("q")
    mine = [o for t, q, o in positions if t == topic and q == qid]
    if not mine:
        return []
    if "os" in ev:
        listed = {int(x) for x in ev["os"]}
        return [o for o in mine if o in listed]
    start = int(ev.get("o", -1))
    end = int(ev.get("e", start + 1))
    if ev.get("k") in (C.R_SENT_BACK, C.R_DEAD_LETTERED, C.R_INVISIBLE):
        end = start + 1
    return [o for o in mine if start <= o < end]


def build(msg_id: str, stored: list[tuple[int, int, str, dict[str, Any]]],
          by_id: list[tuple[int, int, str, dict[str, Any]]],
          ranged: list[tuple[int, int, str, dict[str, Any]]],
          positions: set[tuple[str, int, int]],
          clients: Iterable[C.ClientTrace]) -> list[TraceEvent]:
    """The timeline, oldest first. Each stored copy is a generation (commit-log order);
    events of the same millisecond keep generation, then causal order."""
    stored = sorted(stored, key=lambda s: int(s[3].get("p", s[0])))
    gen: dict[tuple[str, int, int], int] = {}
    keyed: list[tuple[tuple[int, int, int, int, int], TraceEvent]] = []
    previous = ""
    for n, (phys, i, broker, ev) in enumerate(stored):
        pos = (str(ev["t"]), int(ev["q"]), int(ev["o"]))
        gen.setdefault(pos, n)
        kind = _stored_kind(pos[0], previous)
        previous = pos[0]
        detail = {str(k): str(v) for k, v in dict(ev.get("d") or {}).items()}
        if kind in (K.RETRY, K.REDRIVEN) and "reconsume_times" in detail:
            detail["retry_level"] = detail["reconsume_times"]
        te = TraceEvent(int(ev["ts"]), kind, msg_id, broker, pos[0], pos[1], pos[2],
                        detail=detail)
        keyed.append(((te.ts, n, _RANK[kind], phys, i), te))
    copies = [(int(ev["ts"]), n, str(ev["t"])) for n, (_, _, _, ev) in enumerate(stored)]
    tagged = [(item, True) for item in by_id] + [(item, False) for item in ranged]
    for (phys, i, broker, ev), named in tagged:
        # An event found by the message's id stands even where no copy is known any more
        # (expired); a range event only for the copies it covers.
        fallback = [int(ev.get("o", -1))] if named else []
        for o in _offsets_of(ev, positions) or fallback:
            pos = (str(ev.get("t", "")), int(ev.get("q", -1)), o)
            found = _event(msg_id, broker, ev, pos)
            if found is None:
                continue
            g = gen.get(pos, 0)
            if found.kind in (K.FAILED, K.DEAD_LETTERED):
                # Recorded once the copy it made was stored: it sorts (and is timed) at that
                # copy, just before it.
                made = _copy_made(copies, g, found.ts, found.detail.get("target", ""))
                if made is not None:
                    found = replace(found, ts=made[0])
                    keyed.append(((made[0], made[1], -1, phys, i), found))
                    continue
            keyed.append(((found.ts, g, _RANK[found.kind], phys, i), found))
    last_gen = max(gen.values(), default=0)
    clients = list(clients)
    started = {c.request_id: c.ts for c in clients if c.trace_type == "SubBefore"}
    for j, ct in enumerate(clients):
        if ct.ts < 0 and ct.request_id in started:  # older clients' SubAfter has no time
            ct = replace(ct, ts=started[ct.request_id] + max(ct.cost_ms, 0))
        te = _client_event(msg_id, ct)
        keyed.append(((te.ts, last_gen if te.kind != K.CLIENT_PUB else 0, _RANK[te.kind],
                       -1, j), te))
    keyed.sort(key=lambda x: x[0])
    return [te for _, te in keyed]


def _copy_made(copies: list[tuple[int, int, str]], source_gen: int, ts: int,
               target: str) -> tuple[int, int] | None:
    """(ts, generation) of the copy a send-back made: the first one after the source stored
    no later than the send-back was recorded, in its target or the delay schedule."""
    for c_ts, n, topic in copies:
        if n > source_gen and c_ts <= ts and topic in (target, SCHEDULE_TOPIC):
            return c_ts, n
    return None


def _stored_kind(topic: str, previous: str) -> str:
    if topic == SCHEDULE_TOPIC:
        return K.SCHEDULED
    if topic == TIMER_TOPIC:
        return K.TIMER_SCHEDULED
    if topic == TRANS_HALF_TOPIC:
        return K.PREPARED
    if topic.startswith(DLQ_GROUP_TOPIC_PREFIX):
        return K.DLQ_STORED
    if topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
        return K.REDRIVEN if previous.startswith(DLQ_GROUP_TOPIC_PREFIX) else K.RETRY
    if previous == TRANS_HALF_TOPIC:
        return K.TRANSACTION_COMMITTED
    return K.STORED


_RAW_TO_KIND = {C.R_DELIVERED: K.DELIVERED, C.R_COMMITTED: K.CONSUMED, C.R_SENT_BACK: K.FAILED,
                C.R_DEAD_LETTERED: K.DEAD_LETTERED, C.R_POPPED: K.POPPED, C.R_ACKED: K.ACKED,
                C.R_INVISIBLE: K.INVISIBLE_CHANGED, C.R_ROLLED_BACK: K.TRANSACTION_ROLLED_BACK}


def _event(msg_id: str, broker: str, ev: dict[str, Any], pos: tuple[str, int, int]) -> TraceEvent | None:
    kind = _RAW_TO_KIND.get(str(ev.get("k")))
    if kind is None:
        return None
    detail = {str(k): str(v) for k, v in dict(ev.get("d") or {}).items()}
    if kind == K.FAILED and "reconsume_times" in detail:
        detail["retry_level"] = detail["reconsume_times"]
    return TraceEvent(ts_at(ev, pos[2]), kind, msg_id, broker, pos[0], pos[1], pos[2],
                      group=str(ev.get("g", "")), client=str(ev.get("c", "")), detail=detail)


def ts_at(ev: dict[str, Any], offset: int) -> int:
    """When a range event happened to the message at `offset`: its "ts", or the time of the
    last split ("r", [[from offset, ts], ...], ascending) at or below the offset, for a range
    the recorder coalesced from several pulls or commits."""
    ts = int(ev.get("ts", 0))
    for start, at in ev.get("r") or ():
        if offset < int(start):
            break
        ts = int(at)
    return ts


_CLIENT_KINDS = {"Pub": K.CLIENT_PUB, "SubBefore": K.CLIENT_SUB_BEFORE,
                 "SubAfter": K.CLIENT_SUB_AFTER, "EndTransaction": K.CLIENT_END_TRANSACTION}


def _client_event(msg_id: str, ct: C.ClientTrace) -> TraceEvent:
    detail: dict[str, str] = {}
    for name, value in (("region", ct.region), ("tags", ct.tags), ("keys", ct.keys),
                        ("store_host", ct.store_host), ("offset_msg_id", ct.offset_msg_id),
                        ("request_id", ct.request_id),
                        ("transaction_state", ct.transaction_state),
                        ("transaction_id", ct.transaction_id)):
        if value:
            detail[name] = value
    if ct.cost_ms >= 0:
        detail["cost_ms"] = str(ct.cost_ms)
    if ct.success is not None:
        detail["success"] = "true" if ct.success else "false"
    if ct.retry_times >= 0:
        detail["retry_times"] = str(ct.retry_times)
    if ct.from_check is not None:
        detail["from_transaction_check"] = "true" if ct.from_check else "false"
    return TraceEvent(ct.ts, _CLIENT_KINDS[ct.trace_type], msg_id, "", ct.topic,
                      group=ct.group, client=ct.client_host, source="client", detail=detail)

