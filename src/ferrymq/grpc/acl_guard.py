"""ACL on the gRPC endpoint (apache.rocketmq.v2), as RocketMQ 5's proxy checks it with ACL 1.0.

Clients send `authorization: MQv2-HMAC-SHA1 Credential=AK, SignedHeaders=x-mq-date-time,
Signature=HEX` and `x-mq-date-time`; the signature is hex(HmacSHA1(secretKey, date-time)).
Each request then needs what RocketMQ's PlainAccessResource.parse(GeneratedMessageV3) says:
PUB on a send's topic, SUB on the group and topic of receives, acks and assignments, ANY on a
route's topic, the topics and group a telemetry stream's settings announce. A refusal ends the
call with PERMISSION_DENIED and the reason."""

from __future__ import annotations

import hmac
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import grpc

from ..acl.address import host_of
from ..acl.check import Denial, decide
from ..acl.guard import RefusalLog
from ..acl.permission import Perm
from ..acl.resources import Needs, ResourceParseError
from ..acl.rules import Account
from ..acl.watch import AclFile
from ..common.names import retry_topic
from .pb import definition_pb2 as pb
from .pb import service_pb2 as spb

_CONSUMERS = (pb.ClientType.PUSH_CONSUMER, pb.ClientType.SIMPLE_CONSUMER)


def parse_authorization(value: str) -> tuple[str, str] | None:
    """(access key, hex signature) from the authorization header; None when it is not one."""
    method, sep, rest = value.partition(" ")
    if not sep or not method:
        return None
    items = {}
    for part in rest.split(","):
        name, eq, item = part.strip().partition("=")
        if not eq:
            return None
        items[name] = item
    access_key = items.get("Credential", "").split("/")[0]
    signature = items.get("Signature", "")
    if not access_key or not signature:
        return None
    return access_key, signature


def grpc_signature(secret_key: str, date_time: str) -> str:
    return hmac.new(secret_key.encode("utf-8"), date_time.encode("utf-8"), "sha1").hexdigest()


def needs_of_message(request: Any) -> Needs:
    needs = Needs()

    def group(resource: pb.Resource) -> None:
        needs.add(retry_topic(resource.name) if resource.name else None, Perm.SUB)

    if isinstance(request, spb.HeartbeatRequest):
        if request.client_type in _CONSUMERS:
            if not request.HasField("group"):
                raise ResourceParseError(0, "a consumer's heartbeat names no group")
            group(request.group)
    elif isinstance(request, spb.SendMessageRequest):
        topics = {m.topic.name for m in request.messages}
        if len(topics) != 1:
            raise ResourceParseError(0, "a send must carry messages of one topic")
        needs.add(topics.pop(), Perm.PUB)
    elif isinstance(request, spb.ReceiveMessageRequest):
        group(request.group)
        needs.add(request.message_queue.topic.name, Perm.SUB)
    elif isinstance(request, spb.AckMessageRequest | spb.ForwardMessageToDeadLetterQueueRequest
                    | spb.QueryAssignmentRequest | spb.ChangeInvisibleDurationRequest):
        group(request.group)
        needs.add(request.topic.name, Perm.SUB)
    elif isinstance(request, spb.PullMessageRequest | spb.UpdateOffsetRequest | spb.GetOffsetRequest):
        group(request.group)
        needs.add(request.message_queue.topic.name, Perm.SUB)
    elif isinstance(request, spb.QueryOffsetRequest):
        needs.add(request.message_queue.topic.name, Perm.SUB)
    elif isinstance(request, spb.EndTransactionRequest | spb.RecallMessageRequest):
        needs.add(request.topic.name, Perm.PUB)
    elif isinstance(request, spb.NotifyClientTerminationRequest):
        if request.HasField("group"):
            group(request.group)
    elif isinstance(request, spb.QueryRouteRequest):
        needs.add(request.topic.name, Perm.ANY)
    elif isinstance(request, spb.TelemetryCommand) and request.WhichOneof("command") == "settings":
        settings = request.settings
        if not settings.HasField("publishing") and not settings.HasField("subscription"):
            raise ResourceParseError(0, "settings name neither publishing nor subscription")
        for topic in settings.publishing.topics:
            needs.add(topic.name, Perm.PUB)
        if settings.HasField("subscription"):
            group(settings.subscription.group)
            for entry in settings.subscription.subscriptions:
                needs.add(entry.topic.name, Perm.SUB)
    return needs


