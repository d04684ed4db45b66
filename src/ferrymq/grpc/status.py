"""apache.rocketmq.v2 status answers: the typed error every handler raises and the Status it
becomes, and the store's and broker's outcomes in the protocol's codes (as RocketMQ's proxy
maps them)."""

from __future__ import annotations

from ..common.codes import ResponseCode
from ..common.errors import FerryMQError
from ..store import PutStatus
from .pb import definition_pb2 as pb

Code = pb.Code
# protobuf's enum wrapper finds each name in a __getattr__ (a Python call for every `Code.OK`
# of every request); its values set once as attributes are plain lookups.
for _name, _number in pb.Code.items():
    setattr(Code, _name, _number)
del _name, _number


class GrpcStatusError(FerryMQError):
    """A request answered with a non-OK apache.rocketmq.v2.Code, not an RPC failure: the SDKs
    read the code from the response's status."""

    def __init__(self, code: pb.Code, message: str) -> None:
        super().__init__(f"{pb.Code.Name(code)}: {message}")
        self.code = code
        self.message = message


def status(code: pb.Code, message: str | None = None) -> pb.Status:
    return pb.Status(code=code, message=message if message is not None else pb.Code.Name(code))


def ok() -> pb.Status:
    return status(Code.OK)


# Put outcomes as the proxy answers a send (SendMessageActivity).
_PUT_CODES: dict[PutStatus, pb.Code] = {
    PutStatus.PUT_OK: Code.OK,
    PutStatus.FLUSH_DISK_TIMEOUT: Code.MASTER_PERSISTENCE_TIMEOUT,
    PutStatus.FLUSH_SLAVE_TIMEOUT: Code.SLAVE_PERSISTENCE_TIMEOUT,
    PutStatus.SLAVE_NOT_AVAILABLE: Code.HA_NOT_AVAILABLE,
    PutStatus.MESSAGE_ILLEGAL: Code.BAD_REQUEST,
    PutStatus.PROPERTIES_SIZE_EXCEEDED: Code.MESSAGE_PROPERTIES_TOO_LARGE,
    PutStatus.SERVICE_NOT_AVAILABLE: Code.INTERNAL_SERVER_ERROR,
    PutStatus.DISK_FULL: Code.INTERNAL_SERVER_ERROR,
    PutStatus.UNKNOWN_ERROR: Code.INTERNAL_SERVER_ERROR,
}


def put_code(put: PutStatus) -> pb.Code:
    return _PUT_CODES.get(put, Code.INTERNAL_SERVER_ERROR)


# Remoting response codes of the broker's own checks, as the proxy's ResponseBuilder maps the
# ones it knows; NO_PERMISSION is FORBIDDEN (the proxy's permission answer).
_RESPONSE_CODES: dict[int, pb.Code] = {
    ResponseCode.SUCCESS: Code.OK,
    ResponseCode.SYSTEM_BUSY: Code.TOO_MANY_REQUESTS,
    ResponseCode.REQUEST_CODE_NOT_SUPPORTED: Code.NOT_IMPLEMENTED,
    ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST: Code.CONSUMER_GROUP_NOT_FOUND,
    ResponseCode.TOPIC_NOT_EXIST: Code.TOPIC_NOT_FOUND,
    ResponseCode.NO_PERMISSION: Code.FORBIDDEN,
    ResponseCode.MESSAGE_ILLEGAL: Code.BAD_REQUEST,
}


def response_code(code: int) -> pb.Code:
    return _RESPONSE_CODES.get(code, Code.INTERNAL_SERVER_ERROR)
