"""The official RocketMQ 5 Python SDK (PyPI rocketmq-python-client 5.1.x), unchanged, against a
gRPC endpoint: a producer, a simple consumer and a push consumer, driven by one JSON object of
settings and reporting one JSON object per line on stdout, as the other compat scripts do.

Runs under tests/compat/py5/.venv's Python only (`make compat-py5`), never the project's: the
SDK registers the same apache/rocketmq/v2 descriptors as ferrymq's generated modules.

Settings (argv[1], else FERRYMQ_COMPAT_CONFIG):
- `endpoint` "HOST:PORT" (required), `mode`: "produce" | "simple" | "push".
- produce: `topic`, `count` [1], `startIndex` [0], `body` ["msg-{i}"], `tags` (template or list,
  cycled), `keys` (space-separated template), `properties` {name: template}, `messageGroup`
  (template or list), `deliverAfterMs` (delivery at now + this, whole seconds as the SDK sends),
  `transaction` ("commit" | "rollback" | "none": begin, send the half message, then resolve or
  leave it unresolved; list cycled), `checkResult` ("commit" | "rollback": the checker's answer
  to a recover-orphaned-transaction command), `lingerMs` [0] (stay up after the sends, for
  checks), `async` [false] (send_async, all in flight then waited; `asyncWindow` N: at most N
  in flight), `recall` [false] (bool or list, cycled: recall the message just sent by its
  recall handle; event recalled).
- any mode: `quiet` [false] leaves out the per-message events (sent, received, acked), for
  benchmarks; the done / closed counts stay.
- simple: `topic`, `group`, `tag` ["*"], `invisibleSec` [15], `batch` [16], `awaitSec` [5],
  `expect` (stop after this many acks), `idleExitMs` (stop after this long without a message),
  `skipPattern` (regex: such messages are received but not acked), `changeInvisiblePattern` /
  `changeInvisibleSec` (change their invisible time, then do not ack).
- push: `topic`, `group`, `tag`, `failPattern` / `failTimes` [1] (answer FAILURE while the
  delivery attempt is <= failTimes), `expect`, `idleExitMs`, `consumeDelayMs`.

Events: ready, sent / send_error, received (messageId, body, tag, keys, properties, messageGroup,
deliveryAttempt, deliveryTimestamp, bornTimestamp, topic, action), acked / ack_error,
changed_invisible, check (a transaction check), done, closed, fatal."""

from __future__ import annotations

import json
import logging
import os
import re
import sys
import threading
import time
from typing import Any

# The SDK may print to fd 1; keep the real stdout for event lines only.
_EVENTS = os.fdopen(os.dup(1), "w", buffering=1, encoding="utf-8")
os.dup2(2, 1)
sys.stdout = sys.stderr
_LOCK = threading.Lock()


QUIET_EVENTS = {"sent", "received", "acked"}
_QUIET = [False]


def emit(event: str, **fields: Any) -> None:
    if _QUIET[0] and event in QUIET_EVENTS:
        return
    line = json.dumps({"event": event, "ts": int(time.time() * 1000), **fields}, separators=(",", ":"))
    with _LOCK:
        _EVENTS.write(line + "\n")
        _EVENTS.flush()


def fatal(message: str) -> None:
    emit("fatal", error=message)
    _EVENTS.flush()
    os._exit(2)


def load_config() -> dict[str, Any]:
    raw = sys.argv[1] if len(sys.argv) > 1 and sys.argv[1] else os.environ.get("FERRYMQ_COMPAT_CONFIG", "{}")
    cfg = json.loads(raw)
    if not cfg.get("endpoint"):
        fatal("config.endpoint (HOST:PORT) is required")
    return cfg


def pick(value: Any, i: int) -> Any:
    if isinstance(value, list):
        return value[i % len(value)] if value else None
    return value


def fill(template: Any, i: int) -> Any:
    value = pick(template, i)
    return value.replace("{i}", str(i)).replace("{pid}", str(os.getpid())) if isinstance(value, str) else value


def describe(msg: Any, action: str) -> dict[str, Any]:
    body = msg.body.decode("utf-8", "replace") if msg.body is not None else None
    return {
        "messageId": msg.message_id, "topic": msg.topic, "body": body, "tag": msg.tag,
        "keys": sorted(msg.keys) if msg.keys else [], "properties": dict(msg.properties or {}),
        "messageGroup": msg.message_group, "deliveryAttempt": msg.delivery_attempt,
        "deliveryTimestamp": msg.delivery_timestamp, "bornTimestamp": msg.born_timestamp,
        "action": action,
    }


