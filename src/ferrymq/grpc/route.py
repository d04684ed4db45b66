"""QueryRoute and QueryAssignment: the topic's queues on each of its broker groups (one on a
broker's own endpoint, all of them through `ferrymq proxy`), each pointing the client at this
gRPC endpoint (a gRPC client talks to the endpoint it reached, which serves them all), with
RocketMQ's permission split and accepted message types."""

from __future__ import annotations

import ipaddress

from ..common import topic_types
from ..common.headers import PERM_READ, PERM_WRITE
from .backend import TopicGroup
from .convert import check_group, check_topic
from .pb import definition_pb2 as pb
from .pb import service_pb2 as spb
from .status import Code, GrpcStatusError, ok, status


def endpoints(host: str, port: int) -> pb.Endpoints:
    try:
        scheme = pb.IPv6 if ipaddress.ip_address(host).version == 6 else pb.IPv4
    except ValueError:
        scheme = pb.DOMAIN_NAME
    return pb.Endpoints(scheme=scheme, addresses=[pb.Address(host=host, port=port)])


def permission(perm: int) -> pb.Permission:
    readable, writable = bool(perm & PERM_READ), bool(perm & PERM_WRITE)
    if readable and writable:
        return pb.READ_WRITE
    if readable:
        return pb.READ
    if writable:
        return pb.WRITE
    return pb.NONE


# RocketMQ's RouteActivity.parseTopicMessageType; UNSPECIFIED (or a type it does not know)
# accepts nothing.
_ACCEPTED: dict[str, list[pb.MessageType]] = {
    topic_types.NORMAL: [pb.NORMAL],
    topic_types.FIFO: [pb.FIFO],
    topic_types.DELAY: [pb.DELAY],
    topic_types.TRANSACTION: [pb.TRANSACTION],
    topic_types.MIXED: [pb.NORMAL, pb.FIFO, pb.DELAY, pb.TRANSACTION],
}


def accepted_types(cfg: TopicGroup) -> list[pb.MessageType]:
    """The topic's message type as the SDKs read it (they refuse to send another). A backend
    that cannot tell the type: FIFO for an order topic, else every other type (its brokers
    check typed topics themselves)."""
    if cfg.message_type is None:
        return [pb.FIFO] if cfg.order else [pb.NORMAL, pb.DELAY, pb.TRANSACTION]
    return _ACCEPTED.get(cfg.message_type, [pb.MESSAGE_TYPE_UNSPECIFIED])


def queues(cfg: TopicGroup, broker: pb.Broker) -> list[pb.MessageQueue]:
    """RocketMQ's genMessageQueueFromQueueData: read-only queues first, then write-only, then
    read-write; a topic that can be neither read nor written shows its queues as NONE."""
    perm = cfg.perm
    readable, writable = bool(perm & PERM_READ), bool(perm & PERM_WRITE)
    r = w = rw = n = 0
    if readable and writable:
        rw = min(cfg.write_queue_nums, cfg.read_queue_nums)
        r = cfg.read_queue_nums - rw
        w = cfg.write_queue_nums - rw
    elif writable:
        w = cfg.write_queue_nums
    elif readable:
        r = cfg.read_queue_nums
    else:
        n = max(1, cfg.write_queue_nums, cfg.read_queue_nums)
    topic = pb.Resource(name=cfg.topic)
    types = accepted_types(cfg)
    out: list[pb.MessageQueue] = []
    for count, p in ((r, pb.READ), (w, pb.WRITE), (rw, pb.READ_WRITE), (n, pb.NONE)):
        for _ in range(count):
            out.append(pb.MessageQueue(topic=topic, id=len(out), permission=p, broker=broker,
                                       accept_message_types=types))
    return out


def broker_of(group: TopicGroup, endpoints: pb.Endpoints) -> pb.Broker:
    return pb.Broker(name=group.broker_name, id=0, endpoints=endpoints)


def advertised(requested: pb.Endpoints, own: pb.Endpoints) -> pb.Endpoints:
    """What a route points at: the hosts the client reached this endpoint by, with its own
    port, as RocketMQ's RouteActivity answers (useEndpointPortFromRequest off). The listening
    address would send a client of a server on 0.0.0.0, or behind a name or a NAT, nowhere."""
    port = own.addresses[0].port
    return pb.Endpoints(scheme=requested.scheme,
                        addresses=[pb.Address(host=a.host, port=port) for a in requested.addresses])


def query_route(req: spb.QueryRouteRequest, groups: list[TopicGroup],
                endpoints: pb.Endpoints) -> spb.QueryRouteResponse:
    check_topic(req.topic.name)
    if not req.endpoints.addresses:
        raise GrpcStatusError(Code.ILLEGAL_ACCESS_POINT, "endpoints is empty")
    if not groups:
        raise GrpcStatusError(Code.TOPIC_NOT_FOUND, f"topic {req.topic.name} not found")
    endpoints = advertised(req.endpoints, endpoints)
    return spb.QueryRouteResponse(status=ok(), message_queues=[
        q for g in groups for q in queues(g, broker_of(g, endpoints))])


def query_assignment(req: spb.QueryAssignmentRequest, groups: list[TopicGroup],
                     endpoints: pb.Endpoints) -> spb.QueryAssignmentResponse:
    """The proxy's answer: each broker group as one assignment (queue id -1: the broker picks
    the queue at each receive); a FIFO group gets each readable queue."""
    check_topic(req.topic.name)
    check_group(req.group.name)
    if not req.endpoints.addresses:
        raise GrpcStatusError(Code.ILLEGAL_ACCESS_POINT, "endpoints is empty")
    if not groups:
        raise GrpcStatusError(Code.TOPIC_NOT_FOUND, f"topic {req.topic.name} not found")
    readable = [g for g in groups if g.perm & PERM_READ and g.read_queue_nums > 0]
    if not readable:
        return spb.QueryAssignmentResponse(status=status(Code.FORBIDDEN, "no readable queue"))
    topic = pb.Resource(name=req.topic.name)
    endpoints = advertised(req.endpoints, endpoints)
    return spb.QueryAssignmentResponse(status=ok(), assignments=[
        pb.Assignment(message_queue=pb.MessageQueue(topic=topic, id=i, permission=permission(g.perm),
                                                    broker=broker_of(g, endpoints)))
        for g in readable for i in (range(g.read_queue_nums) if g.order else [-1])])