def peer_host(peer: str) -> str:
    """"ipv4:127.0.0.1:5555" / "ipv6:[::1]:5555" -> the address."""
    _, _, addr = peer.partition(":")
    return host_of(addr).strip("[]")


class GrpcAclInterceptor(grpc.aio.ServerInterceptor):
    def __init__(self, source: AclFile) -> None:
        self.source = source
        self.log = RefusalLog()

    def _decide(self, metadata: dict[str, str], peer: str, method: str, request: Any) -> Denial | None:
        auth = parse_authorization(metadata.get("authorization", ""))
        date_time = metadata.get("x-mq-date-time", "")

        def verify(account: Account) -> bool:
            return auth is not None and hmac.compare_digest(grpc_signature(account.secret_key, date_time),
                                                            auth[1].lower())

        return decide(self.source.rules, peer_host(peer), auth[0] if auth else None, f"gRPC {method}", verify,
                      lambda: needs_of_message(request) if request is not None else Needs())

    async def _refuse(self, context: grpc.aio.ServicerContext[Any, Any], method: str, denial: Denial) -> None:
        self.log.refused_one(peer_host(context.peer()), denial.access_key or "", f"gRPC call {method}",
                             denial.reason)
        await context.abort(grpc.StatusCode.PERMISSION_DENIED, denial.remark)

    async def intercept_service(
        self, continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler[Any, Any] | None]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler[Any, Any] | None:
        handler = await continuation(handler_call_details)
        if handler is None:
            return handler
        metadata = {str(k): v if isinstance(v, str) else v.decode("utf-8", "replace")
                    for k, v in (handler_call_details.invocation_metadata or ())}
        method = str(handler_call_details.method).rsplit("/", 1)[-1]
        guard = self
        h: Any = handler
        if h.unary_unary is not None:
            inner_uu = h.unary_unary

            async def unary_unary(request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> Any:
                denial = guard._decide(metadata, context.peer(), method, request)
                if denial is not None:
                    await guard._refuse(context, method, denial)
                return await inner_uu(request, context)

            return h._replace(unary_unary=unary_unary)  # type: ignore[no-any-return]
        if h.unary_stream is not None:
            inner_us = h.unary_stream

            async def unary_stream(request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> AsyncIterator[Any]:
                denial = guard._decide(metadata, context.peer(), method, request)
                if denial is not None:
                    await guard._refuse(context, method, denial)
                async for item in inner_us(request, context):
                    yield item

            return h._replace(unary_stream=unary_stream)  # type: ignore[no-any-return]
        if h.stream_stream is not None:
            inner_ss = h.stream_stream

            async def stream_stream(requests: Any, context: grpc.aio.ServicerContext[Any, Any]) -> AsyncIterator[Any]:
                denial = guard._decide(metadata, context.peer(), method, None)
                if denial is not None:
                    await guard._refuse(context, method, denial)
                refused: list[Denial] = []

                async def checked() -> AsyncIterator[Any]:
                    # A refused settings command ends the client's half of the stream; the call
                    # then ends with PERMISSION_DENIED below.
                    async for command in requests:
                        found = guard._decide(metadata, context.peer(), method, command)
                        if found is not None:
                            refused.append(found)
                            return
                        yield command

                async for item in inner_ss(checked(), context):
                    yield item
                if refused:
                    await guard._refuse(context, method, refused[0])

            return h._replace(stream_stream=stream_stream)  # type: ignore[no-any-return]
        return handler