def configuration(cfg: dict[str, Any]) -> Any:
    from rocketmq import ClientConfiguration, Credentials

    # accessKey/secretKey: ACL (the SDK signs every call, RocketMQ 5's MQv2-HMAC-SHA1).
    creds = Credentials(cfg.get("accessKey", ""), cfg.get("secretKey", ""))
    return ClientConfiguration(cfg["endpoint"], creds, request_timeout=cfg.get("requestTimeoutSec", 5))


def produce(cfg: dict[str, Any]) -> int:
    from rocketmq import Message, Producer, TransactionChecker, TransactionResolution

    check_answer = cfg.get("checkResult", "commit")

    class Checker(TransactionChecker):
        def check(self, message: Any) -> Any:
            emit("check", **describe(message, check_answer))
            return TransactionResolution.COMMIT if check_answer == "commit" else TransactionResolution.ROLLBACK

    topic = cfg["topic"]
    producer = Producer(configuration(cfg), (topic,), checker=Checker(), tls_enable=bool(cfg.get("tlsCa")))
    producer.startup()
    emit("ready", clientId=producer.client_id)
    count, start = int(cfg.get("count", 1)), int(cfg.get("startIndex", 0))
    failed = 0
    futures: list[tuple[int, str, Any]] = []
    # asyncWindow: sends in flight at most (0: all of them), so that a long run's last sends
    # do not wait in the client behind thousands of others past their request timeout.
    window = int(cfg.get("asyncWindow", 0))

    def settle(i: int, body: str, future: Any) -> int:
        try:
            receipt = future.result(timeout=30)
            emit("sent", index=i, body=body, messageId=receipt.message_id, offset=receipt.offset)
            return 0
        except Exception as exc:
            emit("send_error", index=i, body=body, name=type(exc).__name__, error=str(exc))
            return 1

    began = time.monotonic()
    # intervalMs: a steady stream (a failover test sends through the fault).
    interval = int(cfg.get("intervalMs", 0)) / 1000
    for n in range(count):
        i = start + n
        if interval and n:
            time.sleep(interval)
        msg = Message()
        msg.topic = topic
        body = fill(cfg.get("body", "msg-{i}"), i)
        msg.body = body.encode()
        tag = fill(cfg.get("tags"), i)
        if tag:
            msg.tag = tag
        keys = fill(cfg.get("keys"), i)
        if keys:
            msg.keys = keys.split()[0]
            for extra in keys.split()[1:]:
                msg.keys = extra
        for name, template in (cfg.get("properties") or {}).items():
            msg.add_property(name, fill(template, i))
        group = fill(cfg.get("messageGroup"), i)
        if group:
            msg.message_group = group
        if cfg.get("deliverAfterMs") is not None:
            msg.delivery_timestamp = int((time.time() * 1000 + int(cfg["deliverAfterMs"])) / 1000)
        mode = pick(cfg.get("transaction", "none"), i)
        try:
            if mode != "none":
                txn = producer.begin_transaction()
                receipt = producer.send(msg, txn)
                emit("sent", index=i, body=body, messageId=receipt.message_id, offset=receipt.offset,
                     transactionId=receipt.transaction_id, transaction=mode)
                if mode == "commit":
                    txn.commit()
                elif mode == "rollback":
                    txn.rollback()
                emit("resolved", index=i, resolution=mode)
            elif cfg.get("async"):
                futures.append((i, body, producer.send_async(msg)))
                if window and len(futures) >= window:  # the oldest first, as a producer would
                    failed += settle(*futures.pop(0))
            else:
                receipt = producer.send(msg)
                emit("sent", index=i, body=body, messageId=receipt.message_id, offset=receipt.offset,
                     recallHandle=receipt.recall_handle)
                if pick(cfg.get("recall", False), i):
                    emit("recalled", index=i, messageId=producer.recall_message(topic, receipt.recall_handle))
        except Exception as exc:  # the SDK's exceptions carry its status code
            failed += 1
            emit("send_error", index=i, body=body, name=type(exc).__name__, error=str(exc),
                 code=getattr(exc, "code", None))
    for i, body, future in futures:
        failed += settle(i, body, future)
    emit("done", sent=count - failed, failed=failed, elapsedMs=int((time.monotonic() - began) * 1000))
    linger = int(cfg.get("lingerMs", 0)) / 1000
    if linger:
        time.sleep(linger)
    producer.shutdown()
    emit("closed")
    return 1 if failed else 0


class Budget:
    """When a consumer stops: after `expect` acknowledged messages or `idleExitMs` idle."""

    def __init__(self, cfg: dict[str, Any]) -> None:
        self.expect = int(cfg.get("expect", 0))
        self.idle = int(cfg.get("idleExitMs", 0)) / 1000
        self.last = time.monotonic()
        self.done = 0
        self.lock = threading.Lock()

    def seen(self) -> None:
        with self.lock:
            self.last = time.monotonic()

    def finished(self) -> None:
        with self.lock:
            self.done += 1
            self.last = time.monotonic()

    def over(self) -> bool:
        with self.lock:
            if self.expect and self.done >= self.expect:
                return True
            return bool(self.idle) and time.monotonic() - self.last > self.idle


