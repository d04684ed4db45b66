"""`ferrymq send`, `ferrymq consume`, `ferrymq msg show|trace|get|find`."""

from __future__ import annotations

import argparse
import asyncio
import sys
from typing import Any

from ..client.admin import AdminClient
from ..client.admin_results import MessageTrace
from ..client.consumer.lite import AsyncLitePullConsumer
from ..client.consumer.types import ConsumeFromWhere
from ..client.errors import BrokerError, NoRouteError, TlsRequiredError
from ..client.message_json import message_detail, message_json, preview
from ..client.producer_async import AsyncProducer
from ..client.results import PullStatus, SendResult
from ..common.codes import ResponseCode
from ..common.errors import FerryMQError
from ..common.ids import is_offset_msg_id, is_uniq_id
from ..common.message import Message, MessageExt, MessageQueue
from .auth import credentials
from .deadline import Deadline
from .failures import CommandFailed
from .render import fmt_time, print_json, print_table, progress, stdout

CLI_PRODUCER_GROUP = "ferrymq-cli"


def _body(arg: str) -> bytes:
    """'-' reads stdin; '@path' reads a file; anything else is the text itself."""
    if arg == "-":
        return sys.stdin.buffer.read()
    if arg.startswith("@") and len(arg) > 1:
        with open(arg[1:], "rb") as fh:
            return fh.read()
    return arg.encode("utf-8")


def _properties(pairs: list[str]) -> dict[str, str]:
    props: dict[str, str] = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep or not name:
            raise ValueError(f"--property wants NAME=VALUE, got {pair!r}")
        props[name] = value
    return props


def cmd_send(args: argparse.Namespace) -> int:
    msg = Message(
        args.topic,
        _body(args.body),
        tags=args.tags,
        keys=args.keys,
        delay_level=args.delay_level,
        properties=_properties(args.property),
    )
    result = asyncio.run(_send(args, msg))
    if args.json:
        print_json(
            {
                "status": result.status.value,
                "msg_id": result.msg_id,
                "offset_msg_id": result.offset_msg_id,
                "queue_id": result.queue_id,
                "queue_offset": result.queue_offset,
            }
        )
    else:
        stdout.print(
            f"{result.status.value} msg_id={result.msg_id} offset_msg_id="
            f"{result.offset_msg_id} queue={result.broker}:{result.queue_id} "
            f"offset={result.queue_offset}",
            markup=False,
        )
    return 0


async def _send(args: argparse.Namespace, msg: Message) -> SendResult:
    """--timeout bounds it all: the producer's start (a name-server lookup), the send with its
    retries (the producer's own send timeout is what is left then), and its stop."""
    deadline = Deadline("send", args.timeout)
    producer = AsyncProducer(args.group, args.namesrv, send_timeout=args.timeout,
                             **credentials(args))
    try:
        await deadline.run(producer.start(), f"asking the name server {args.namesrv}")
        producer.send_timeout = deadline.left() or 0.0
        return await deadline.run(producer.send(msg), f"sending to topic {args.topic}")
    finally:
        await deadline.close(producer.shutdown(), "producer")


def _print_message(m: MessageExt, as_json: bool) -> None:
    if as_json:
        print_json(message_json(m))
    else:
        stdout.print(
            f"{m.queue_id}:{m.queue_offset} {m.msg_id} tags={m.tags or '-'} "
            f"keys={m.keys or '-'} reconsumed={m.reconsume_times} "
            f"{preview(m.body, 200)}",
            markup=False,
        )


def cmd_consume(args: argparse.Namespace) -> int:
    printed = [0]
    trouble: list[str] = []
    try:
        asyncio.run(_consume(args, printed, trouble))
    except KeyboardInterrupt:
        pass
    if args.count is not None and printed[0] < args.count:
        why = f" ({trouble[0]})" if trouble else ""
        raise CommandFailed(
            f"received {printed[0]} of {args.count} message(s) within {args.timeout}s{why}"
        )
    return 0


