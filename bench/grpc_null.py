"""A MessagingService that does nothing: QueryRoute names four queues behind itself, SendMessage
answers OK without storing, the telemetry stream echoes the client's settings. Served by
grpc.aio on uvloop as ferrymq's fronts are, it is the floor of CPU any Python gRPC front pays
per SendMessage; grpc_bench.py measures it beside the proxy and the broker's endpoint.

`python -m bench.grpc_null` prints `null grpc=HOST:PORT` and serves until SIGTERM."""

from __future__ import annotations

import asyncio
import signal
from collections.abc import AsyncIterator
from typing import Any

import grpc
import uvloop

from ferrymq.grpc.pb import definition_pb2 as pb
from ferrymq.grpc.pb import service_pb2 as spb
from ferrymq.grpc.pb import service_pb2_grpc as sgrpc

_OK = pb.Status(code=pb.OK)


class NullService(sgrpc.MessagingServiceServicer):
    def __init__(self) -> None:
        self.port = 0

    async def QueryRoute(self, request: spb.QueryRouteRequest, context: Any) -> spb.QueryRouteResponse:
        here = pb.Endpoints(scheme=pb.IPv4, addresses=[pb.Address(host="127.0.0.1", port=self.port)])
        return spb.QueryRouteResponse(status=_OK, message_queues=[
            pb.MessageQueue(topic=request.topic, id=i, permission=pb.READ_WRITE,
                            broker=pb.Broker(name="null", id=0, endpoints=here), accept_message_types=[pb.NORMAL])
            for i in range(4)])

    async def SendMessage(self, request: spb.SendMessageRequest, context: Any) -> spb.SendMessageResponse:
        return spb.SendMessageResponse(status=_OK, entries=[
            spb.SendResultEntry(status=_OK, message_id=m.system_properties.message_id, offset=0)
            for m in request.messages])

    async def Heartbeat(self, request: spb.HeartbeatRequest, context: Any) -> spb.HeartbeatResponse:
        return spb.HeartbeatResponse(status=_OK)

    async def NotifyClientTermination(self, request: spb.NotifyClientTerminationRequest,
                                      context: Any) -> spb.NotifyClientTerminationResponse:
        return spb.NotifyClientTerminationResponse(status=_OK)

    async def Telemetry(self, requests: AsyncIterator[spb.TelemetryCommand],
                        context: Any) -> AsyncIterator[spb.TelemetryCommand]:
        async for command in requests:
            if command.HasField("settings"):
                yield spb.TelemetryCommand(status=_OK, settings=command.settings)


async def serve() -> None:
    server = grpc.aio.server()
    service = NullService()
    sgrpc.add_MessagingServiceServicer_to_server(service, server)  # type: ignore[no-untyped-call]
    service.port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    print(f"null grpc=127.0.0.1:{service.port}", flush=True)
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    await stop.wait()
    await server.stop(None)


if __name__ == "__main__":
    uvloop.install()
    asyncio.run(serve())
