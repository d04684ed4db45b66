"""How a client command reports a failure: one unwrapped line on stderr naming the operation
and the broker's code by name, or with --json one JSON object on stdout,
`{"error": {"type", "message", "code", "code_name", ...}}`. Either way the exit code is the
same: 1 for a runtime failure, 2 for bad usage."""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field
from typing import Any

from ..client.errors import BrokerError, SendError, TlsRequiredError, UnknownBrokerError, UnknownClusterError
from ..common.errors import FerryMQError, request_name
from ..remoting.errors import (
    RemotingClosedError,
    RemotingConnectError,
    RemotingError,
    RemotingTimeoutError,
)

EXIT_FAILURE = 1
EXIT_USAGE = 2


class CommandFailed(FerryMQError):
    """A failure a command detects itself (nothing found, fewer messages than asked, ...)."""

    def __init__(self, message: str, *, kind: str = "CommandFailed", exit_code: int = 1) -> None:
        super().__init__(message)
        self.message = message
        self.kind = kind
        self.exit_code = exit_code


@dataclass(frozen=True, slots=True)
class Failure:
    type: str
    message: str
    exit_code: int = EXIT_FAILURE
    fields: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"error": {"type": self.type, "message": self.message, **self.fields}}


def _remoting_detail(exc: RemotingError) -> str:
    if isinstance(exc, RemotingConnectError):
        return f"cannot reach {exc.addr}: {exc.reason}"
    if isinstance(exc, RemotingTimeoutError):
        return f"{exc.addr} did not answer {request_name(exc.code)} within {exc.timeout:g}s"
    if isinstance(exc, RemotingClosedError):
        return f"the connection to {exc.addr} closed before the answer"
    return str(exc)


def _role(addr: str, namesrv: str) -> str:
    """What answered from `addr`: a name server the command was given, else a broker."""
    return "name server" if addr in namesrv.split(";") else "broker"


def _detail(exc: BaseException, namesrv: str = "") -> str:
    """The cause in words, without request numbers."""
    if isinstance(exc, TlsRequiredError):
        return f"{_role(exc.addr, namesrv)} {exc.addr} accepts only TLS connections: {exc.hint}"
    if isinstance(exc, BrokerError):
        remark = f": {exc.remark}" if exc.remark else ""
        return f"{exc.code_name}{remark} ({_role(exc.addr, namesrv)} {exc.addr})"
    if isinstance(exc, RemotingError):
        return _remoting_detail(exc)
    return str(exc) or type(exc).__name__


def _fields(exc: BaseException, namesrv: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    if isinstance(exc, SendError):
        out["topic"] = exc.topic
        out["attempts"] = exc.attempts
        if exc.cause is not None:
            out.update({k: v for k, v in _fields(exc.cause, namesrv).items() if k not in out})
            out["cause"] = type(exc.cause).__name__
    if isinstance(exc, BrokerError):
        # "broker" is the address whatever answered, kept for the programs that read it.
        out.update(code=exc.code, code_name=exc.code_name, broker=exc.addr,
                   server_role=_role(exc.addr, namesrv))
    if isinstance(exc, TlsRequiredError):
        out.update(tls_required=True, hint=exc.hint)
    if isinstance(exc, UnknownBrokerError):
        out.update(broker_name=exc.broker, known_brokers=list(exc.known))
    elif isinstance(exc, UnknownClusterError):
        out.update(cluster_name=exc.cluster, known_clusters=list(exc.known))
    elif isinstance(exc, RemotingError) and hasattr(exc, "addr"):
        out["address"] = exc.addr
    if isinstance(exc, FerryMQError):
        out.setdefault("retriable", exc.retriable)
    return out


def describe(exc: BaseException, operation: str, namesrv: str = "") -> Failure:
    """`operation` names what the command was doing ("topic create", "send"); `namesrv` is
    the --namesrv given, to tell an answer of the name server from one of a broker."""
    if isinstance(exc, CommandFailed):
        return Failure(exc.kind, exc.message, exc.exit_code)
    if isinstance(exc, SendError):
        cause = _detail(exc.cause, namesrv) if exc.cause is not None else "no attempt could be made"
        attempts = f" after {exc.attempts} attempts" if exc.attempts > 1 else ""
        message = f"send to topic {exc.topic} failed{attempts}: {cause}"
    elif isinstance(exc, BrokerError | RemotingError):
        message = f"{operation} failed: {_detail(exc, namesrv)}"
    else:
        message = _detail(exc, namesrv)
    return Failure(type(exc).__name__, " ".join(message.split()), EXIT_FAILURE, _fields(exc, namesrv))


def report(failure: Failure, *, as_json: bool) -> int:
    if as_json:
        sys.stdout.write(json.dumps(failure.to_json(), ensure_ascii=False) + "\n")
        sys.stdout.flush()
    else:
        sys.stderr.write(f"ferrymq: {failure.message}\n")
        sys.stderr.flush()
    return failure.exit_code
