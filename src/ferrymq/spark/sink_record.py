"""What the exactly-once sink keeps on the broker: one record per committed micro-batch, and the
answer to the broker's check of a half message that comes from it.

A record is a message in the topic FERRYMQ_SPARK_SINK_COMMITS (one queue per broker), keyed
`<queryId>:<batchId>` and found again through the broker's key index (QUERY_MESSAGE, every
broker of the topic asked). Its body lists the task tokens whose half messages make up the
batch and the halves themselves, so a driver that replays the batch after a crash can finish
ending them. A record is written once and never changed: a micro-batch is committed once.

Why a message and not a consumer offset: an offset holds one number, and a batch's decision
needs the set of task attempts it took (a failed task attempt's halves carry the same batch id
and must be rolled back, not committed). Records live as long as the commit log keeps them
(`fileReservedTime`); so do the half messages they decide (the check discards older ones)."""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from ..client.admin import AdminClient
from ..client.errors import NoRouteError
from ..client.transaction import LocalTransactionState
from ..common.errors import FerryMQError
from ..common.message import Message, MessageExt

log = logging.getLogger("ferrymq.spark")

RECORD_TOPIC = "FERRYMQ_SPARK_SINK_COMMITS"
# Properties of every half message of the sink: what the check needs to find its record.
PROPERTY_QUERY = "SPARK_SINK_QUERY"
PROPERTY_BATCH = "SPARK_SINK_BATCH"
PROPERTY_TASK = "SPARK_SINK_TASK"


class SinkRecordError(FerryMQError, ValueError):
    """A record of the sink's commit topic that cannot be read."""

    def __init__(self, key: str, reason: str) -> None:
        super().__init__(f"sink commit record {key}: {reason}")
        self.key = key
        self.reason = reason


@dataclass(frozen=True)
class Half:
    """What END_TRANSACTION needs of one half message."""

    broker: str
    topic: str
    transaction_id: str
    tran_state_table_offset: int
    commit_log_offset: int
    first_key: str  # the UNIQ_KEY of its first member: finds it once committed

    def to_json(self) -> list[object]:
        return [self.broker, self.topic, self.transaction_id, self.tran_state_table_offset,
                self.commit_log_offset, self.first_key]

    @classmethod
    def from_json(cls, item: list[object]) -> Half:
        broker, topic, txid, table_offset, log_offset, first = item
        return cls(str(broker), str(topic), str(txid), int(str(table_offset)), int(str(log_offset)),
                   str(first))


@dataclass(frozen=True)
class BatchRecord:
    query_id: str
    batch_id: int
    tokens: frozenset[str]
    halves: tuple[Half, ...]

    @property
    def key(self) -> str:
        return record_key(self.query_id, self.batch_id)

    def encode(self) -> bytes:
        return json.dumps({
            "query": self.query_id, "batch": self.batch_id, "tokens": sorted(self.tokens),
            "halves": [h.to_json() for h in self.halves],
        }, separators=(",", ":")).encode()

    @classmethod
    def decode(cls, key: str, body: bytes) -> BatchRecord:
        try:
            doc = json.loads(body)
            return cls(str(doc["query"]), int(doc["batch"]), frozenset(map(str, doc["tokens"])),
                       tuple(Half.from_json(h) for h in doc["halves"]))
        except (ValueError, KeyError, TypeError) as exc:
            raise SinkRecordError(key, f"unreadable body: {exc}") from exc


def record_key(query_id: str, batch_id: int) -> str:
    return f"{query_id}:{batch_id}"


def find_record(admin: AdminClient, query_id: str, batch_id: int) -> BatchRecord | None:
    """The record of (query, batch), None when the batch was never committed."""
    key = record_key(query_id, batch_id)
    try:
        found = admin.query_message(RECORD_TOPIC, key, max_num=32)
    except NoRouteError:
        return None  # no sink has committed anything on this cluster yet
    for msg in found:
        if key in (msg.keys or "").split(" "):
            return BatchRecord.decode(key, msg.body)
    return None


def ensure_record_topic(admin: AdminClient) -> None:
    try:
        admin.topic_route(RECORD_TOPIC)
    except NoRouteError:
        admin.create_topic(RECORD_TOPIC, 1)


def record_message(record: BatchRecord) -> Message:
    return Message(RECORD_TOPIC, record.encode(), keys=record.key)


_admins: dict[str, AdminClient] = {}
_admins_lock = threading.Lock()


def admin_for(namesrv: str) -> AdminClient:
    """One admin client per name server per Python process (it is thread-safe)."""
    with _admins_lock:
        admin = _admins.get(namesrv)
        if admin is None:
            admin = _admins[namesrv] = AdminClient(namesrv)
        return admin


Lookup = Callable[[str, int], "BatchRecord | None"]


def decide(props: Mapping[str, str], lookup: Lookup) -> LocalTransactionState:
    """The answer to a check of a sink half message: COMMIT when its batch was recorded with
    its task among the batch's, ROLLBACK when the batch was recorded without it (a failed or
    killed attempt, or a replay of a committed batch), UNKNOW while the batch is undecided."""
    query, batch, token = props.get(PROPERTY_QUERY), props.get(PROPERTY_BATCH), props.get(PROPERTY_TASK)
    if not query or not token or batch is None or not batch.lstrip("-").isdigit():
        return LocalTransactionState.UNKNOW  # not the sink's: left to the check limits
    record = lookup(query, int(batch))
    if record is None:
        return LocalTransactionState.UNKNOW
    return (LocalTransactionState.COMMIT_MESSAGE if token in record.tokens
            else LocalTransactionState.ROLLBACK_MESSAGE)


class SinkChecker:
    """The transaction listener of the sink's producers: every producer of the group answers
    from the records, so whichever one the broker asks gives the same answer."""

    def __init__(self, namesrv: str) -> None:
        self.namesrv = namesrv
        self._known: dict[tuple[str, int], BatchRecord] = {}  # records never change

    def execute_local_transaction(self, msg: Message, arg: object) -> LocalTransactionState:
        return LocalTransactionState.UNKNOW  # the sink sends halves only (send_half)

    def check_local_transaction(self, msg: MessageExt) -> LocalTransactionState:
        return decide(msg.properties, self._lookup)

    def _lookup(self, query_id: str, batch_id: int) -> BatchRecord | None:
        record = self._known.get((query_id, batch_id))
        if record is None:
            record = find_record(admin_for(self.namesrv), query_id, batch_id)
            if record is not None:
                if len(self._known) > 1024:
                    self._known.clear()
                self._known[(query_id, batch_id)] = record
        return record
