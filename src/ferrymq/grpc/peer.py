"""Who is calling: the gRPC peer string as host:port, and the client headers of the SDKs."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from .status import Code, GrpcStatusError


def peer_addr(peer: str) -> str:
    """'ipv4:127.0.0.1:5555' -> '127.0.0.1:5555'; 'ipv6:[::1]:5555' -> '[::1]:5555'."""
    for prefix in ("ipv4:", "ipv6:"):
        if peer.startswith(prefix):
            return peer[len(prefix):]
    return peer or "127.0.0.1:0"


@dataclass(frozen=True, slots=True)
class CallerInfo:
    client_id: str
    language: str
    version: str
    namespace: str
    remote_addr: str

    def require_id(self) -> str:
        if not self.client_id:
            raise GrpcStatusError(Code.CLIENT_ID_REQUIRED, "x-mq-client-id header is required")
        return self.client_id


def caller(metadata: Iterable[Any] | None, peer: str) -> CallerInfo:
    headers: dict[str, str] = {}
    for item in metadata or ():
        key, value = item[0], item[1]
        if isinstance(value, str):
            headers[key.lower()] = value
    return CallerInfo(headers.get("x-mq-client-id", ""), headers.get("x-mq-language", ""),
                      headers.get("x-mq-client-version", ""), headers.get("x-mq-namespace", ""),
                      peer_addr(peer))
