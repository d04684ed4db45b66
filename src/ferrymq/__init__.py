"""ferrymq: Apache RocketMQ's messaging model in Python.

The client API is imported lazily, so `import ferrymq` stays cheap for the servers and the
command line."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

_EXPORTS = {
    "Producer": "ferrymq.client.producer",
    "TransactionProducer": "ferrymq.client.transaction",
    "TransactionListener": "ferrymq.client.transaction_async",
    "TransactionSendResult": "ferrymq.client.transaction_async",
    "LocalTransactionState": "ferrymq.client.transaction_async",
    "PushConsumer": "ferrymq.client.consumers",
    "LitePullConsumer": "ferrymq.client.consumers",
    "SimpleConsumer": "ferrymq.client.consumers",
    "MessageView": "ferrymq.client.consumer.simple",
    "ReceiptHandleError": "ferrymq.client.consumer.simple",
    "AdminClient": "ferrymq.client.admin",
    "Message": "ferrymq.common.message",
    "MessageExt": "ferrymq.common.message",
    "MessageQueue": "ferrymq.common.message",
    "MessageSelector": "ferrymq.client.consumer.subscription",
    "SelectorError": "ferrymq.common.sql92",
    "SendResult": "ferrymq.client.results",
    "SendStatus": "ferrymq.client.results",
    "PullResult": "ferrymq.client.results",
    "PullStatus": "ferrymq.client.results",
    "ConsumeStatus": "ferrymq.client.consumer.types",
    "ConsumeOrderlyStatus": "ferrymq.client.consumer.types",
    "ConsumeConcurrentlyContext": "ferrymq.client.consumer.types",
    "ConsumeOrderlyContext": "ferrymq.client.consumer.types",
    "MessageModel": "ferrymq.client.consumer.types",
    "ConsumeFromWhere": "ferrymq.client.consumer.types",
    "FerryMQError": "ferrymq.common.errors",
    "RemotingError": "ferrymq.remoting.errors",
    "ClientError": "ferrymq.client.errors",
    "ClientStateError": "ferrymq.client.errors",
    "ClientClosedError": "ferrymq.client.errors",
    "MessageNotFoundError": "ferrymq.client.errors",
    "BrokerSystemError": "ferrymq.client.errors",
    "BrokerBusyError": "ferrymq.client.errors",
    "ServiceNotAvailableError": "ferrymq.client.errors",
    "TopicNotExistError": "ferrymq.client.errors",
    "NoPermissionError": "ferrymq.client.errors",
    "MessageIllegalError": "ferrymq.client.errors",
    "RequestNotSupportedError": "ferrymq.client.errors",
    "SubscriptionError": "ferrymq.client.errors",
    "GroupNotExistError": "ferrymq.client.errors",
    "ConsumerNotOnlineError": "ferrymq.client.errors",
    "SendError": "ferrymq.client.errors",
    "BrokerError": "ferrymq.client.errors",
    "NoRouteError": "ferrymq.client.errors",
    "NameServerUnreachableError": "ferrymq.client.errors",
    "NoWritableMasterError": "ferrymq.client.errors",
    "TlsRequiredError": "ferrymq.client.errors",
    "UnknownBrokerError": "ferrymq.client.errors",
    "UnknownClusterError": "ferrymq.client.errors",
    "MessageValidationError": "ferrymq.client.errors",
    "TlsClientSettings": "ferrymq.remoting.tls",
    "freeze_startup_heap": "ferrymq.common.heap",
}

__all__ = ["__version__", *sorted(_EXPORTS)]

if TYPE_CHECKING:
    from .client.admin import AdminClient as AdminClient
    from .client.consumer.simple import MessageView as MessageView
    from .client.consumer.simple import ReceiptHandleError as ReceiptHandleError
    from .client.consumer.subscription import MessageSelector as MessageSelector
    from .client.consumer.types import ConsumeConcurrentlyContext as ConsumeConcurrentlyContext
    from .client.consumer.types import ConsumeFromWhere as ConsumeFromWhere
    from .client.consumer.types import ConsumeOrderlyContext as ConsumeOrderlyContext
    from .client.consumer.types import ConsumeOrderlyStatus as ConsumeOrderlyStatus
    from .client.consumer.types import ConsumeStatus as ConsumeStatus
    from .client.consumer.types import MessageModel as MessageModel
    from .client.consumers import LitePullConsumer as LitePullConsumer
    from .client.consumers import PushConsumer as PushConsumer
    from .client.consumers import SimpleConsumer as SimpleConsumer
    from .client.errors import BrokerBusyError as BrokerBusyError
    from .client.errors import BrokerError as BrokerError
    from .client.errors import BrokerSystemError as BrokerSystemError
    from .client.errors import ClientClosedError as ClientClosedError
    from .client.errors import ClientError as ClientError
    from .client.errors import ClientStateError as ClientStateError
    from .client.errors import ConsumerNotOnlineError as ConsumerNotOnlineError
    from .client.errors import GroupNotExistError as GroupNotExistError
    from .client.errors import MessageIllegalError as MessageIllegalError
    from .client.errors import MessageNotFoundError as MessageNotFoundError
    from .client.errors import MessageValidationError as MessageValidationError
    from .client.errors import NameServerUnreachableError as NameServerUnreachableError
    from .client.errors import NoPermissionError as NoPermissionError
    from .client.errors import NoRouteError as NoRouteError
    from .client.errors import NoWritableMasterError as NoWritableMasterError
    from .client.errors import RequestNotSupportedError as RequestNotSupportedError
    from .client.errors import SendError as SendError
    from .client.errors import ServiceNotAvailableError as ServiceNotAvailableError
    from .client.errors import SubscriptionError as SubscriptionError
    from .client.errors import TlsRequiredError as TlsRequiredError
    from .client.errors import TopicNotExistError as TopicNotExistError
    from .client.errors import UnknownBrokerError as UnknownBrokerError
    from .client.errors import UnknownClusterError as UnknownClusterError
    from .client.producer import Producer as Producer
    from .client.results import PullResult as PullResult
    from .client.results import PullStatus as PullStatus
    from .client.results import SendResult as SendResult
    from .client.results import SendStatus as SendStatus
    from .client.transaction import TransactionProducer as TransactionProducer
    from .client.transaction_async import LocalTransactionState as LocalTransactionState
    from .client.transaction_async import TransactionListener as TransactionListener
    from .client.transaction_async import TransactionSendResult as TransactionSendResult
    from .common.errors import FerryMQError as FerryMQError
    from .common.heap import freeze_startup_heap as freeze_startup_heap
    from .common.message import Message as Message
    from .common.message import MessageExt as MessageExt
    from .common.message import MessageQueue as MessageQueue
    from .common.sql92 import SelectorError as SelectorError
    from .remoting.errors import RemotingError as RemotingError
    from .remoting.tls import TlsClientSettings as TlsClientSettings


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'ferrymq' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
