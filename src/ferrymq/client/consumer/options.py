"""Consumer settings. Every interval RocketMQ hard-codes is a setting here, so tests can run
rebalance, persistence and retries in milliseconds instead of tens of seconds."""

from __future__ import annotations

import dataclasses
import datetime as dt
import time
from dataclasses import dataclass, field
from pathlib import Path

from ...common.paths import OptionalPathField
from ...remoting.tls import TlsClientSettings
from .allocate import AllocateStrategy
from .types import ConsumeFromWhere, MessageModel

HALF_HOUR_MS = 30 * 60 * 1000


# What an orderly consumer without max_reconsume_times gives up after (RocketMQ's Java client
# retries an orderly queue forever then; ferrymq keeps the concurrent default).
ORDERLY_MAX_RECONSUME_TIMES = 16


@dataclass(frozen=True)  # no slots: offset_store_dir is a PathField
class ConsumerOptions:
    message_model: MessageModel = MessageModel.CLUSTERING
    consume_from_where: ConsumeFromWhere = ConsumeFromWhere.LAST_OFFSET
    # ms since the epoch (or a datetime) for TIMESTAMP; None: 30 minutes before start().
    consume_timestamp: int | dt.datetime | None = None
    consume_threads: int = 20
    consume_message_batch_max_size: int = 1
    pull_batch_size: int = 32  # messages a pull asks for; PushConsumer: 128 (push.py)
    # Sends back before a message goes to %DLQ%<group>. None: the group's retryMaxTimes on the
    # broker decides (`ferrymq group update G --retry-max-times N`; 16 for a group the broker
    # creates with its defaults); an orderly consumer, which counts its attempts itself, gives
    # up after 16. A number is sent with every send-back and overrides the group's, as
    # RocketMQ's clients since 3.4.9 do.
    max_reconsume_times: int | None = None
    # Flow control per queue: stop pulling at this many held messages or MiB of bodies.
    pull_threshold_for_queue: int = 1000
    pull_threshold_size_for_queue: int = 100
    pull_suspend_timeout: float = 15.0  # long-poll hold on the broker
    pull_interval: float = 0.0  # pause between pulls of a queue that found messages
    pull_delay_on_error: float = 3.0
    rebalance_interval: float = 20.0
    persist_interval: float = 5.0
    # A consumed batch's offset (and acknowledged ranges) goes to the broker this long after
    # it completes, in a oneway round coalesced with whatever completes meanwhile: a kill -9
    # consumes again what was inside the listener and what finished within about this long.
    # persist_interval is the awaited fallback that also covers idle queues.
    commit_delay: float = 0.001
    local_retry_delay: float = 5.0  # send-back failed: consume again locally after this
    consume_timeout: float = 15 * 60.0  # a message held longer is sent back
    suspend_current_queue_time: float = 1.0  # orderly: pause of a failed queue
    lock_interval: float = 20.0  # orderly: renew broker locks this often
    lock_max_live: float = 30.0  # orderly: stop consuming a queue whose lock is this old
    lock_retry_delay: float = 3.0  # orderly: try a queue's lock again after this
    shutdown_timeout: float = 30.0  # wait this long for batches in flight at shutdown
    # A queue given up to another member is released once the listener calls running on it
    # finished, waiting at most this long (the new owner waits for the release up to 2 s): a
    # call running longer is delivered again by the new owner.
    release_wait: float = 1.0
    allocate_strategy: str | AllocateStrategy = "averagely"
    offset_store_dir: OptionalPathField = OptionalPathField()  # broadcasting; default ~/.ferrymq/offsets
    precise_ack: bool = True  # also report consumed ranges above the offset (ferrymq brokers)
    route_refresh_interval: float = 30.0
    heartbeat_interval: float = 30.0
    request_timeout: float = 3.0
    # ACL: sign every request with this account of the broker's plain_acl.yml.
    access_key: str | None = None
    secret_key: str | None = field(default=None, repr=False)
    # TLS to name servers and brokers: settings, True/False, or None for $FERRYMQ_TLS.
    tls: TlsClientSettings | bool | None = None

    @property
    def orderly_max_reconsume_times(self) -> int:
        """An orderly consumer's limit: it retries locally and must know when to give up."""
        return ORDERLY_MAX_RECONSUME_TIMES if self.max_reconsume_times is None else self.max_reconsume_times

    def validate(self) -> ConsumerOptions:
        if self.consume_threads < 1:
            raise ValueError("consume_threads must be >= 1")
        if not 1 <= self.consume_message_batch_max_size <= 1024:
            raise ValueError("consume_message_batch_max_size must be within 1..1024")
        if not 1 <= self.pull_batch_size <= 1024:
            raise ValueError("pull_batch_size must be within 1..1024")
        if self.max_reconsume_times is not None and self.max_reconsume_times < 0:
            raise ValueError("max_reconsume_times must be >= 0")
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if isinstance(value, float) and value < 0:
                raise ValueError(f"{f.name} must not be negative")
        return self

    def start_timestamp_ms(self) -> int:
        ts = self.consume_timestamp
        if ts is None:
            return int(time.time() * 1000) - HALF_HOUR_MS
        if isinstance(ts, dt.datetime):
            return int(ts.timestamp() * 1000)
        return int(ts)

    def offsets_dir(self) -> Path:
        return self.offset_store_dir or Path.home() / ".ferrymq" / "offsets"


# The consumer constructors' keyword arguments take their defaults from here.
CONSUMER_DEFAULTS = ConsumerOptions()
