"""A transactional producer in its own process, for the SIGKILL scenario: sends one message in
a transaction it never decides (UNKNOW, and UNKNOW to every check), prints `SENT <msg_id>`, and
waits to be killed."""

from __future__ import annotations

import sys
import threading

from ferrymq import LocalTransactionState, Message, MessageExt, TransactionProducer

namesrv, topic, group, body = sys.argv[1:5]


class Undecided:
    def execute_local_transaction(self, msg: Message, arg: object) -> LocalTransactionState:
        return LocalTransactionState.UNKNOW

    def check_local_transaction(self, msg: MessageExt) -> LocalTransactionState:
        print("CHECKED", msg.msg_id, flush=True)
        return LocalTransactionState.UNKNOW


producer = TransactionProducer(group, namesrv, listener=Undecided(), route_refresh_interval=0.3)
producer.start()
result = producer.send_message_in_transaction(Message(topic, body.encode()))
print("SENT", result.msg_id, flush=True)
threading.Event().wait()