def simple(cfg: dict[str, Any]) -> int:
    from rocketmq import FilterExpression, SimpleConsumer

    topic, group = cfg["topic"], cfg["group"]
    consumer = SimpleConsumer(configuration(cfg), group, {topic: FilterExpression(cfg.get("tag", "*"))},
                              await_duration=int(cfg.get("awaitSec", 5)), tls_enable=bool(cfg.get("tlsCa")))
    consumer.startup()
    emit("ready", clientId=consumer.client_id)
    skip = re.compile(cfg["skipPattern"]) if cfg.get("skipPattern") else None
    change = re.compile(cfg["changeInvisiblePattern"]) if cfg.get("changeInvisiblePattern") else None
    budget = Budget(cfg)
    first: list[float] = []
    while True:  # at least one receive: it starts a new group on the queues
        try:
            msgs = consumer.receive(int(cfg.get("batch", 16)), int(cfg.get("invisibleSec", 15)))
        except Exception as exc:
            code = getattr(exc, "code", None)
            # The SDK's own errors carry a code; a gRPC error's `code` is a method.
            emit("receive_error", name=type(exc).__name__, error=str(exc), code=str(code()) if callable(code) else code)
            time.sleep(0.2)
            if budget.over():
                break
            continue
        for msg in msgs or []:
            if not first:
                first.append(time.monotonic())
            budget.seen()
            body = msg.body.decode("utf-8", "replace")
            if skip is not None and skip.search(body):
                emit("received", **describe(msg, "skip"))
                continue
            if change is not None and change.search(body):
                emit("received", **describe(msg, "change"))
                consumer.change_invisible_duration(msg, int(cfg.get("changeInvisibleSec", 1)))
                emit("changed_invisible", messageId=msg.message_id, body=body)
                continue
            emit("received", **describe(msg, "ack"))
            try:
                consumer.ack(msg)
                emit("acked", messageId=msg.message_id, body=body)
                budget.finished()
            except Exception as exc:
                emit("ack_error", messageId=msg.message_id, body=body, name=type(exc).__name__, error=str(exc))
        if budget.over():
            break
    elapsed = int((time.monotonic() - first[0]) * 1000) if first else 0
    emit("consumed", acked=budget.done, elapsedMs=elapsed)
    consumer.shutdown()
    emit("closed", acked=budget.done)
    return 0


def push(cfg: dict[str, Any]) -> int:
    from rocketmq import ConsumeResult, FilterExpression, MessageListener, PushConsumer

    fail = re.compile(cfg["failPattern"]) if cfg.get("failPattern") else None
    fail_times = int(cfg.get("failTimes", 1))
    delay = int(cfg.get("consumeDelayMs", 0)) / 1000
    budget = Budget(cfg)

    class Listener(MessageListener):
        def consume(self, message: Any) -> Any:
            budget.seen()
            if delay:
                time.sleep(delay)
            body = message.body.decode("utf-8", "replace")
            if fail is not None and fail.search(body) and (message.delivery_attempt or 1) <= fail_times:
                emit("received", **describe(message, "failure"))
                return ConsumeResult.FAILURE
            emit("received", **describe(message, "success"))
            budget.finished()
            return ConsumeResult.SUCCESS

    topic, group = cfg["topic"], cfg["group"]
    consumer = PushConsumer(configuration(cfg), group, Listener(), {topic: FilterExpression(cfg.get("tag", "*"))})
    consumer.startup()
    emit("ready", clientId=consumer.client_id)
    while not budget.over():
        time.sleep(0.05)
    consumer.shutdown()
    emit("closed", succeeded=budget.done)
    return 0


def main() -> int:
    logging.basicConfig(stream=sys.stderr, level=logging.WARNING)
    cfg = load_config()
    _QUIET[0] = bool(cfg.get("quiet"))
    if cfg.get("tlsCa"):
        # tlsCa: a TLS channel (the SDK's tls_enable) trusting this CA: the SDK takes gRPC's
        # default roots, which gRPC reads from this variable.
        os.environ["GRPC_DEFAULT_SSL_ROOTS_FILE_PATH"] = cfg["tlsCa"]
    modes = {"produce": produce, "simple": simple, "push": push}
    mode = modes.get(cfg.get("mode", "produce"))
    if mode is None:
        fatal(f"unknown mode {cfg.get('mode')!r}")
        return 2
    try:
        return mode(cfg)
    except Exception as exc:
        fatal(f"{type(exc).__name__}: {exc}")
        return 2


if __name__ == "__main__":
    # The SDK's threads are not all daemons: leave at once when the run is over.
    code = main()
    _EVENTS.flush()
    os._exit(code)
