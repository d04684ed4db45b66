"""Where a group new to a queue starts when the broker decides: RocketMQ's "young queue" rule.

A group with no stored offset on a queue whose first message (queue offset 0) is still "in
memory" starts at 0, whatever its consume-from-where: a consumer subscribed before its topic
existed learns of the queues only after the first messages arrived, and must not start past
them. Queried by QUERY_CONSUMER_OFFSET (RocketMQ's ConsumerManageProcessor) and by the
pop path's init offset with initMode MAX (RocketMQ's PopMessageProcessor.getInitOffset).

"In memory" for this store (docs/protocol.md, QUERY_CONSUMER_OFFSET): the record lies
within `access_message_in_memory_max_ratio` percent of the machine's RAM of the commit log's
end, RocketMQ 4's measure (RocketMQ 5 asks the page cache, which ferrymq does not track)."""

from __future__ import annotations

import os

from ..store import MessageStore


def physical_memory() -> int:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError):
        return 1 << 33


def in_memory_window(ratio_percent: int) -> int:
    """Bytes from the commit log's end within which a record counts as still in memory."""
    return physical_memory() * ratio_percent // 100


def young_queue_start(store: MessageStore, topic: str, queue_id: int, ratio_percent: int) -> int | None:
    """0 when the queue never lost a message (min offset 0) and the record at offset 0 lies
    within in_memory_window(ratio_percent) of the log's end; None when the group's own rule
    (consume-from-where) decides. An empty queue is not young: it has no record yet."""
    if store.reads.get_min_offset(topic, queue_id) > 0:
        return None
    entries = store.reads.read_queue_entries(topic, queue_id, 0, 1)
    if not entries or entries[0].queue_offset != 0:
        return None
    behind = store.max_phy_offset - entries[0].phys_offset
    return 0 if behind <= in_memory_window(ratio_percent) else None
