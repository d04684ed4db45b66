"""END_TRANSACTION (EndTransactionProcessor): a producer commits or rolls back a half message,
after its local transaction or when the broker asked it (fromTransactionCheck)."""

from __future__ import annotations

import logging

from ...common.codes import RequestCode
from ...common.headers import opt_bool, opt_str, req_int, req_str
from ...remoting import Connection, RemotingCommand
from ..context import BrokerContext
from ..transaction import TRANSACTION_COMMIT_TYPE, TRANSACTION_ROLLBACK_TYPE
from . import reply

log = logging.getLogger("ferrymq.broker.transaction")


async def end_transaction(broker: BrokerContext, conn: Connection, req: RemotingCommand) -> RemotingCommand | None:
    ext = req.ext_fields
    group = req_str(ext, "producerGroup")
    state = req_int(ext, "commitOrRollback")
    from_check = opt_bool(ext, "fromTransactionCheck")
    if state not in (TRANSACTION_COMMIT_TYPE, TRANSACTION_ROLLBACK_TYPE):
        # "Not known yet" (TRANSACTION_NOT_TYPE) or anything else: no answer, as RocketMQ; the
        # check asks again later.
        log.info("producer %s (group %s) does not know transaction %s yet%s%s", conn.remote_addr, group,
                 opt_str(ext, "transactionId") or opt_str(ext, "msgId"),
                 " (answering a check)" if from_check else "", f": {req.remark}" if req.remark else "")
        return None
    if state == TRANSACTION_ROLLBACK_TYPE or req.remark:
        log.info("producer %s (group %s) %s transaction %s%s%s", conn.remote_addr, group,
                 "rolls back" if state == TRANSACTION_ROLLBACK_TYPE else "commits",
                 opt_str(ext, "transactionId") or opt_str(ext, "msgId"),
                 " (answering a check)" if from_check else "", f": {req.remark}" if req.remark else "")
    outcome = await broker.transactions.end(
        producer_group=group, tran_state_table_offset=req_int(ext, "tranStateTableOffset"),
        commit_log_offset=req_int(ext, "commitLogOffset"), commit_or_rollback=state)
    return reply(req, outcome.code, outcome.remark)


HANDLERS = {
    RequestCode.END_TRANSACTION: end_transaction,
}
