"""ferrymq's clients for asyncio programs: the same names as the blocking API, with async
methods (`await producer.send(msg)`, `async with PushConsumer(...)`), running on the
caller's event loop. Push consumer listeners may be coroutine functions."""

from __future__ import annotations

from .client.admin_async import AsyncAdminClient as AdminClient
from .client.consumer.lite import AsyncLitePullConsumer as LitePullConsumer
from .client.consumer.push import AsyncPushConsumer as PushConsumer
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
from .common.message import Message, MessageExt, MessageQueue

__all__ = [
    "AdminClient",
    "ConsumeConcurrentlyContext",
    "ConsumeFromWhere",
    "ConsumeOrderlyContext",
    "ConsumeOrderlyStatus",
    "ConsumeStatus",
    "LitePullConsumer",
    "Message",
    "MessageExt",
    "MessageModel",
    "MessageQueue",
    "Producer",
    "PullResult",
    "PullStatus",
    "PushConsumer",
    "SendResult",
    "SendStatus",
]
