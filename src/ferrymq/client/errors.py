"""Errors the clients raise. Each carries the facts a caller needs to decide what to do
(which broker, which response code, which field, whether trying again may help), not just a
message. A broker's non-success answer becomes the BrokerError subclass of its response code
(`broker_error`), so callers catch a meaning instead of comparing numbers."""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import ClassVar

from ..common.codes import ResponseCode
from ..common.errors import FerryMQError, request_name, response_name
from ..remoting.tls_accept import TLS_REQUIRED_PREFIX


class ClientError(FerryMQError):
    """Base of every ferrymq client error."""


class ClientStateError(ClientError):
    """A client used in the wrong lifecycle state (not started, already shut down, ...)."""

    def __init__(self, client: str, state: str, action: str) -> None:
        super().__init__(f"{client} is {state}; cannot {action}")
        self.client = client
        self.state = state
        self.action = action


class ClientClosedError(ClientStateError):
    """The client was shut down: it cannot be used again (create a new one)."""

    def __init__(self, client: str, action: str) -> None:
        super().__init__(client, "shut down", action)


class MessageValidationError(ClientError, ValueError):
    """A message refused before anything was sent (empty body, too large, bad property)."""

    def __init__(self, field: str, reason: str) -> None:
        super().__init__(f"invalid message {field}: {reason}")
        self.field = field
        self.reason = reason


class NoRouteError(ClientError):
    """The name server knows no route for the topic (and none could be derived from TBW102)."""

    # A route can appear (topic created, broker registered) between two attempts.
    retriable: ClassVar[bool] = True

    def __init__(self, topic: str, namesrv: str, detail: str = "") -> None:
        extra = f" ({detail})" if detail else ""
        super().__init__(f"no route for topic {topic!r} on name server {namesrv}{extra}")
        self.topic = topic
        self.namesrv = namesrv
        self.detail = detail


class NameServerUnreachableError(NoRouteError):
    """No route because no name server answered: the cause is the connection, not the topic.
    A NoRouteError, so code that handles a missing route keeps working."""

    def __init__(self, topic: str, namesrv: str, cause: BaseException) -> None:
        ClientError.__init__(
            self, f"cannot route topic {topic!r}: name server {namesrv} is unreachable: {cause}"
        )
        self.topic = topic
        self.namesrv = namesrv
        self.detail = str(cause)
        self.cause = cause


class UnknownClusterError(NoRouteError):
    """A command named a cluster (`--cluster C`) the name server does not list. Not retriable,
    as UnknownBrokerError; `known` names the clusters there are."""

    retriable: ClassVar[bool] = False

    def __init__(self, cluster: str, namesrv: str, known: tuple[str, ...]) -> None:
        listed = f"clusters: {', '.join(known)}" if known else "no broker is registered"
        ClientError.__init__(
            self, f"no cluster named {cluster!r} is registered with name server {namesrv} ({listed})"
        )
        self.topic = ""
        self.namesrv = namesrv
        self.detail = listed
        self.cluster = cluster
        self.known = known


class UnknownBrokerError(NoRouteError):
    """A command named a broker (by name, or HOST:PORT) the name server does not list. Not
    retriable: a mistyped name does not come to be registered; `known` says what is."""

    retriable: ClassVar[bool] = False

    def __init__(self, broker: str, namesrv: str, known: tuple[str, ...]) -> None:
        listed = f"registered: {', '.join(known)}" if known else "none is registered"
        ClientError.__init__(
            self, f"no broker named {broker!r} is registered with name server {namesrv} ({listed})"
        )
        self.topic = ""
        self.namesrv = namesrv
        self.detail = listed
        self.broker = broker
        self.known = known


class NoWritableMasterError(NoRouteError):
    """The topic has a route, but none of its broker groups has a master to write to (a
    master crashed, a controller is electing). Retriable: the producer keeps this route and
    sends again once the name server lists a master; it never falls back to the auto-create
    route (TBW102), which would move the topic to brokers it was never on."""

    def __init__(self, topic: str, namesrv: str, broker_names: tuple[str, ...]) -> None:
        groups = ", ".join(broker_names) or "none"
        ClientError.__init__(
            self, f"topic {topic!r}: its broker groups ({groups}) have no writable master"
        )
        self.topic = topic
        self.namesrv = namesrv
        self.broker_names = broker_names
        self.detail = "no writable master"


class BrokerError(ClientError):
    """A broker or name server answered a request with a non-success response code.
    `broker_error` picks the subclass of the code; this class is the one of unlisted codes."""

    def __init__(self, addr: str, request_code: int, code: int, remark: str | None) -> None:
        self.addr = addr
        self.request_code = request_code
        self.code = code
        self.remark = remark or ""
        self.operation = request_name(request_code)
        self.code_name = response_name(code)
        detail = f": {self.remark}" if self.remark else ""
        super().__init__(f"{self.operation} on {addr} failed: {self.code_name}{detail}")


