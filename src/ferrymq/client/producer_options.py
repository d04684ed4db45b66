"""Producer settings: the keyword arguments of every producer constructor (blocking and async,
plain and transactional), which build this and take their defaults from PRODUCER_DEFAULTS."""

from __future__ import annotations

from dataclasses import dataclass, field

from ..common.names import AUTO_CREATE_TOPIC_KEY_TOPIC
from ..remoting.tls import TlsClientSettings
from .outgoing import DEFAULT_DELAY_LEVEL_COUNT, MAX_MESSAGE_SIZE


@dataclass(frozen=True, slots=True)
class ProducerOptions:
    send_timeout: float = 3.0  # seconds a send may take, retries included
    retry_times_when_send_failed: int = 2  # sync sends: attempts after the first
    retry_times_when_send_async_failed: int = 2  # send_async: attempts after the first, same broker
    compress_over: int = 4096  # bodies larger than this are sent compressed; 0: never
    max_message_size: int = MAX_MESSAGE_SIZE
    default_topic_queue_nums: int = 8  # queues of a topic created through create_topic_key
    create_topic_key: str = AUTO_CREATE_TOPIC_KEY_TOPIC
    latency_fault_enabled: bool = True  # avoid a broker that answered slowly or failed
    fault_isolation: float | None = 30.0  # seconds a failed broker is avoided; None: RocketMQ's 600
    route_refresh_interval: float = 30.0
    heartbeat_interval: float = 30.0
    delay_levels: int = DEFAULT_DELAY_LEVEL_COUNT  # the brokers' messageDelayLevel count
    # RocketMQ 5's autoBatch: concurrent sends to a topic leave as one batch (accumulator.py).
    auto_batch: bool = True
    batch_max_delay_ms: float = 0.0
    batch_max_bytes: int = 32 * 1024
    total_batch_max_bytes: int = 32 * 1024 * 1024
    # ACL: sign every request with this account of the broker's plain_acl.yml.
    access_key: str | None = None
    secret_key: str | None = field(default=None, repr=False)
    # TLS to name servers and brokers: settings, True/False, or None for $FERRYMQ_TLS.
    tls: TlsClientSettings | bool | None = None


PRODUCER_DEFAULTS = ProducerOptions()
