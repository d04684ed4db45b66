"""A push consumer built with rocketmq-client-cpp (PyPI `rocketmq` 0.4.4). Prints one JSON line
per delivery and per lifecycle event; on SIGTERM/SIGINT (or after `idleExitMs` without a delivery)
it shuts the consumer down, which persists its offsets and unregisters, then exits. Settings and
output lines: ../README.md."""

from __future__ import annotations

import os
import re
import signal
import sys
import threading
import time
from typing import Any

import common

CFG = common.load_config({
    "group": "compat_cpp_consumer",
    "subExpression": "*",
    "broadcast": False,
    "failPattern": None,
    "failTimes": 1,
    "consumeDelayMs": 0,
    "idleExitMs": 0,
    "threadCount": 4,
    "closeTimeoutMs": 20000,
    "propertyNames": [],
    "logLevel": "info",
})
if not CFG.get("topic"):
    common.fatal("config.topic is required")

try:
    from rocketmq.client import MessageModel, PushConsumer, RecvMessage
    from rocketmq.ffi import MSG_CALLBACK_FUNC, dll
except Exception as exc:  # the bundled library did not load
    common.fatal(f"cannot import rocketmq: {exc!r}")

CONSUME_SUCCESS = 0
RECONSUME_LATER = 1

stop = threading.Event()
stop_reason: list[str] = []
lock = threading.Lock()
succeeded = 0
last_activity = time.monotonic()
fail_regex = re.compile(CFG["failPattern"]) if CFG["failPattern"] else None


def request_stop(reason: str) -> None:
    if not stop.is_set():
        stop_reason.append(reason)
        stop.set()


def on_signal(signum: int, _frame: Any) -> None:
    request_stop(signal.Signals(signum).name)


def handle_message(msg: RecvMessage) -> int:
    global succeeded, last_activity
    last_activity = time.monotonic()
    raw = msg.body or b""
    body = raw.decode("utf-8", "replace")
    reconsume = int(msg.reconsume_times)
    fail = fail_regex is not None and fail_regex.search(body) is not None and reconsume < int(CFG["failTimes"])
    props = {}
    for name in CFG["propertyNames"]:
        value = common.text(msg.get_property(name))
        if value:
            props[name] = value
    common.emit(
        "received",
        msgId=common.text(msg.id),
        uniqKey=common.text(msg.get_property("UNIQ_KEY")) or None,
        topic=common.text(msg.topic),
        queueId=int(msg.queue_id),
        queueOffset=int(msg.queue_offset),
        commitLogOffset=int(msg.commit_log_offset),
        body=body,
        bodyLength=len(raw),
        tags=common.text(msg.tags),
        keys=common.text(msg.keys),
        reconsumeTimes=reconsume,
        retryTopic=common.text(msg.get_property("RETRY_TOPIC")) or None,
        originMsgId=common.text(msg.get_property("ORIGIN_MESSAGE_ID")) or None,
        bornTimestamp=int(msg.born_timestamp),
        storeTimestamp=int(msg.store_timestamp),
        properties=props,
        action="retry" if fail else "success",
    )
    if CFG["consumeDelayMs"]:
        time.sleep(CFG["consumeDelayMs"] / 1000)
    if fail:
        return RECONSUME_LATER
    with lock:
        succeeded += 1
    return CONSUME_SUCCESS


def on_message(_consumer: Any, cmsg: Any) -> int:
    # Registered directly with librocketmq (not through PushConsumer.subscribe, whose wrapper
    # re-raises the listener's exception inside the ctypes callback, so the library gets an
    # undefined return value instead of RECONSUME_LATER).
    try:
        return handle_message(RecvMessage(cmsg))
    except BaseException as exc:
        common.emit("error", where="listener", **common.error_fields(exc))
        return RECONSUME_LATER


CALLBACK = MSG_CALLBACK_FUNC(on_message)


def shutdown_and_exit(consumer: Any) -> None:
    reason = stop_reason[0] if stop_reason else "stop"
    common.emit("closing", reason=reason, succeeded=succeeded)
    done = threading.Event()
    errors: list[BaseException] = []

    def run() -> None:
        try:
            consumer.shutdown()
        except BaseException as exc:
            errors.append(exc)
        done.set()

    threading.Thread(target=run, daemon=True).start()
    if not done.wait(CFG["closeTimeoutMs"] / 1000):
        common.emit("close_error", error=f"shutdown() did not finish within {CFG['closeTimeoutMs']} ms")
        common.exit_now(1)
    if errors:
        common.emit("close_error", **common.error_fields(errors[0]))
        common.exit_now(1)
    common.emit("closed", succeeded=succeeded)
    common.exit_now(0)


def main() -> None:
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    common.on_stop_line(request_stop)
    topics = CFG["topic"] if isinstance(CFG["topic"], list) else [CFG["topic"]]
    model = MessageModel.BROADCASTING if CFG["broadcast"] else MessageModel.CLUSTERING
    consumer = PushConsumer(CFG["group"], message_model=model)
    handle = consumer._handle
    dll.SetPushConsumerLogLevel(handle, common.LOG_LEVELS.get(str(CFG["logLevel"]).lower(), 4))
    if CFG.get("instanceName"):
        consumer.set_instance_name(str(CFG["instanceName"]))
    consumer.set_namesrv_addr(CFG["namesrv"])
    if CFG.get("accessKey"):
        consumer.set_session_credentials(CFG["accessKey"], CFG["secretKey"], CFG.get("channel") or "ALIYUN")
    consumer.set_thread_count(int(CFG["threadCount"]))
    consumer.set_message_batch_max_size(1)
    for topic in topics:
        if dll.Subscribe(handle, common.b(topic), common.b(CFG["subExpression"])) != 0:
            common.fatal(f"Subscribe({topic}) failed: {common.text(dll.GetLatestErrorMessage())}")
    if dll.RegisterMessageCallback(handle, CALLBACK) != 0:
        common.fatal(f"RegisterMessageCallback failed: {common.text(dll.GetLatestErrorMessage())}")
    try:
        consumer.start()
    except Exception as exc:
        common.fatal(f"consumer did not start: {exc}")
    # start() returns after the first rebalance: queues are assigned and their start offsets
    # computed, so messages sent from now on are delivered.
    common.emit("ready", group=CFG["group"], topics=topics, pid=os.getpid(),
                instanceName=CFG.get("instanceName") or "DEFAULT")

    idle = CFG["idleExitMs"] / 1000 if CFG["idleExitMs"] else None
    while not stop.wait(0.1):
        if idle is not None and time.monotonic() - last_activity >= idle:
            request_stop("idle")
    shutdown_and_exit(consumer)


if __name__ == "__main__":
    try:
        main()
    except SystemExit:
        raise
    except BaseException as exc:
        common.fatal(f"{type(exc).__name__}: {exc}")
    sys.exit(0)
