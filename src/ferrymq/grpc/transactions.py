"""Transactional messages over gRPC on the broker's transaction service: the half message of a
SendMessage, EndTransaction, and the broker's check of an open transaction turned into the
recover-orphaned-transaction command on the producer's telemetry stream."""

from __future__ import annotations

from ..broker.context import BrokerContext
from ..broker.transaction import TRANSACTION_COMMIT_TYPE, TRANSACTION_ROLLBACK_TYPE
from ..common.codes import RequestCode, ResponseCode
from ..common.record import MessageDecodeError, decode_record
from ..remoting import RemotingCommand
from .convert import check_topic, outgoing
from .pb import definition_pb2 as pb
from .pb import service_pb2 as spb
from .receipt import TransactionId, decode_transaction_id
from .status import Code, GrpcStatusError, ok, response_code, status


async def end_transaction(broker: BrokerContext, req: spb.EndTransactionRequest) -> spb.EndTransactionResponse:
    check_topic(req.topic.name)
    txid = decode_transaction_id(req.transaction_id)
    if req.resolution == pb.COMMIT:
        kind = TRANSACTION_COMMIT_TYPE
    elif req.resolution == pb.ROLLBACK:
        kind = TRANSACTION_ROLLBACK_TYPE
    else:
        raise GrpcStatusError(Code.BAD_REQUEST, "resolution must be COMMIT or ROLLBACK")
    # The producer group of a gRPC producer is its topic, as RocketMQ's proxy sets it.
    outcome = await broker.transactions.end(
        producer_group=req.topic.name, tran_state_table_offset=txid.half_offset,
        commit_log_offset=txid.commit_log_offset, commit_or_rollback=kind)
    if outcome.code != ResponseCode.SUCCESS:
        return spb.EndTransactionResponse(status=status(response_code(outcome.code), outcome.remark or ""))
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