async def _consume(args: argparse.Namespace, printed: list[int], trouble: list[str]) -> None:
    """--timeout bounds it all: joining the group (route, heartbeat, offsets), polling, and
    leaving. Polling ends a little early so leaving (the last offsets, the unregister) fits."""
    deadline = Deadline("consume", args.timeout)
    where = ConsumeFromWhere.FIRST_OFFSET if args.from_ == "first" else ConsumeFromWhere.LAST_OFFSET
    consumer = AsyncLitePullConsumer(
        args.group,
        args.namesrv,
        auto_commit=False,
        consume_from_where=where,
        pull_suspend_timeout=2.0,
        shutdown_timeout=5.0,
        request_timeout=deadline.request_timeout(),
        **credentials(args),
    )
    consumer.subscribe(args.topic, args.expression)
    reserve = 0.0 if args.timeout is None else min(0.5, args.timeout / 10)
    try:
        await deadline.run(consumer.start(), f"joining group {args.group} (the topic's route from the name "
                           "server, then heartbeats and offsets from its brokers)",
                           lambda: consumer.inst.namesrv_failure)
        with progress("consuming", args.count) as bar:
            task = bar.add_task("consume", total=args.count)
            while args.count is None or printed[0] < args.count:
                left = deadline.left()
                if left is not None and left <= reserve:
                    break
                wait = 1.0 if left is None else min(1.0, left - reserve)
                remaining = None if args.count is None else args.count - printed[0]
                msgs = await consumer.poll(wait, remaining)
                for m in msgs:
                    _print_message(m, args.json)
                printed[0] += len(msgs)
                if msgs:
                    # Only what was printed is acknowledged: poll never hands out more.
                    await deadline.run(consumer.commit(), "committing the offsets")
                    bar.update(task, advance=len(msgs))
        failure = consumer.inst.namesrv_failure
        if isinstance(failure, TlsRequiredError):
            raise failure
        if failure is not None:
            trouble.append(f"name server {args.namesrv}: {failure}")
        if consumer.pull_refusal is not None:
            trouble.append(_refusal(args.group, args.topic, consumer.pull_refusal))
        route = consumer.inst.routes.get(args.topic)
        if route is not None and route.queue_datas and not any(q.readable for q in route.queue_datas):
            # Consumers leave a queue without read permission out: nothing is even pulled.
            trouble.append(f"no queue of topic {args.topic} is readable (its perm): `ferrymq topic update "
                           f"{args.topic} --perm rw` gives the reads back")
    finally:
        await deadline.close(consumer.shutdown(), "consumer")


def _refusal(group: str, topic: str, exc: BrokerError) -> str:
    """The broker's refusal of the pulls, with what to do where its remark does not say."""
    text = f"the broker refused the pulls: {exc}"
    if exc.code != ResponseCode.NO_PERMISSION:
        return text
    # RocketMQ's remarks for a group whose consumeEnable is false and for a topic not readable.
    if exc.remark.startswith("subscription group no permission"):
        text += (f"; group {group}'s consume_enable is false (`ferrymq group list`): "
                 f"`ferrymq group update {group} --consume-enable true` lets it consume again")
    elif exc.remark.endswith("pulling message is forbidden"):  # the broker's own perm check
        text += f"; the topic's perm has no read (`ferrymq topic update {topic} --perm rw` gives it back)"
    return text


def _lookup(admin: AdminClient, msg_id: str, topic: str | None) -> MessageExt:
    """A message by its offset id (store host + commit-log offset) or its unique id. The two
    have the same length; a unique id's port field is out of range (RocketMQ's
    MessageDecoder.decodeMessageId would dial it anyway), so it is only searched by key."""
    offset_id, uniq_id = is_offset_msg_id(msg_id), is_uniq_id(msg_id)
    if not (offset_id or uniq_id):
        raise CommandFailed(
            f"{msg_id!r} is not a message id (32 or 56 hex digits: a msg_id or an offset_msg_id)",
            kind="MessageIdError",
        )
    errors: list[str] = []
    if topic and uniq_id:
        try:
            return admin.query_by_uniq_key(topic, msg_id)
        except FerryMQError as exc:
            errors.append(str(exc))
    if offset_id:
        try:
            return admin.view_message(msg_id)
        except FerryMQError as exc:
            errors.append(str(exc))
    if uniq_id and not topic:
        found = admin.find_by_uniq_key(msg_id)
        if found:
            return found[0]  # the original; later copies are its retries or dead letter
        errors.append("no topic has a message with this unique id")
    raise CommandFailed(
        f"message {msg_id} not found: {'; '.join(errors)}", kind="MessageNotFoundError"
    )


def cmd_show(args: argparse.Namespace) -> int:
    with AdminClient(args.namesrv, **credentials(args)) as admin:
        msg = _lookup(admin, args.id, args.topic)
    detail = message_detail(msg)
    if args.json:
        print_json(detail)
        return 0
    rows = [
        (k, fmt_time(v) if k.endswith("timestamp") else v)
        for k, v in detail.items()
        if k not in ("properties", "body", "body_b64")
    ]
    rows += [(f"property {k}", v) for k, v in sorted(msg.properties.items())]
    rows.append(("body", preview(msg.body, 400)))
    print_table(f"message {args.id}", ["field", "value"], rows)
    return 0


