"""What the parts of a consumer need from the consumer that hosts them, as narrow protocols:
the pull loops and the rebalancer see a `QueueHost`, the consume services a `ConsumeHost`.
They import this module, never the consumer classes, so base, push, pull, rebalance and the
consume services form no import circle."""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from ...common.message import MessageExt, MessageQueue

if TYPE_CHECKING:
    from ..errors import BrokerError
    from ..instance import ClientInstance
    from ..lifecycle import State
    from .consume_stats import ConsumeStats
    from .offset_store import OffsetStore
    from .options import ConsumerOptions
    from .process_queue import ProcessQueue
    from .subscription import Subscription


class ConsumeHost(Protocol):
    """For the concurrent and orderly consume services."""

    group: str
    options: ConsumerOptions
    consume_stats: ConsumeStats

    @property
    def clustering(self) -> bool: ...

    def is_retry(self, mq: MessageQueue) -> bool: ...

    def reset_retry_topic(self, msgs: list[MessageExt]) -> None: ...

    def settle(self, pq: ProcessQueue, consumed: list[MessageExt], *, closing: bool = False) -> None:
        ...

    def settle_orderly(self, pq: ProcessQueue, *, closing: bool = False) -> None: ...

    async def send_back(self, msg: MessageExt, delay_level: int) -> bool: ...

    async def dead_letter(self, msg: MessageExt) -> bool: ...

    def lock_expired(self, pq: ProcessQueue) -> bool: ...

    def lock_later(self, pq: ProcessQueue) -> None: ...


class QueueHost(Protocol):
    """For the pull loop of each queue and the rebalancer that starts and stops them."""

    group: str
    options: ConsumerOptions
    state: State
    table: dict[MessageQueue, ProcessQueue]
    # The broker id each queue's last pull answer suggested reading from next.
    read_from: dict[MessageQueue, int]
    consume_stats: ConsumeStats
    # The broker's last refusal of a pull (group disabled or unknown, topic not readable,
    # subscription refused); None once a pull is answered.
    pull_refusal: BrokerError | None

    @property
    def inst(self) -> ClientInstance: ...

    @property
    def client_id(self) -> str: ...

    @property
    def clustering(self) -> bool: ...

    @property
    def orderly(self) -> bool: ...

    @property
    def offset_store(self) -> OffsetStore: ...

    @property
    def start_timestamp_ms(self) -> int: ...

    def effective_subscriptions(self) -> dict[str, Subscription]: ...

    def may_pull(self, pq: ProcessQueue) -> bool: ...

    def not_ready_delay(self) -> float: ...

    def dispatch(self, pq: ProcessQueue, msgs: list[MessageExt]) -> None: ...

    def trigger_rebalance(self) -> None: ...

    def new_process_queue(
        self, mq: MessageQueue, acked_above: list[tuple[int, int]] | None = None
    ) -> ProcessQueue: ...

    def start_queue(self, mq: MessageQueue, pq: ProcessQueue, offset: int) -> None: ...

    def drop_queue(self, mq: MessageQueue) -> ProcessQueue | None: ...

    async def lock_queue(self, mq: MessageQueue) -> bool: ...

    async def release_queue(self, mq: MessageQueue, pq: ProcessQueue) -> None: ...
