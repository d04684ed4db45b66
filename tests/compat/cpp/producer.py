"""Sends `count` messages with rocketmq-client-cpp's producer (sync sends, one after another) and
prints one JSON line per event. Settings and output lines: ../README.md."""

from __future__ import annotations

import signal
import sys
import time
from typing import Any

import common

CFG = common.load_config({
    "group": "compat_cpp_producer",
    "count": 1,
    "startIndex": 0,
    "body": "msg-{i}",
    "tags": "TagA",
    "keys": "key-{i}",
    "intervalMs": 0,
    "stopOnError": True,
    "sendMsgTimeout": 3000,
    "logLevel": "info",
})
if not CFG.get("topic"):
    common.fatal("config.topic is required")

try:
    from rocketmq.client import Message, Producer
    from rocketmq.ffi import dll
except Exception as exc:  # the bundled library did not load
    common.fatal(f"cannot import rocketmq: {exc!r}")

stopping = False


def on_signal(signum: int, _frame: Any) -> None:
    request_stop(signal.Signals(signum).name)


def request_stop(_reason: str) -> None:
    global stopping
    stopping = True


def build(index: int) -> tuple[Any, dict[str, Any]]:
    topic = common.pick(CFG["topic"], index)
    body = common.template(common.pick(CFG["body"], index), index)
    pad = CFG.get("bodyPadTo")
    if pad and len(body.encode()) < pad:
        body += "x" * (pad - len(body.encode()))
    msg = Message(topic)
    raw = body.encode()
    dll.SetByteMessageBody(msg, raw, len(raw))
    tags_value = common.pick(CFG["tags"], index)
    tags = "" if tags_value in (None, "") else common.template(tags_value, index)
    if tags:
        msg.set_tags(tags)
    keys_value = common.pick(CFG["keys"], index)
    keys = "" if keys_value in (None, "") else common.template(keys_value, index)
    if keys:
        msg.set_keys(keys)
    for name, value in (CFG.get("properties") or {}).items():
        msg.set_property(name, common.template(value, index))
    delay = common.pick(CFG.get("delayLevel"), index)
    if delay:
        msg.set_delay_time_level(int(delay))
    info = {"topic": topic, "body": body if len(body) <= 4096 else None, "bodyLength": len(raw),
            "tags": tags, "keys": keys}
    return msg, info


def main() -> None:
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    common.on_stop_line(request_stop)
    producer = Producer(CFG["group"], timeout=int(CFG["sendMsgTimeout"]))
    handle = producer._handle
    dll.SetProducerLogLevel(handle, common.LOG_LEVELS.get(str(CFG["logLevel"]).lower(), 4))
    if CFG.get("instanceName"):
        dll.SetProducerInstanceName(handle, common.b(str(CFG["instanceName"])))
    producer.set_namesrv_addr(CFG["namesrv"])
    if CFG.get("accessKey"):
        producer.set_session_credentials(CFG["accessKey"], CFG["secretKey"], CFG.get("channel") or "ALIYUN")
    try:
        producer.start()
    except Exception as exc:
        common.fatal(f"producer did not start: {exc}")
    common.emit("ready", group=CFG["group"])

    sent = failed = 0
    for n in range(int(CFG["count"])):
        if stopping:
            break
        index = int(CFG["startIndex"]) + n
        msg, info = build(index)
        try:
            result = producer.send_sync(msg)
            sent += 1
            common.emit("sent", index=index, msgId=result.msg_id, queueOffset=result.offset,
                        sendStatus=result.status.name, **info)
        except Exception as exc:
            failed += 1
            common.emit("send_error", index=index, topic=info["topic"], **common.error_fields(exc))
            if CFG["stopOnError"]:
                break
        if CFG["intervalMs"] and n + 1 < CFG["count"]:
            time.sleep(CFG["intervalMs"] / 1000)
    common.emit("done", sent=sent, failed=failed)
    common.emit("closing", reason="SIGTERM" if stopping else "done")
    code = 1 if failed else 0
    try:
        producer.shutdown()
        common.emit("closed")
    except Exception as exc:
        common.emit("close_error", **common.error_fields(exc))
        code = code or 1
    common.exit_now(code)


if __name__ == "__main__":
    try:
        main()
    except SystemExit:
        raise
    except BaseException as exc:
        common.fatal(f"{type(exc).__name__}: {exc}")
    sys.exit(0)
