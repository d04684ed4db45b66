"""ferrymq's clients for asyncio programs: the same names as the blocking API, with async
methods (`await producer.send(msg)`, `async with PushConsumer(...)`), running on the
caller's event loop. Push consumer listeners may be coroutine functions;
`SimpleConsumer` receives and acknowledges message by message (pop)."""

from __future__ import annotations

from .client.admin_async import AsyncAdminClient as AdminClient
from .client.consumer.lite import AsyncLitePullConsumer as LitePullConsumer
from .client.consumer.push import AsyncPushConsumer as PushConsumer
from .client.consumer.simple import AsyncSimpleConsumer as SimpleConsumer
from .client.consumer.simple import MessageView, ReceiptHandleError
from .client.consumer.subscription import MessageSelector
from .client.consumer.types import (
    ConsumeConcurrentlyContext,
    ConsumeFromWhere,
    ConsumeOrderlyContext,
    ConsumeOrderlyStatus,
    ConsumeStatus,
    MessageModel,
)
from .client.producer_async import AsyncProducer as Producer
from .client.results import PullResult, PullStatus, SendResult, SendStatus
from .client.transaction_async import AsyncTransactionProducer as TransactionProducer
from .client.transaction_async import LocalTransactionState, TransactionListener, TransactionSendResult
from .common.message import Message, MessageExt, MessageQueue
from .common.sql92 import SelectorError

__all__ = [
    "AdminClient",
    "ConsumeConcurrentlyContext",
    "ConsumeFromWhere",
    "ConsumeOrderlyContext",
    "ConsumeOrderlyStatus",
    "ConsumeStatus",
    "LitePullConsumer",
    "LocalTransactionState",
    "Message",
    "MessageExt",
    "MessageModel",
    "MessageQueue",
    "MessageSelector",
    "MessageView",
    "Producer",
    "PullResult",
    "PullStatus",
    "PushConsumer",
    "ReceiptHandleError",
    "SelectorError",
    "SendResult",
    "SendStatus",
    "SimpleConsumer",
    "TransactionListener",
    "TransactionProducer",
    "TransactionSendResult",
]
