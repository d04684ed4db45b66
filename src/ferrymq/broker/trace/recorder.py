"""The broker's trace recorder: state changes are appended to an in-memory buffer on the hot
paths (one append per pull, per commit that moves an offset, per send-back or pop request); a
task turns the buffer into trace records every trace_flush_interval_ms (50 ms) and writes them
through the store to RMQ_SYS_TRACE_TOPIC, so they are replicated, indexed and expired like any
message.

Stores need no record: every stored copy of a message (its topic, a retry, the DLQ, the delay
schedule, a half message) is found by its unique id in the store's own key index, with its
store time and position (timeline.py). A put costs nothing more with trace on."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import TYPE_CHECKING, Any

from ...common import props as P
from ...common.names import (
    CID_SYS_RMQ_TRANS,
    TOOLS_CONSUMER_GROUP,
    TRANS_CHECK_MAX_TIME_TOPIC,
    TRANS_OP_HALF_TOPIC,
)
from ...store import StoreMessage
from ..events import MessageEvent, MessageEventKind
from . import codec as C
from .codec import BUCKET

if TYPE_CHECKING:
    from ..core import BrokerCore

log = logging.getLogger("ferrymq.broker.trace")

# Entries made into records per loop turn by a flush.
FLUSH_SLICE = 64

# Messages the broker writes for its own bookkeeping: not part of any message's life.
_UNTRACED_TOPICS = frozenset({C.TRACE_TOPIC, TRANS_OP_HALF_TOPIC, TRANS_CHECK_MAX_TIME_TOPIC})
_UNTRACED_GROUPS = frozenset({TOOLS_CONSUMER_GROUP, CID_SYS_RMQ_TRANS})


# What the recorder takes as MessageEvents: rare per request. Deliveries and offset moves, one
# per pull and per commit, come through delivered() and on_commit() without an event object;
# stored copies are read from the store itself.
TRACED_EVENTS = frozenset({
    MessageEventKind.SENT_BACK, MessageEventKind.DEAD_LETTERED, MessageEventKind.POPPED,
    MessageEventKind.ACKED, MessageEventKind.INVISIBLE_CHANGED, MessageEventKind.ROLLED_BACK,
})


class TraceRecorder:
    def __init__(self, broker: BrokerCore, *, flush_interval_ms: int, max_buffered: int) -> None:
        self._broker = broker
        self._interval = flush_interval_ms / 1000
        self._max = max_buffered
        self._buf: list[tuple[Any, ...]] = []
        self._flushing = asyncio.Lock()
        # Set when the buffer stops being empty: an idle broker's writer sleeps instead of
        # waking every interval.
        self._pending = asyncio.Event()
        self._task_flush: asyncio.Future[None] | None = None  # run()'s, kept referenced
        self.dropped = 0  # entries lost to a full buffer (overload) or a refused write
        self.records_written = 0
        self.events_written = 0

    def runtime_table(self) -> dict[str, str]:
        """GET_BROKER_RUNTIME_INFO keys: what was written, what is waiting, what was lost."""
        return {"traceEnable": "true", "traceEventsWritten": str(self.events_written),
                "traceRecordsWritten": str(self.records_written),
                "traceEventsBuffered": str(len(self._buf)),
                "traceEventsDropped": str(self.dropped)}

    # --- the hot-path side: one append each ----------------------------------------------------
    def on_event(self, event: MessageEvent) -> None:
        self._add(("ev", self._broker.now_ms(), event))

    def delivered(self, topic: str, queue_id: int, offset: int, next_offset: int, group: str,
                  client: str) -> None:
        """A pull returned [offset, next_offset) of the queue to a consumer of the group."""
        self._add(("pull", self._broker.now_ms(), topic, queue_id, offset, next_offset, group,
                   client))

    def on_commit(self, group: str, topic: str, queue_id: int, old: int, new: int) -> None:
        self._add(("commit", self._broker.now_ms(), group, topic, queue_id, old, new))

    def _add(self, entry: tuple[Any, ...]) -> None:
        if len(self._buf) >= self._max:
            self.dropped += 1
            return
        if not self._buf:
            self._pending.set()
        self._buf.append(entry)

    # --- off the hot path --------------------------------------------------------------------
    async def run(self) -> None:
        while True:
            await self._pending.wait()
            await asyncio.sleep(self._interval)  # let a batch gather
            self._pending.clear()
            # Shielded: the broker's stop cancels this task, then flushes. A flush cancelled
            # between two slices had taken its entries out of the buffer and dropped them;
            # left to finish, it is waited for by the stop's flush (the lock).
            self._task_flush = asyncio.ensure_future(self._flush_quietly())
            await asyncio.shield(self._task_flush)

    async def _flush_quietly(self) -> None:
        with contextlib.suppress(Exception):
            await self.flush()

    async def flush(self) -> int:
        """Write what is buffered now; returns the number of events written. A flush under
        way is finished first, so on return everything buffered before the call is stored."""
        async with self._flushing:
            return await self._flush()

    async def _flush(self) -> int:
        if not self._buf:
            return 0
        entries, self._buf = self._buf, []
        store = self._broker.store
        if store is None or self._broker.refuse_writes():
            # A slave: the master records what it sees.
            with contextlib.suppress(Exception):
                self.dropped += len(self._raw_events(entries)[0])
            return 0
        name = self._broker.config.broker_name
        host = str(store.config.store_host)
        msgs: list[StoreMessage] = []
        count = 0
        # In slices, with a loop turn between them: 50 ms of a busy broker's events (hundreds)
        # made into records at once held the loop long enough to show in every request's tail.
        for i in range(0, len(entries), FLUSH_SLICE):
            if i:
                await asyncio.sleep(0)
            try:
                events, keys = self._raw_events(entries[i:i + FLUSH_SLICE])
            except Exception:
                log.exception("trace events could not be built; %d dropped",
                              len(entries) - i)
                self.dropped += len(entries) - i
                break
            now = self._broker.now_ms()
            msgs += [StoreMessage(topic=C.TRACE_TOPIC, queue_id=0, body=rec.body,
                                  properties={P.PROPERTY_KEYS: rec.keys,
                                              C.PROPERTY_BROKER_TRACE: "1"},
                                  born_timestamp=now, born_host=host)
                     for rec in C.encode_records(name, events, keys)]
            count += len(events)
        if not msgs:
            return 0
        result = await self._broker.put(msgs, allow_delay=False)
        if not result.status.stored:
            log.warning("trace records not stored (%s): %d events lost", result.status.name,
                        count)
            self.dropped += count
            return 0
        self.records_written += len(msgs)
        self.events_written += count
        return count

    def _raw_events(self, entries: list[tuple[Any, ...]]) -> tuple[list[dict[str, Any]], list[list[str]]]:
        """The raw events of buffered entries and each one's index keys.

        Deliveries and commits, nearly every entry of a consuming broker, are coalesced: a
        pull (or commit) of a queue that starts where the same group's (and client's) last
        one in these entries ended extends that event's range instead of making another,
        and records its own time as a split [offset, ts] in the event's "r" when it differs
        (codec.py). A consumer's pulls of one queue follow each other that way, so a slice
        of entries becomes a few events: the writer's CPU went with the number of events
        (a dict, its keys and its JSON each), and a pull of 32 messages and its commit made
        two. Their keys come from the tuples' offsets (codec.range_keys), not the dicts."""
        out: list[dict[str, Any]] = []
        keys: list[list[str]] = []
        clients: dict[tuple[str, str], str] = {}
        positions: dict[tuple[str, int, int], str] = {}
        # (tag, topic, queue, group, client) -> the open event of that run and its keys
        runs: dict[tuple[Any, ...], tuple[dict[str, Any], list[str]]] = {}
        range_keys = C.range_keys
        for entry in entries:
            tag = entry[0]
            if tag == "commit":
                _, ts, group, topic, qid, start, end = entry
                client = ""
            elif tag == "pull":
                _, ts, topic, qid, start, end, group, client = entry
            else:
                _, ts, ev = entry
                found = self._event(ts, ev, clients)
                if found is not None:
                    out.append(found)
                    keys.append(C.event_keys(found, positions))
                continue
            if group in _UNTRACED_GROUPS or topic in _UNTRACED_TOPICS:
                continue
            run_key = (tag, topic, qid, group, client)
            run = runs.get(run_key)
            if run is not None and run[0]["e"] == start and end > start > 0:
                raw, raw_keys = run
                raw["e"] = end
                splits = raw.get("r")
                if ts != (splits[-1][1] if splits else raw["ts"]):
                    if splits is None:
                        splits = raw["r"] = []
                    splits.append([start, ts])
                # The run's keys hold the bucket of its last offset so far (start - 1).
                if (end - 1) // BUCKET != (start - 1) // BUCKET:
                    for k in range_keys(topic, qid, start, end, positions):
                        if k not in raw_keys:
                            raw_keys.append(k)
                continue
            mine = range_keys(topic, qid, start, end, positions) if start >= 0 else []
            if tag == "commit":
                raw = {"ts": ts, "k": C.R_COMMITTED, "t": topic, "q": qid, "o": start, "e": end,
                       "g": group}
            else:
                raw = {"ts": ts, "k": C.R_DELIVERED, "t": topic, "q": qid, "o": start, "e": end,
                       "g": group}
                if client:
                    raw["c"] = self._client_name(group, client, clients)
            out.append(raw)
            keys.append(mine)
            runs[run_key] = (raw, mine)
        return out, keys

    def _event(self, ts: int, ev: MessageEvent, clients: dict[tuple[str, str], str]) -> dict[str, Any] | None:
        if ev.group in _UNTRACED_GROUPS or ev.topic in _UNTRACED_TOPICS:
            return None
        kind = ev.kind.value
        raw: dict[str, Any] = {"ts": ts, "k": kind, "t": ev.topic, "q": ev.queue_id,
                               "o": ev.queue_offset}
        if ev.group:
            raw["g"] = ev.group
        if ev.client:
            raw["c"] = self._client_name(ev.group, ev.client, clients)
        if ev.msg_id and ev.kind not in (MessageEventKind.DELIVERED,):
            raw["id"] = ev.msg_id
        detail = dict(ev.detail)
        offsets = detail.pop("offsets", None)
        if offsets is not None:
            raw["os"] = [int(o) for o in offsets.split(",") if o]
        nxt = detail.pop("next", None)
        if ev.kind is MessageEventKind.DELIVERED:
            raw["e"] = int(nxt) if nxt is not None else ev.queue_offset + ev.count
        if detail:
            raw["d"] = detail
        return raw

    def _client_name(self, group: str, addr: str, cache: dict[tuple[str, str], str]) -> str:
        """A consumer's client id with its address ("id@addr"), when it is registered."""
        key = (group, addr)
        found = cache.get(key)
        if found is None:
            found = addr
            info = self._broker.clients.consumer_group(group) if group else None
            if info is not None:
                for ch in list(info.channels.values()):
                    if ch.addr == addr:
                        found = f"{ch.client_id}@{addr}"
                        break
            cache[key] = found
        return found

