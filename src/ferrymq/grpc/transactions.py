"""Transactional messages over gRPC on the backend's transaction service: the half message of a
SendMessage, EndTransaction, and the broker's check of an open transaction turned into the
recover-orphaned-transaction command on the producer's telemetry stream."""

from __future__ import annotations

from ..common.codes import RequestCode
from ..common.record import MessageDecodeError, decode_record
from ..remoting import RemotingCommand
from .backend import Backend
from .convert import check_topic, outgoing
from .pb import definition_pb2 as pb
from .pb import service_pb2 as spb
from .receipt import TransactionId
from .status import Code, GrpcStatusError, ok, status


async def end_transaction(backend: Backend, req: spb.EndTransactionRequest) -> spb.EndTransactionResponse:
    check_topic(req.topic.name)
    if req.resolution not in (pb.COMMIT, pb.ROLLBACK):
        raise GrpcStatusError(Code.BAD_REQUEST, "resolution must be COMMIT or ROLLBACK")
    code, remark = await backend.end_transaction(req.topic.name, req.transaction_id, req.resolution == pb.COMMIT)
    if code != Code.OK:
        return spb.EndTransactionResponse(status=status(code, remark))
    return spb.EndTransactionResponse(status=ok())


def recover_command(req: RemotingCommand, now_ms: int) -> spb.TelemetryCommand | None:
    """The broker's CHECK_TRANSACTION_STATE for a producer, as the command a gRPC producer's
    transaction checker answers (with EndTransaction, source SERVER_CHECK); None for any other
    notice."""
    if req.code != RequestCode.CHECK_TRANSACTION_STATE or not req.body:
        return None
    ext = req.ext_fields
    try:
        txid = TransactionId(int(ext["tranStateTableOffset"]), int(ext["commitLogOffset"]))
        msg = decode_record(req.body)
    except (KeyError, ValueError, MessageDecodeError):
        return None
    message = outgoing(msg, now_ms=now_ms)
    return spb.TelemetryCommand(recover_orphaned_transaction_command=spb.RecoverOrphanedTransactionCommand(
        message=message, transaction_id=txid.encode()))