class BrokerSystemError(BrokerError):
    """SYSTEM_ERROR: the broker failed internally (store full, I/O error, ...)."""

    retriable: ClassVar[bool] = True


class BrokerBusyError(BrokerError):
    """SYSTEM_BUSY: the broker sheds load (page cache busy, queue full)."""

    retriable: ClassVar[bool] = True


class ServiceNotAvailableError(BrokerError):
    """SERVICE_NOT_AVAILABLE: the broker is shutting down, a slave, or not yet serving."""

    retriable: ClassVar[bool] = True


class TopicNotExistError(BrokerError):
    """TOPIC_NOT_EXIST: this broker does not (yet) serve the topic; another one may."""

    retriable: ClassVar[bool] = True


class NoPermissionError(BrokerError):
    """NO_PERMISSION: the broker or topic refuses writes or reads, or ACL refuses the caller.
    Retriable like RocketMQ's producer: another broker of the topic may accept."""

    retriable: ClassVar[bool] = True


class MessageIllegalError(BrokerError):
    """MESSAGE_ILLEGAL: the broker refuses the message itself (size, properties, flags)."""


class RequestNotSupportedError(BrokerError):
    """REQUEST_CODE_NOT_SUPPORTED: the peer does not implement this request."""


class SubscriptionError(BrokerError):
    """SUBSCRIPTION_PARSE_FAILED / _NOT_EXIST / _NOT_LATEST: the subscription is unusable."""


class GroupNotExistError(BrokerError):
    """SUBSCRIPTION_GROUP_NOT_EXIST: the consumer group is unknown to the broker."""


class ConsumerNotOnlineError(BrokerError):
    """CONSUMER_NOT_ONLINE: no consumer of the group is connected."""


# Which BrokerError each response code raises; retriable follows RocketMQ's producer
# (DefaultMQProducerImpl retries TOPIC_NOT_EXIST, SERVICE_NOT_AVAILABLE, SYSTEM_ERROR,
# SYSTEM_BUSY and NO_PERMISSION, and nothing else).
RESPONSE_ERRORS: Mapping[int, type[BrokerError]] = MappingProxyType(
    {
        ResponseCode.SYSTEM_ERROR: BrokerSystemError,
        ResponseCode.SYSTEM_BUSY: BrokerBusyError,
        ResponseCode.SERVICE_NOT_AVAILABLE: ServiceNotAvailableError,
        ResponseCode.TOPIC_NOT_EXIST: TopicNotExistError,
        ResponseCode.NO_PERMISSION: NoPermissionError,
        ResponseCode.MESSAGE_ILLEGAL: MessageIllegalError,
        ResponseCode.REQUEST_CODE_NOT_SUPPORTED: RequestNotSupportedError,
        ResponseCode.SUBSCRIPTION_PARSE_FAILED: SubscriptionError,
        ResponseCode.SUBSCRIPTION_NOT_EXIST: SubscriptionError,
        ResponseCode.SUBSCRIPTION_NOT_LATEST: SubscriptionError,
        ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST: GroupNotExistError,
        ResponseCode.CONSUMER_NOT_ONLINE: ConsumerNotOnlineError,
    }
)


class TlsRequiredError(BrokerSystemError):
    """A name server or broker that accepts only TLS refused this plain connection (it
    answers the first request with SYSTEM_ERROR and a remark saying so, then closes). Not
    retriable: every plain attempt is refused the same way; the client must turn TLS on."""

    retriable: ClassVar[bool] = False
    # What to do, in the command line's words (the library's: tls=True / TlsClientSettings).
    hint: ClassVar[str] = ("connect with --tls (and --tls-ca CA.pem unless its certificate is signed by a CA "
                           "this machine trusts), or set FERRYMQ_TLS=1")


def broker_error(addr: str, request_code: int, code: int, remark: str | None) -> BrokerError:
    """The error for a non-success answer `code` to request `request_code` from `addr`."""
    if code == ResponseCode.SYSTEM_ERROR and (remark or "").startswith(TLS_REQUIRED_PREFIX):
        return TlsRequiredError(addr, request_code, code, remark)
    return RESPONSE_ERRORS.get(code, BrokerError)(addr, request_code, code, remark)


class SendError(ClientError):
    """A send failed after every attempt allowed; `cause` is the last attempt's error."""

    def __init__(self, topic: str, attempts: int, cause: BaseException | None) -> None:
        super().__init__(f"send to topic {topic!r} failed after {attempts} attempt(s): {cause}")
        self.topic = topic
        self.attempts = attempts
        self.cause = cause


class MessageNotFoundError(ClientError):
    """A message lookup (by offset id, key or unique id) found nothing."""

    def __init__(self, what: str) -> None:
        super().__init__(f"no message found for {what}")
        self.what = what
