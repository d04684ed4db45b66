"""The seam between the apache.rocketmq.v2 service and the brokers it fronts (RocketMQ 5's
MessagingProcessor): the service checks requests, converts messages and shapes the responses;
a Backend resolves topics, stores sends, pops, acknowledges and ends transactions.

Two implement it: `ferrymq/grpc/local.py:LocalBackend`, the broker in the same process (the
broker's own --grpc-port, RocketMQ's local mode), and `ferrymq/proxy/backend.py:ClusterBackend`,
every broker group registered with a name server, over remoting (`ferrymq proxy`, RocketMQ's
cluster mode). Receipt handles and transaction ids are each backend's own strings: the service
hands them out and back without reading them."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from ..broker.clients import ClientRegistry, Subscription
from ..common.message import MessageExt
from ..store import StoreMessage
from .pb import definition_pb2 as pb
from .pb import service_pb2 as spb


@dataclass(frozen=True, slots=True)
class TopicGroup:
    """One broker group's share of a topic, as its route lists it."""

    topic: str
    broker_name: str
    perm: int
    read_queue_nums: int
    write_queue_nums: int
    order: bool
    # RocketMQ 5's topic message type (common/topic_types.py); None: the backend cannot tell,
    # and the broker behind it checks what it can (docs/protocol.md, "Topic message types").
    message_type: str | None = None


@dataclass(frozen=True, slots=True)
class Limits:
    """The broker settings the service checks requests against before the backend sees them."""

    max_message_size: int
    timer_max_delay_sec: int
    reject_transaction_message: bool
    enable_property_filter: bool
    long_polling_enable: bool
    cluster_name: str
    # RocketMQ's enableTopicMessageTypeCheck: a send is checked against its topic's type.
    check_message_type: bool = True


@dataclass(frozen=True, slots=True)
class PutAnswer:
    """A send's outcome: OK with one (queue offset, transaction id) per message, or the code
    and reason the broker refused it with."""

    code: pb.Code
    reason: str = ""
    offsets: tuple[int, ...] = ()
    transaction_ids: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Delivery:
    """A popped message and the receipt handle that acknowledges or changes this delivery."""

    message: MessageExt
    handle: str


class Backend(Protocol):
    @property
    def limits(self) -> Limits: ...

    @property
    def registry(self) -> ClientRegistry:
        """Where gRPC clients join their producer and consumer groups."""
        ...

    @property
    def translate(self) -> Callable[[Any], spb.TelemetryCommand | None]:
        """A server notice for a client (a transaction check) as its telemetry command."""
        ...

    def now_ms(self) -> int: ...

    async def topic(self, name: str, *, timeout_s: float | None = None) -> list[TopicGroup]:
        """The topic's broker groups, by broker name; empty when no broker has it. timeout_s:
        what is left of the client's deadline (None: none); a backend that must ask another
        process answers PROXY_TIMEOUT once that has passed."""
        ...

    def send_isolated(self, broker_name: str) -> bool:
        """Whether sends should avoid this broker group for now (a recent send to it failed or
        timed out), while another group has a writable queue."""
        ...

    async def put(self, topic: TopicGroup, queue_id: int, msgs: list[StoreMessage], *, half: bool,
                  timeout_s: float | None = None) -> PutAnswer:
        """timeout_s: what is left of the client's deadline for this put (None: no deadline);
        a backend that waits on another process answers PROXY_TIMEOUT within it."""
        ...

    async def pop(self, group: str, topic: TopicGroup, queue_id: int, *, max_nums: int, invisible_ms: int,
                  sub: Subscription, order: bool, poll_ms: int) -> list[Delivery]:
        """Up to max_nums messages of the group's topic on one broker group (queue_id < 0: any
        of its queues), waiting up to poll_ms for one."""
        ...

    async def ack(self, group: str, topic: str, handle: str, *, timeout_s: float | None = None) -> None:
        """Raises GrpcStatusError (INVALID_RECEIPT_HANDLE) for a handle it cannot use.
        timeout_s, here and below: what is left of the client's deadline for the call (None: no
        deadline); a backend that forwards it answers PROXY_TIMEOUT once that has passed."""
        ...

    async def change_invisible(self, group: str, topic: str, handle: str, invisible_ms: int, *,
                               timeout_s: float | None = None) -> str:
        """The delivery's new receipt handle."""
        ...

    async def forward_to_dlq(self, group: str, topic: str, handle: str, delivery_attempt: int,
                             message_id: str, *, timeout_s: float | None = None) -> None:
        """A copy into %DLQ%<group>, and the delivery acknowledged."""
        ...

    async def end_transaction(self, topic: str, transaction_id: str, commit: bool) -> tuple[pb.Code, str]:
        ...

    async def retry_max_times(self, group: str) -> int | None:
        """The subscription group's retry count (RocketMQ's SubscriptionGroupConfig
        retryMaxTimes, which the proxy gives consumers as their max attempts less one); None
        when the backend cannot tell, and the server's default applies."""
        ...
