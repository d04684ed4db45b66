"""Receipt handles and transaction ids handed to gRPC clients: the positions the broker needs
back, as opaque strings. Pure encode/decode; a malformed one raises GrpcStatusError with the
proxy's code (INVALID_RECEIPT_HANDLE, INVALID_TRANSACTION_ID)."""

from __future__ import annotations

from dataclasses import dataclass

from .status import Code, GrpcStatusError

_HANDLE_VERSION = "f1"
_TXID_VERSION = "ft1"


@dataclass(frozen=True, slots=True)
class ReceiptHandle:
    """One delivery of a popped message: its queue position, when it was handed out (a later
    delivery of the same message has a later pop time) and for how long."""

    topic: str
    queue_id: int
    offset: int
    pop_time: int
    invisible_ms: int

    def encode(self) -> str:
        return f"{_HANDLE_VERSION} {self.topic} {self.queue_id} {self.offset} {self.pop_time} {self.invisible_ms}"


def decode_handle(text: str) -> ReceiptHandle:
    parts = text.split(" ")
    if len(parts) != 6 or parts[0] != _HANDLE_VERSION:
        raise GrpcStatusError(Code.INVALID_RECEIPT_HANDLE, f"receipt handle {text!r} is not one this broker issued")
    try:
        queue_id, offset, pop_time, invisible = (int(p) for p in parts[2:])
    except ValueError:
        raise GrpcStatusError(Code.INVALID_RECEIPT_HANDLE, f"receipt handle {text!r} is malformed") from None
    if queue_id < 0 or offset < 0:
        raise GrpcStatusError(Code.INVALID_RECEIPT_HANDLE, f"receipt handle {text!r} names no message")
    return ReceiptHandle(parts[1], queue_id, offset, pop_time, invisible)


@dataclass(frozen=True, slots=True)
class TransactionId:
    """A half message: its offset in the half queue and in the commit log (END_TRANSACTION's
    tranStateTableOffset and commitLogOffset)."""

    half_offset: int
    commit_log_offset: int

    def encode(self) -> str:
        return f"{_TXID_VERSION}-{self.half_offset:x}-{self.commit_log_offset:x}"


def decode_transaction_id(text: str) -> TransactionId:
    parts = text.split("-")
    if len(parts) != 3 or parts[0] != _TXID_VERSION:
        raise GrpcStatusError(Code.INVALID_TRANSACTION_ID, f"transaction id {text!r} is not one this broker issued")
    try:
        return TransactionId(int(parts[1], 16), int(parts[2], 16))
    except ValueError:
        raise GrpcStatusError(Code.INVALID_TRANSACTION_ID, f"transaction id {text!r} is malformed") from None
