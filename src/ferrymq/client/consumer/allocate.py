"""Queue allocation among a group's members. Every member computes the same answer from the
same sorted inputs, so no coordination is needed (RocketMQ's AllocateMessageQueueStrategy)."""

from __future__ import annotations

import bisect
import hashlib
from collections.abc import Callable, Sequence

from ...common.message import MessageQueue

AllocateStrategy = Callable[[str, str, Sequence[MessageQueue], Sequence[str]], list[MessageQueue]]


def allocate_averagely(
    group: str, current: str, mqs: Sequence[MessageQueue], cids: Sequence[str]
) -> list[MessageQueue]:
    """Contiguous blocks, the first `len(mqs) % len(cids)` members taking one extra."""
    if current not in cids or not mqs:
        return []
    index = list(cids).index(current)
    n, m = len(mqs), len(cids)
    mod = n % m
    if n <= m:
        average = 1
    elif mod > 0 and index < mod:
        average = n // m + 1
    else:
        average = n // m
    start = index * average if mod > 0 and index < mod else index * average + mod
    count = min(average, n - start)
    return [mqs[(start + i) % n] for i in range(max(count, 0))]


def allocate_by_circle(
    group: str, current: str, mqs: Sequence[MessageQueue], cids: Sequence[str]
) -> list[MessageQueue]:
    """Round robin: member i takes queues i, i+m, i+2m, ..."""
    if current not in cids:
        return []
    index = list(cids).index(current)
    return [mqs[i] for i in range(index, len(mqs), len(cids))]


def _hash(text: str) -> int:
    return int.from_bytes(hashlib.md5(text.encode("utf-8")).digest()[:8], "big")


def consistent_hash(virtual_nodes: int = 10) -> AllocateStrategy:
    """A hash ring: a member joining or leaving moves only the queues next to it."""

    def allocate(
        group: str, current: str, mqs: Sequence[MessageQueue], cids: Sequence[str]
    ) -> list[MessageQueue]:
        if current not in cids:
            return []
        ring = sorted((_hash(f"{cid}-{i}"), cid) for cid in cids for i in range(virtual_nodes))
        keys = [h for h, _ in ring]
        out = []
        for mq in mqs:
            i = bisect.bisect_left(keys, _hash(f"{mq.topic}@{mq.broker_name}:{mq.queue_id}"))
            if ring[i % len(ring)][1] == current:
                out.append(mq)
        return out

    return allocate


STRATEGIES: dict[str, AllocateStrategy] = {
    "averagely": allocate_averagely,
    "circle": allocate_by_circle,
    "consistent_hash": consistent_hash(),
}


def resolve(strategy: str | AllocateStrategy) -> AllocateStrategy:
    if callable(strategy):
        return strategy
    try:
        return STRATEGIES[strategy]
    except KeyError:
        raise ValueError(
            f"unknown allocation strategy {strategy!r}; one of {sorted(STRATEGIES)}"
        ) from None
