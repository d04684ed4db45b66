"""The root of every error ferrymq raises, and the names of wire codes for messages people read.

`FerryMQError.retriable` says whether the same request may succeed if tried again (on another
broker, or after a route refresh): a caller decides to retry from the error, never from a list
of codes of its own."""

from __future__ import annotations

from typing import ClassVar

from .codes import RequestCode, ResponseCode


class FerryMQError(Exception):
    """Base of every ferrymq error: remoting, client, broker answers and the Spark connector."""

    retriable: ClassVar[bool] = False


def request_name(code: int) -> str:
    """RocketMQ's name of a request code (SEND_MESSAGE_V2), or the number when unknown."""
    try:
        return RequestCode(code).name
    except ValueError:
        return f"request {code}"


def response_name(code: int) -> str:
    """RocketMQ's name of a response code (MESSAGE_ILLEGAL), or the number when unknown."""
    try:
        return ResponseCode(code).name
    except ValueError:
        return f"code {code}"
