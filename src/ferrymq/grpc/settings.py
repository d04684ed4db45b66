"""The settings a client gets back on its telemetry stream: what it reported, completed with
the server's side (RocketMQ's GrpcClientSettingsManager): producers get the broker's maximum
body size and their send retry policy; consumers the receive batch size, the long-polling
timeout, FIFO, and the redelivery backoff (ferrymq's delay levels, as its 4.x retries use)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from .convert import duration
from .pb import definition_pb2 as pb


@dataclass(frozen=True, slots=True)
class ServerSettings:
    max_body_size: int
    long_polling_timeout_ms: int = 20_000
    receive_batch_size: int = 32
    # Send retries: RocketMQ's proxy defaults (3 attempts, 10 ms doubling up to 1 s).
    producer_max_attempts: int = 3
    producer_backoff_initial_ms: int = 10
    producer_backoff_max_ms: int = 1_000
    producer_backoff_multiplier: float = 2.0
    # A consumer's message is delivered at most max_reconsume_times + 1 times.
    max_reconsume_times: int = 16
    # Redelivery delays, one per attempt (the broker's delay levels from level 3 on, as a
    # 4.x consumer's retries start there).
    retry_delays_ms: Sequence[int] = ()
    validate_message_type: bool = True


def answer(client: pb.Settings, server: ServerSettings, *, fifo: bool = False,
           retry_max_times: int | None = None) -> pb.Settings:
    """The settings to send back for what `client` reported; a consumer's group's own
    `retry_max_times`, when given, sets its max attempts instead of the server's default."""
    out = pb.Settings()
    out.CopyFrom(client)
    if client.HasField("publishing"):
        policy = out.backoff_policy
        policy.Clear()
        policy.max_attempts = server.producer_max_attempts
        policy.exponential_backoff.initial.CopyFrom(duration(server.producer_backoff_initial_ms))
        policy.exponential_backoff.max.CopyFrom(duration(server.producer_backoff_max_ms))
        policy.exponential_backoff.multiplier = server.producer_backoff_multiplier
        out.publishing.max_body_size = server.max_body_size
        out.publishing.validate_message_type = server.validate_message_type
    elif client.HasField("subscription"):
        sub = out.subscription
        sub.receive_batch_size = server.receive_batch_size
        sub.long_polling_timeout.CopyFrom(duration(server.long_polling_timeout_ms))
        sub.fifo = fifo
        policy = out.backoff_policy
        policy.Clear()
        retries = server.max_reconsume_times if retry_max_times is None else retry_max_times
        policy.max_attempts = retries + 1
        if server.retry_delays_ms:
            policy.customized_backoff.next.extend(duration(ms) for ms in server.retry_delays_ms)
        else:
            policy.exponential_backoff.initial.CopyFrom(duration(1_000))
            policy.exponential_backoff.max.CopyFrom(duration(60_000))
            policy.exponential_backoff.multiplier = 2.0
    out.metric.Clear()
    out.metric.on = False
    return out
