"""`ferrymq topic create|list|status`."""

from __future__ import annotations

import argparse

from ..client.admin import AdminClient
from .render import fmt_time, print_json, print_table, stdout


def cmd_create(args: argparse.Namespace) -> int:
    with AdminClient(args.namesrv) as admin:
        brokers = admin.create_topic(args.topic, args.queues, order=args.order)
    if args.json:
        print_json({"topic": args.topic, "queues": args.queues, "brokers": brokers})
    else:
        stdout.print(
            f"topic {args.topic} created with {args.queues} queue(s) on {', '.join(brokers)}",
            markup=False,
        )
    return 0


def cmd_list(args: argparse.Namespace) -> int:
    with AdminClient(args.namesrv) as admin:
        topics = admin.topic_list()
    if args.json:
        print_json(topics)
    else:
        for t in topics:
            stdout.print(t, markup=False)
    return 0


def cmd_status(args: argparse.Namespace) -> int:
    with AdminClient(args.namesrv) as admin:
        rows = admin.topic_status(args.topic)
    if args.json:
        print_json([r.to_json() for r in rows])
        return 0
    print_table(
        f"topic {args.topic}",
        ["broker", "queue", "min offset", "max offset", "messages", "last update"],
        (
            [
                r.broker,
                r.queue_id,
                r.min_offset,
                r.max_offset,
                r.max_offset - r.min_offset,
                fmt_time(r.last_update),
            ]
            for r in rows
        ),
        right=["queue", "min offset", "max offset", "messages"],
    )
    return 0


def add(
    sub: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser
) -> None:
    p = sub.add_parser("topic", help="create, list and inspect topics")
    tsub = p.add_subparsers(dest="topic_command", metavar="ACTION")
    tsub.required = True
    c = tsub.add_parser("create", parents=[common], help="create or update a topic on every broker")
    c.add_argument("topic")
    c.add_argument("--queues", type=int, default=4, help="read/write queues per broker (default 4)")
    c.add_argument("--order", action="store_true", help="mark the topic as ordered")
    c.set_defaults(func=cmd_create)
    c = tsub.add_parser("list", parents=[common], help="every topic the name server knows")
    c.set_defaults(func=cmd_list)
    c = tsub.add_parser("status", parents=[common], help="offsets of each queue of a topic")
    c.add_argument("topic")
    c.set_defaults(func=cmd_status)