def _print_messages(title: str, msgs: list[MessageExt]) -> None:
    print_table(
        title,
        ["msg_id", "offset_msg_id", "queue", "offset", "tags", "keys", "stored", "body"],
        (
            [
                m.msg_id,
                m.offset_msg_id,
                f"{m.broker}:{m.queue_id}",
                m.queue_offset,
                m.tags or "-",
                m.keys or "-",
                fmt_time(m.store_timestamp),
                preview(m.body),
            ]
            for m in msgs
        ),
        right=["offset"],
    )


def cmd_find(args: argparse.Namespace) -> int:
    with AdminClient(args.namesrv, **credentials(args)) as admin:
        msgs = admin.query_message(args.topic, args.key, max_num=args.limit)
    if args.json:
        print_json([message_detail(m) for m in msgs])
        return 0
    if not msgs:
        raise CommandFailed(f"no message with key {args.key!r} in topic {args.topic}")
    _print_messages(f"messages with key {args.key}", msgs)
    return 0


def _copy_json(m: MessageExt) -> dict[str, Any]:
    return {
        "topic": m.topic,
        "broker": m.broker,
        "queue_id": m.queue_id,
        "queue_offset": m.queue_offset,
        "offset_msg_id": m.offset_msg_id,
        "store_timestamp": m.store_timestamp,
        "reconsume_times": m.reconsume_times,
    }


def cmd_trace(args: argparse.Namespace) -> int:
    """Every stored copy of a message (its topic, retries, dead letter, delay schedule) and,
    for each, whether each group consuming that topic has consumed it."""
    with AdminClient(args.namesrv, **credentials(args)) as admin:
        msg = _lookup(admin, args.id, args.topic)
        copies = (admin.find_by_uniq_key(msg.msg_id) if is_uniq_id(msg.msg_id) else []) or [msg]
        tracks = []
        for copy in copies:
            try:
                tracks += admin.message_tracks(copy)
            except NoRouteError:
                continue  # an internal topic (the delay schedule) no group consumes
        trace = admin.message_trace(msg.msg_id)
    if args.json:
        print_json(
            {
                "msg_id": msg.msg_id,
                "copies": [_copy_json(c) for c in copies],
                "tracks": [t.to_json() for t in tracks],
                "trace_enable": trace.trace_enable,
                "trace_errors": trace.errors,
                "timeline": [e.to_json() for e in trace.events],
            }
        )
        return 0
    print_table(
        f"message {msg.msg_id}: {len(copies)} stored cop{'y' if len(copies) == 1 else 'ies'}",
        ["topic", "queue", "offset", "offset_msg_id", "reconsumed", "stored"],
        (
            [c.topic, f"{c.broker}:{c.queue_id}", c.queue_offset, c.offset_msg_id,
             c.reconsume_times, fmt_time(c.store_timestamp)]
            for c in copies
        ),
        right=["offset", "reconsumed"],
    )
    if not tracks:
        stdout.print("no consumer group consumes its topic", markup=False)
    else:
        print_table(
            None,
            ["group", "topic", "offset", "track", "group offset"],
            ([t.group, t.topic, t.queue_offset, t.track, t.consumer_offset] for t in tracks),
            right=["offset", "group offset"],
        )
    _print_timeline(trace)
    return 0


def _print_timeline(trace: MessageTrace) -> None:
    for broker, error in sorted(trace.errors.items()):
        stdout.print(f"no trace from {broker}: {error}", markup=False)
    off = [b for b, on in trace.trace_enable.items() if not on and b not in trace.errors]
    if off:
        stdout.print(f"trace_enable is off on {', '.join(off)}: deliveries and consumption "
                     "there are not recorded", markup=False)
    if not trace.events:
        stdout.print("no recorded trace", markup=False)
        return
    print_table(
        "timeline",
        ["time", "event", "where", "group", "client", "detail"],
        (
            [
                fmt_time(e.ts),
                e.kind,
                f"{e.topic}:{e.queue_id}:{e.queue_offset}" if e.queue_offset >= 0 else e.topic or "-",
                e.group or "-",
                e.client or "-",
                " ".join(f"{k}={v}" for k, v in sorted(e.detail.items())
                         if k not in ("offset_msg_id", "keys")) or "-",
            ]
            for e in trace.events
        ),
    )


