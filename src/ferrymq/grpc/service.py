"""The apache.rocketmq.v2 MessagingService: each RPC checks its caller and hands the request
to the module that serves it; a GrpcStatusError becomes the response's status, as RocketMQ's
proxy answers (the RPC itself succeeds)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeVar

import grpc

from ..broker.clients import SubscriptionParseError, UnsupportedFilterError
from ..common.errors import FerryMQError
from .backend import Backend
from .budget import forward_budget
from .consume import Consumer
from .convert import check_group, check_topic, timestamp
from .pb import definition_pb2 as pb
from .pb import service_pb2 as spb
from .pb import service_pb2_grpc as sgrpc
from .peer import CallerInfo, caller, peer_addr
from .queues import QueueCalls
from .recall import recall
from .route import query_assignment, query_route
from .send import Sender
from .sessions import ClientSession, Sessions, subscriptions
from .settings import ServerSettings, answer
from .status import Code, GrpcStatusError, ok, status
from .transactions import end_transaction

log = logging.getLogger("ferrymq.grpc")

Resp = TypeVar("Resp")
Context = grpc.aio.ServicerContext[Any, Any]


def _status_of(exc: BaseException) -> pb.Status:
    if isinstance(exc, GrpcStatusError):
        return status(exc.code, exc.message)
    log.exception("gRPC request failed", exc_info=exc)
    return status(Code.INTERNAL_SERVER_ERROR, f"{type(exc).__name__}: {exc}")


async def _answer(make: Callable[[pb.Status], Resp], work: Awaitable[Resp]) -> Resp:
    try:
        return await work
    except (GrpcStatusError, FerryMQError, ValueError, KeyError) as exc:
        return make(_status_of(exc))


class MessagingService(sgrpc.MessagingServiceServicer):
    def __init__(self, backend: Backend, sessions: Sessions, sender: Sender, consumer: Consumer,
                 server_settings: Callable[[], ServerSettings], endpoint: Callable[[], pb.Endpoints]) -> None:
        self._backend = backend
        self._sessions = sessions
        self._sender = sender
        self._consumer = consumer
        self._server_settings = server_settings
        self._endpoint = endpoint
        self._queues = QueueCalls(backend, property_filter=backend.limits.enable_property_filter)

    # --- helpers ---------------------------------------------------------------------------
    @staticmethod
    def _caller(context: Context) -> CallerInfo:
        return caller(context.invocation_metadata(), context.peer())

    def _session(self, who: CallerInfo) -> ClientSession:
        return self._sessions.touch(who.require_id(), who.remote_addr, who.language or "PYTHON", who.version)

    async def _fifo_group(self, settings: pb.Settings) -> bool:
        """A consumer group consumes in order when it subscribes to an order topic."""
        for entry in settings.subscription.subscriptions:
            if any(g.order for g in await self._backend.topic(entry.topic.name)):
                return True
        return False

    # --- route -----------------------------------------------------------------------------
    async def QueryRoute(self, request: spb.QueryRouteRequest, context: Context) -> spb.QueryRouteResponse:
        async def work() -> spb.QueryRouteResponse:
            groups = await self._backend.topic(request.topic.name, timeout_s=forward_budget(context.time_remaining()))
            return query_route(request, groups, self._endpoint())
        return await _answer(lambda s: spb.QueryRouteResponse(status=s), work())

    async def QueryAssignment(self, request: spb.QueryAssignmentRequest,
                              context: Context) -> spb.QueryAssignmentResponse:
        async def work() -> spb.QueryAssignmentResponse:
            groups = await self._backend.topic(request.topic.name, timeout_s=forward_budget(context.time_remaining()))
            return query_assignment(request, groups, self._endpoint())
        return await _answer(lambda s: spb.QueryAssignmentResponse(status=s), work())

    # --- producers -------------------------------------------------------------------------
    async def SendMessage(self, request: spb.SendMessageRequest, context: Context) -> spb.SendMessageResponse:
        # Only the peer's address is wanted: the client headers are not parsed per message.
        return await _answer(lambda s: spb.SendMessageResponse(status=s, entries=[spb.SendResultEntry(status=s)]),
                             self._sender.send(request, peer_addr(context.peer()), context.time_remaining()))

    # --- clients ---------------------------------------------------------------------------
    async def Heartbeat(self, request: spb.HeartbeatRequest, context: Context) -> spb.HeartbeatResponse:
        async def work() -> spb.HeartbeatResponse:
            session = self._session(self._caller(context))
            settings = session.settings
            if settings is None:
                raise GrpcStatusError(Code.UNRECOGNIZED_CLIENT_TYPE, "cannot find client settings for this client")
            if settings.client_type in (pb.PUSH_CONSUMER, pb.SIMPLE_CONSUMER):
                check_group(request.group.name)
            elif settings.client_type != pb.PRODUCER:
                raise GrpcStatusError(Code.UNRECOGNIZED_CLIENT_TYPE, pb.ClientType.Name(settings.client_type))
            self._sessions.register(session)
            return spb.HeartbeatResponse(status=ok())
        return await _answer(lambda s: spb.HeartbeatResponse(status=s), work())

    async def NotifyClientTermination(self, request: spb.NotifyClientTerminationRequest,
                                      context: Context) -> spb.NotifyClientTerminationResponse:
        async def work() -> spb.NotifyClientTerminationResponse:
            who = self._caller(context)
            session = self._sessions.remove(who.require_id())
            if session is None or session.settings is None:
                raise GrpcStatusError(Code.UNRECOGNIZED_CLIENT_TYPE, "cannot find client settings for this client")
            return spb.NotifyClientTerminationResponse(status=ok())
        return await _answer(lambda s: spb.NotifyClientTerminationResponse(status=s), work())

    async def _settings_reply(self, session: ClientSession, cmd: spb.TelemetryCommand) -> spb.TelemetryCommand:
        settings = cmd.settings
        if settings.HasField("publishing"):
            for topic in settings.publishing.topics:
                check_topic(topic.name)
            self._sessions.update_settings(session, settings)
        elif settings.HasField("subscription"):
            check_group(settings.subscription.group.name)
            try:
                subs = subscriptions(settings, property_filter=self._backend.limits.enable_property_filter)
            except (SubscriptionParseError, UnsupportedFilterError) as exc:
                raise GrpcStatusError(Code.ILLEGAL_FILTER_EXPRESSION, str(exc)) from None
            self._sessions.update_settings(session, settings, subs)
        else:
            raise GrpcStatusError(Code.BAD_REQUEST, "there is no publishing or subscription data in settings")
        retries = (await self._backend.retry_max_times(settings.subscription.group.name)
                   if settings.HasField("subscription") else None)
        reply = answer(settings, self._server_settings(), fifo=await self._fifo_group(settings),
                       retry_max_times=retries)
        return spb.TelemetryCommand(status=ok(), settings=reply)

    async def Telemetry(self, request_iterator: AsyncIterator[spb.TelemetryCommand],
                        context: Context) -> AsyncIterator[spb.TelemetryCommand]:
        who = self._caller(context)
        if not who.client_id:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "x-mq-client-id header is required")
        session = self._session(who)
        outbox: asyncio.Queue[spb.TelemetryCommand | None] = asyncio.Queue()
        session.outbox = outbox
        failure: list[str] = []

        async def read() -> None:
            try:
                async for cmd in request_iterator:
                    session.last_seen_ms = self._backend.now_ms()
                    if cmd.WhichOneof("command") == "settings":
                        try:
                            outbox.put_nowait(await self._settings_reply(session, cmd))
                        except GrpcStatusError as exc:
                            # The proxy ends the stream with INVALID_ARGUMENT for a bad request.
                            failure.append(exc.message)
                            break
            except Exception:
                log.exception("telemetry stream of %s failed", who.client_id)
                raise
            finally:
                outbox.put_nowait(None)

        reader = asyncio.create_task(read(), name=f"ferrymq-grpc-telemetry-{who.client_id}")
        try:
            while True:
                item = await outbox.get()
                if item is None:
                    break
                yield item
        finally:
            reader.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await reader
            if session.outbox is outbox:
                session.outbox = None
        if failure:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT,
                                "process client telemetryCommand failed. " + failure[0])

    # --- consumers (pop) -------------------------------------------------------------------
    async def ReceiveMessage(self, request: spb.ReceiveMessageRequest,
                             context: Context) -> AsyncIterator[spb.ReceiveMessageResponse]:
        try:
            self._session(self._caller(context))
            async for response in self._consumer.receive(request, context.time_remaining()):
                yield response
        except (GrpcStatusError, FerryMQError, ValueError, KeyError) as exc:
            yield spb.ReceiveMessageResponse(status=_status_of(exc))
            yield spb.ReceiveMessageResponse(delivery_timestamp=timestamp(self._backend.now_ms()))

    async def AckMessage(self, request: spb.AckMessageRequest, context: Context) -> spb.AckMessageResponse:
        return await _answer(lambda s: spb.AckMessageResponse(status=s),
                             self._consumer.ack(request, context.time_remaining()))

    async def ChangeInvisibleDuration(self, request: spb.ChangeInvisibleDurationRequest,
                                      context: Context) -> spb.ChangeInvisibleDurationResponse:
        return await _answer(lambda s: spb.ChangeInvisibleDurationResponse(status=s),
                             self._consumer.change_invisible(request, context.time_remaining()))

    async def ForwardMessageToDeadLetterQueue(
            self, request: spb.ForwardMessageToDeadLetterQueueRequest,
            context: Context) -> spb.ForwardMessageToDeadLetterQueueResponse:
        return await _answer(lambda s: spb.ForwardMessageToDeadLetterQueueResponse(status=s),
                             self._consumer.forward_to_dlq(request, context.time_remaining()))

    # --- pull-style consumers (queues and offsets the client keeps) ---------------------------
    async def PullMessage(self, request: spb.PullMessageRequest,
                          context: Context) -> AsyncIterator[spb.PullMessageResponse]:
        try:
            async for response in self._queues.pull(request, context.time_remaining(), self._backend.now_ms()):
                yield response
        except (GrpcStatusError, FerryMQError, ValueError, KeyError) as exc:
            yield spb.PullMessageResponse(status=_status_of(exc))

    async def UpdateOffset(self, request: spb.UpdateOffsetRequest, context: Context) -> spb.UpdateOffsetResponse:
        return await _answer(lambda s: spb.UpdateOffsetResponse(status=s), self._queues.update_offset(request))

    async def GetOffset(self, request: spb.GetOffsetRequest, context: Context) -> spb.GetOffsetResponse:
        return await _answer(lambda s: spb.GetOffsetResponse(status=s), self._queues.get_offset(request))

    async def QueryOffset(self, request: spb.QueryOffsetRequest, context: Context) -> spb.QueryOffsetResponse:
        return await _answer(lambda s: spb.QueryOffsetResponse(status=s), self._queues.query_offset(request))

    async def RecallMessage(self, request: spb.RecallMessageRequest,
                            context: Context) -> spb.RecallMessageResponse:
        return await _answer(lambda s: spb.RecallMessageResponse(status=s),
                             recall(self._backend, request, self._caller(context).remote_addr))

    # --- transactions ----------------------------------------------------------------------
    async def EndTransaction(self, request: spb.EndTransactionRequest,
                             context: Context) -> spb.EndTransactionResponse:
        return await _answer(lambda s: spb.EndTransactionResponse(status=s),
                             end_transaction(self._backend, request))
