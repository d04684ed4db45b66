"""Reading the apache.rocketmq.v2 answers the gRPC tests take apart by hand (a raw stub, where
the SDK has no call for them)."""

from __future__ import annotations

from collections.abc import Iterable

from ferrymq.grpc.pb import definition_pb2 as pb
from ferrymq.grpc.pb import service_pb2 as spb


def pull_answer(stream: Iterable[spb.PullMessageResponse]) -> tuple[int, list[pb.Message], int | None]:
    """A PullMessage's stream as (status code, messages, next offset)."""
    code, msgs, nxt = -1, [], None
    for r in stream:
        kind = r.WhichOneof("content")
        if kind == "status":
            code = r.status.code
        elif kind == "message":
            msgs.append(r.message)
        else:
            nxt = r.next_offset
    return code, msgs, nxt
