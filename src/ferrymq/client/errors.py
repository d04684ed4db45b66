"""Errors the clients raise. Each carries the facts a caller needs to decide what to do
(which broker, which response code, which field), not just a message."""

from __future__ import annotations


class ClientError(Exception):
    """Base of every ferrymq client error."""


class ClientStateError(ClientError):
    """A client used in the wrong lifecycle state (not started, already shut down, ...)."""

    def __init__(self, client: str, state: str, action: str) -> None:
        super().__init__(f"{client} is {state}; cannot {action}")
        self.client = client
        self.state = state
        self.action = action


class MessageValidationError(ClientError, ValueError):
    """A message refused before anything was sent (empty body, too large, bad property)."""

    def __init__(self, field: str, reason: str) -> None:
        super().__init__(f"invalid message {field}: {reason}")
        self.field = field
        self.reason = reason


class NoRouteError(ClientError):
    """The name server knows no route for the topic (and none could be derived from TBW102)."""

    def __init__(self, topic: str, namesrv: str, detail: str = "") -> None:
        extra = f" ({detail})" if detail else ""
        super().__init__(f"no route for topic {topic!r} on name server {namesrv}{extra}")
        self.topic = topic
        self.namesrv = namesrv
        self.detail = detail


class BrokerError(ClientError):
    """A broker or name server answered a request with a non-success response code."""

    def __init__(self, addr: str, request_code: int, code: int, remark: str | None) -> None:
        super().__init__(
            f"{addr} answered request {request_code} with code {code}: {remark or ''}".rstrip()
        )
        self.addr = addr
        self.request_code = request_code
        self.code = code
        self.remark = remark or ""


class SendError(ClientError):
    """A send failed after every attempt allowed; `cause` is the last attempt's error."""

    def __init__(self, topic: str, attempts: int, cause: BaseException | None) -> None:
        super().__init__(f"sending to topic {topic!r} failed after {attempts} attempt(s): {cause}")
        self.topic = topic
        self.attempts = attempts
        self.cause = cause


class MessageNotFoundError(ClientError):
    """A message lookup (by offset id, key or unique id) found nothing."""

    def __init__(self, what: str) -> None:
        super().__init__(f"no message found for {what}")
        self.what = what
