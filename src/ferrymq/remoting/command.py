"""RemotingCommand: one request or response of RocketMQ's remoting protocol."""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

from ..common.codes import (
    DEFAULT_VERSION,
    RPC_ONEWAY,
    RPC_TYPE_RESPONSE,
    LanguageCode,
    SerializeType,
)

# Opaques start at 1: ali-ons treats an opaque of 0 as "unset" and replaces it.
_opaques = itertools.count(1)


def next_opaque() -> int:
    # itertools.count.__next__ is atomic under the GIL, so clients on several threads share it.
    return next(_opaques) & 0x7FFFFFFF or next(_opaques)


@dataclass(slots=True)
class RemotingCommand:
    code: int
    opaque: int = 0
    flag: int = 0
    remark: str | None = None
    ext_fields: dict[str, str] = field(default_factory=dict)
    body: bytes | None = None
    language: int = LanguageCode.JAVA
    version: int = DEFAULT_VERSION
    serialize_type: SerializeType = SerializeType.JSON

    @classmethod
    def request(
        cls,
        code: int,
        *,
        ext_fields: dict[str, str] | None = None,
        body: bytes | None = None,
        oneway: bool = False,
    ) -> RemotingCommand:
        return cls(
            code=int(code),
            opaque=next_opaque(),
            flag=RPC_ONEWAY if oneway else 0,
            ext_fields=ext_fields if ext_fields is not None else {},
            body=body,
        )

    @classmethod
    def make_response_to(
        cls,
        req: RemotingCommand,
        code: int,
        *,
        remark: str | None = None,
        ext_fields: dict[str, str] | None = None,
        body: bytes | None = None,
    ) -> RemotingCommand:
        # A response is written in the serialization its request came in: a Java client that
        # asked in ROCKETMQ binary expects binary back; JSON peers (ali-ons) get JSON.
        return cls(
            code=int(code),
            opaque=req.opaque,
            flag=RPC_TYPE_RESPONSE,
            remark=remark,
            ext_fields=ext_fields if ext_fields is not None else {},
            body=body,
            serialize_type=req.serialize_type,
        )

    @property
    def is_response(self) -> bool:
        return bool(self.flag & RPC_TYPE_RESPONSE)

    @property
    def is_oneway(self) -> bool:
        return bool(self.flag & RPC_ONEWAY)

    def mark_oneway(self) -> RemotingCommand:
        self.flag |= RPC_ONEWAY
        return self

    def describe(self) -> str:
        kind = "response" if self.is_response else "request"
        return f"{kind} code={self.code} opaque={self.opaque}"
