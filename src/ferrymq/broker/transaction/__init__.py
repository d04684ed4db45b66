"""Transactional messages: half messages, END_TRANSACTION and the check of open transactions."""

from __future__ import annotations

from .records import (
    TRANSACTION_COMMIT_TYPE,
    TRANSACTION_NOT_TYPE,
    TRANSACTION_PREPARED_TYPE,
    TRANSACTION_ROLLBACK_TYPE,
    is_half_message,
)
from .service import EndOutcome, TransactionService

__all__ = [
    "TRANSACTION_COMMIT_TYPE",
    "TRANSACTION_NOT_TYPE",
    "TRANSACTION_PREPARED_TYPE",
    "TRANSACTION_ROLLBACK_TYPE",
    "EndOutcome",
    "TransactionService",
    "is_half_message",
]