def _queue(admin: AdminClient, topic: str, queue_id: int, broker: str | None) -> MessageQueue:
    queues = [q for q in admin.message_queues(topic) if q.queue_id == queue_id]
    if broker is not None:
        queues = [q for q in queues if q.broker_name == broker]
    names = sorted({q.broker_name for q in queues})
    if not queues:
        where = f" on broker {broker}" if broker else ""
        raise CommandFailed(f"topic {topic} has no readable queue {queue_id}{where}")
    if len(names) > 1:
        raise CommandFailed(
            f"queue {queue_id} of {topic} is on brokers {', '.join(names)}: choose with --broker"
        )
    return queues[0]


def cmd_get(args: argparse.Namespace) -> int:
    """Read by (topic, queue, offset) without a group and without committing anything."""
    with AdminClient(args.namesrv, **credentials(args)) as admin:
        mq = _queue(admin, args.topic, args.queue, args.broker)
        result = admin.pull(mq, args.offset, args.count)
    if result.status is not PullStatus.FOUND:
        held = (
            f"it holds offsets {result.min_offset} to {result.max_offset - 1}"
            if result.max_offset > result.min_offset
            else f"it is empty, next offset {result.max_offset}"
        )
        raise CommandFailed(
            f"no message at offset {args.offset} of queue {mq.queue_id} of {mq.topic} on "
            f"{mq.broker_name} ({held})",
            kind="MessageNotFoundError",
        )
    msgs = result.messages[: args.count]
    if args.json:
        print_json([message_detail(m) for m in msgs])
        return 0
    _print_messages(f"{mq.topic} queue {mq.queue_id} from offset {args.offset}", msgs)
    return 0


def add(
    sub: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser
) -> None:
    p = sub.add_parser("send", parents=[common], help="send one message")
    p.add_argument("topic")
    p.add_argument("body", help="the body text; '-' reads stdin, '@FILE' reads a file")
    p.add_argument("--tags", help="the message's tag")
    p.add_argument("--keys", help="space-separated keys (indexed for `msg find`)")
    p.add_argument("--delay-level", type=int, default=0, help="deliver after this delay level")
    p.add_argument(
        "--property",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="a user property (repeatable)",
    )
    p.add_argument("--group", default=CLI_PRODUCER_GROUP, help="producer group")
    p.add_argument(
        "--timeout",
        type=float,
        default=3.0,
        help="seconds the whole command may take: lookup, send, retries (default 3)",
    )
    p.set_defaults(func=cmd_send)

    p = sub.add_parser(
        "consume",
        parents=[common],
        help="print messages as a member of a consumer group, committing them",
    )
    p.add_argument("topic")
    p.add_argument("--group", required=True, help="consumer group")
    p.add_argument(
        "--from",
        dest="from_",
        choices=["first", "last"],
        default="last",
        help="where a group without committed offsets starts (default last)",
    )
    p.add_argument("--count", type=int, help="stop after this many messages")
    p.add_argument("--expression", default="*", help="tag expression, e.g. 'TagA || TagB'")
    p.add_argument(
        "--timeout",
        type=float,
        help="seconds the whole command may take, joining and leaving the group included "
        "(with --count: exit 1 if short)",
    )
    p.set_defaults(func=cmd_consume)

    p = sub.add_parser("msg", help="look messages up")
    msub = p.add_subparsers(dest="msg_command", metavar="ACTION")
    msub.required = True
    c = msub.add_parser(
        "show",
        parents=[common],
        help="one message by msg_id (unique id) or offset_msg_id",
    )
    c.add_argument("id")
    c.add_argument(
        "--topic", help="the topic of a msg_id (faster: otherwise every topic is searched)"
    )
    c.set_defaults(func=cmd_show)
    c = msub.add_parser(
        "trace",
        parents=[common],
        help="a message's stored copies, which groups have consumed it and its recorded timeline",
    )
    c.add_argument("id")
    c.add_argument(
        "--topic", help="the topic of a msg_id (faster: otherwise every topic is searched)"
    )
    c.set_defaults(func=cmd_trace)
    c = msub.add_parser(
        "get", parents=[common], help="messages by (topic, queue, offset), read without a group"
    )
    c.add_argument("topic")
    c.add_argument("queue", type=int, help="queue id")
    c.add_argument("offset", type=int, help="queue offset of the first message")
    c.add_argument("--count", type=int, default=1, help="how many messages (default 1)")
    c.add_argument("--broker", help="the broker of the queue, when several serve the topic")
    c.set_defaults(func=cmd_get)
    c = msub.add_parser("find", parents=[common], help="messages by key")
    c.add_argument("--topic", required=True)
    c.add_argument("--key", required=True)
    c.add_argument("--limit", type=int, default=32, help="at most this many per broker")
    c.set_defaults(func=cmd_find)
