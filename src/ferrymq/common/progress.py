"""Wire bodies of ferrymq's precise-acknowledgement extension (pure functions).

A queue's progress is its committed offset plus sorted, disjoint [start, end) ranges above it
that are already consumed. Apache RocketMQ clients never send or ask for these; ferrymq
clients use them with ferrymq brokers only."""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from . import jsonx
from .errors import FerryMQError

Ranges = list[tuple[int, int]]

# QUERY_CONSUMER_OFFSET header field by which a ferrymq client asks for the ranges too; the
# answer then carries them as its body (encode_ranges).
WITH_ACK_RANGES = "withAckRanges"
# UPDATE_CONSUMER_PROGRESS header field ("true"): the client gives these queues up, this is
# its last commit of them (the broker's hand-over waits for it: broker/handover.py).
RELEASED = "released"
# QUERY_CONSUMER_OFFSET header field: how long (ms) the asking member lets the broker wait for
# the queue's previous owner to release it. Clients that do not send it are answered at once.
HANDOVER_WAIT_MS = "handoverWaitMs"


class ProgressDecodeError(FerryMQError, ValueError):
    """A progress body that is not what the extension defines."""


@dataclass(frozen=True, slots=True)
class QueueProgressUpdate:
    topic: str
    queue_id: int
    offset: int
    acked: tuple[tuple[int, int], ...] = ()


def normalize_ranges(ranges: Iterable[Iterable[Any]], above: int) -> Ranges:
    """Sorted, merged ranges strictly above `above` (clipped there); malformed input raises."""
    pairs = sorted((int(a), int(b)) for a, b in ranges)
    out: Ranges = []
    for a, b in pairs:
        a = max(a, above + 1)
        if b <= a:
            continue
        if out and a <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], b))
        else:
            out.append((a, b))
    return out


def encode_ranges(ranges: Iterable[tuple[int, int]]) -> bytes:
    return jsonx.dumps_bytes([[a, b] for a, b in ranges])


def decode_ranges(body: bytes | None, above: int) -> Ranges:
    try:
        raw = jsonx.loads(body or b"[]")
        if not isinstance(raw, list):
            raise TypeError("not a list")
        return normalize_ranges(raw, above)
    except (ValueError, TypeError) as exc:
        raise ProgressDecodeError(f"ack ranges must be [[start, end], ...]: {exc}") from exc


def encode_progress(group: str, updates: Iterable[QueueProgressUpdate]) -> bytes:
    """A consumer sends one within a millisecond of its completions: the C encoder, whose
    output for these plain values is jsonx's (ten times faster)."""
    return json.dumps(
        {
            "consumerGroup": group,
            "entries": [
                {
                    "topic": u.topic,
                    "queueId": u.queue_id,
                    "commitOffset": u.offset,
                    "acked": [[a, b] for a, b in u.acked],
                }
                for u in updates
            ],
        },
        separators=(",", ":"),
        ensure_ascii=False,
    ).encode("utf-8")


def decode_progress(body: bytes | None) -> tuple[str, list[QueueProgressUpdate]]:
    try:
        raw = jsonx.loads(body or b"{}")
        group = str(raw["consumerGroup"])
        updates = []
        for e in raw.get("entries") or []:
            offset = int(e["commitOffset"])
            acked = tuple(normalize_ranges(e.get("acked") or [], offset))
            updates.append(QueueProgressUpdate(str(e["topic"]), int(e["queueId"]), offset, acked))
        return group, updates
    except (ValueError, TypeError, KeyError, AttributeError) as exc:
        raise ProgressDecodeError(f"malformed progress body: {exc!r}") from exc
