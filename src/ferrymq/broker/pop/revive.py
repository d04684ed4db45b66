"""Checkpoints of pop leases in the revive log, so invisibility survives a restart, a SIGKILL
included (RocketMQ's PopCheckPoint records in rmq_sys_REVIVE_LOG_<cluster>).

Every lease handed out or given a new deadline (a pop, a change of invisible time) is
appended to the revive topic before the request is answered: a message naming the group,
topic and queue, the offsets with their delivery counts, the pop time (the receipt handle's)
and the deadline. Acknowledgements are not written here: the offset manager already keeps
them (the committed offset and the acknowledged ranges), durable before an ack is answered,
so the log holds only what cannot be recomputed. At start the log is read from the revive
group's committed offset on; an offset's last checkpoint wins, and one acknowledged since is
dropped (QueuePop.restore).

The revive offset committed is the lowest log offset a live lease (deadline not passed yet)
was checkpointed at: the records below it describe only leases acknowledged, checkpointed
again later, or expired. An expired lease that is not replayed is handed out at once, as it
would be anyway; only its delivery count starts again from the record's."""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass

from ...common import jsonx
from ...common.errors import FerryMQError
from ...common.names import REVIVE_LOG_TOPIC_PREFIX
from ...common.record import MessageDecodeError, decode_record
from ...store import MessageStore, StoreMessage
from ..core import BrokerCore
from .state import Lease

log = logging.getLogger("ferrymq.broker.pop")

REVIVE_GROUP = "CID_RMQ_SYS_REVIVE_GROUP"
REVIVE_QUEUE = 0  # one revive queue: the reviveQid a pop's answer names
_READ_BATCH = 256

Key = tuple[str, str, int]  # (group, topic, queue id)


def revive_topic(cluster: str) -> str:
    return REVIVE_LOG_TOPIC_PREFIX + cluster


class CheckpointDecodeError(FerryMQError, ValueError):
    """A revive-log record that is not a checkpoint this broker wrote."""

    def __init__(self, log_offset: int, reason: str) -> None:
        super().__init__(f"revive log offset {log_offset}: {reason}")
        self.log_offset = log_offset
        self.reason = reason


@dataclass(frozen=True, slots=True)
class Checkpoint:
    group: str
    topic: str
    queue_id: int
    pop_time: int
    deadline: int
    offsets: tuple[tuple[int, int], ...]  # (queue offset, deliveries so far)


def encode_checkpoint(ck: Checkpoint) -> bytes:
    """One per pop round: the C encoder, whose output for these plain values is jsonx's
    (jsonx's took half the cost of a checkpoint)."""
    return json.dumps({"g": ck.group, "t": ck.topic, "q": ck.queue_id, "p": ck.pop_time,
                       "d": ck.deadline, "o": [[o, a] for o, a in ck.offsets]},
                      separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def decode_checkpoint(body: bytes, log_offset: int) -> Checkpoint:
    try:
        raw = jsonx.loads(body)
        return Checkpoint(str(raw["g"]), str(raw["t"]), int(raw["q"]), int(raw["p"]),
                          int(raw["d"]), tuple((int(o), int(a)) for o, a in raw["o"]))
    except (ValueError, TypeError, KeyError) as exc:
        raise CheckpointDecodeError(log_offset, str(exc)) from exc


def checkpoint_message(cluster: str, ck: Checkpoint, now: int) -> StoreMessage:
    return StoreMessage(topic=revive_topic(cluster), queue_id=REVIVE_QUEUE,
                        body=encode_checkpoint(ck), born_timestamp=now)


async def write_checkpoints(broker: BrokerCore, items: list[tuple[Checkpoint, list[Lease]]]) -> bool:
    """Append the checkpoints (one put) and note on each lease where its checkpoint is. False
    when the store refused them: those leases then last only until a restart."""
    if not items:
        return True
    now = broker.now_ms()
    cluster = broker.config.broker_cluster_name
    result = await broker.put([checkpoint_message(cluster, ck, now) for ck, _ in items],
                              allow_delay=False)
    if not result.status.stored:
        log.warning("pop checkpoints not written (%s): those messages are visible again at "
                    "once after a restart", result.status.name)
        return False
    for (_, leases), appended in zip(items, result.messages, strict=False):
        for lease in leases:
            lease.ck = appended.queue_offset
    return True


def replay(store: MessageStore, cluster: str, start: int) -> dict[Key, dict[int, Lease]]:
    """The last checkpoint of every offset in the revive log from `start` on."""
    topic = revive_topic(cluster)
    reads = store.reads
    out: dict[Key, dict[int, Lease]] = {}
    offset = max(start, reads.get_min_offset(topic, REVIVE_QUEUE))
    end = reads.get_max_offset(topic, REVIVE_QUEUE)
    while offset < end:
        entries = reads.read_queue_entries(topic, REVIVE_QUEUE, offset, _READ_BATCH)
        if not entries:
            break
        for entry in entries:
            offset = entry.queue_offset + 1
            raw = reads.read_queue_record(topic, REVIVE_QUEUE, entry)
            if raw is None:
                log.warning("revive log offset %d unreadable: its leases are visible at once",
                            entry.queue_offset)
                continue
            try:
                ck = decode_checkpoint(decode_record(raw, decompress=False).body,
                                       entry.queue_offset)
            except (MessageDecodeError, CheckpointDecodeError) as exc:
                log.warning("revive log: %s; skipped", exc)
                continue
            per = out.setdefault((ck.group, ck.topic, ck.queue_id), {})
            for o, attempts in ck.offsets:
                per[o] = Lease(o, ck.pop_time, ck.deadline, attempts, entry.queue_offset)
    return out
