"""`ferrymq topic create|list|status|delete|update|route|clusters`."""

from __future__ import annotations

import argparse

from ..client.admin import AdminClient
from ..common import topic_types
from ..common.headers import PERM_READ, PERM_WRITE
from .auth import credentials
from .failures import CommandFailed
from .operator_cmds import add_topic_actions
from .render import broker_label, fmt_time, print_json, print_slave_note, print_table, stdout


def cmd_create(args: argparse.Namespace) -> int:
    write = args.write_queues or args.queues
    read = args.read_queues or args.queues
    if read < write and not args.force:
        raise CommandFailed(
            f"{read} read queue(s) for {write} write queue(s): what producers send to queues "
            f"{read}-{write - 1} would never be consumed (lower --write-queues too, or --force)"
        )
    if args.order and args.type not in (None, topic_types.FIFO):
        raise CommandFailed(f"--order is --type FIFO; it cannot go with --type {args.type}")
    # --order stays what it was, an order topic, and that is RocketMQ 5's FIFO type.
    message_type = topic_types.FIFO if args.order else args.type
    with AdminClient(args.namesrv, **credentials(args)) as admin:
        brokers = admin.create_topic(
            args.topic, write, read_queue_nums=read, order=args.order, force=args.force,
            cluster=args.cluster, broker=args.broker, message_type=message_type,
        )
    if args.json:
        print_json({"topic": args.topic, "queues": write, "read_queues": read,
                    "write_queues": write, "brokers": brokers, "message_type": message_type})
    else:
        counts = f"{write} queue(s)" if read == write else f"{read} read / {write} write queue(s)"
        stdout.print(
            f"topic {args.topic} created with {counts} on {', '.join(brokers)}", markup=False
        )
    return 0


def cmd_list(args: argparse.Namespace) -> int:
    with AdminClient(args.namesrv, **credentials(args)) as admin:
        topics = admin.topic_list()
    if args.json:
        print_json(topics)
    else:
        for t in topics:
            stdout.print(t, markup=False)
    return 0


def cmd_status(args: argparse.Namespace) -> int:
    with AdminClient(args.namesrv, **credentials(args)) as admin:
        rows = admin.topic_status(args.topic)
        types = admin.topic_message_types(args.topic)
    if args.json:
        print_json([{**r.to_json(), "message_type": types.get(r.broker)} for r in rows])
        return 0
    kinds = ", ".join(sorted(set(types.values())))
    print_table(
        f"topic {args.topic} ({kinds})" if kinds else f"topic {args.topic}",
        ["broker", "queue", "min offset", "max offset", "messages", "last update"],
        (
            [
                broker_label(r.broker, r.read_from),
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
    print_slave_note(rows)
    return 0


def cmd_delete(args: argparse.Namespace) -> int:
    with AdminClient(args.namesrv, **credentials(args)) as admin:
        brokers = admin.delete_topic(args.topic)
    if args.json:
        print_json({"topic": args.topic, "deleted": True, "brokers": brokers})
    else:
        stdout.print(f"topic {args.topic} deleted on {', '.join(brokers)}", markup=False)
    return 0


# RocketMQ's perm values, by the names mqadmin's users know them.
PERMS = {"rw": PERM_READ | PERM_WRITE, "r": PERM_READ, "w": PERM_WRITE, "none": 0}
PERM_NAMES = {v: k for k, v in PERMS.items()}


def parse_perm(text: str) -> int:
    """'rw', 'r', 'w', 'none' or RocketMQ's number (6, 4, 2, 0)."""
    if text in PERMS:
        return PERMS[text]
    if text.isdigit() and int(text) in PERM_NAMES:
        return int(text)
    raise argparse.ArgumentTypeError(f"{text!r}: use rw, r, w, none (or 6, 4, 2, 0)")


def cmd_update(args: argparse.Namespace) -> int:
    with AdminClient(args.namesrv, **credentials(args)) as admin:
        brokers = admin.update_topic_perm(args.topic, args.perm)
    name = PERM_NAMES[args.perm]
    if args.json:
        print_json({"topic": args.topic, "perm": args.perm, "perm_name": name, "brokers": brokers})
    else:
        stdout.print(
            f"topic {args.topic} is now {name} ({args.perm}) on {', '.join(brokers)}", markup=False
        )
    return 0


def cmd_route(args: argparse.Namespace) -> int:
    with AdminClient(args.namesrv, **credentials(args)) as admin:
        route = admin.topic_route_data(args.topic)
    if args.json:
        print_json(route)
        return 0
    clusters = {str(b.get("brokerName")): str(b.get("cluster", "")) for b in route.get("brokerDatas") or []}
    print_table(
        f"topic {args.topic}: brokers",
        ["broker", "cluster", "bid", "addr"],
        sorted(
            [name, clusters[name], int(bid), addr]
            for b in route.get("brokerDatas") or []
            for name in [str(b.get("brokerName"))]
            for bid, addr in (b.get("brokerAddrs") or {}).items()
        ),
        right=["bid"],
    )
    print_table(
        f"topic {args.topic}: queues",
        ["broker", "read queues", "write queues", "perm", "sys flag"],
        (
            [q.get("brokerName"), q.get("readQueueNums"), q.get("writeQueueNums"),
             f"{PERM_NAMES.get(int(q.get('perm', 0)), '?')} ({q.get('perm')})", q.get("topicSysFlag", 0)]
            for q in route.get("queueDatas") or []
        ),
        right=["read queues", "write queues", "sys flag"],
    )
    if route.get("orderTopicConf"):
        stdout.print(f"order topic conf: {route['orderTopicConf']}", markup=False)
    return 0


def cmd_clusters(args: argparse.Namespace) -> int:
    with AdminClient(args.namesrv, **credentials(args)) as admin:
        clusters = admin.topic_clusters(args.topic)
    if args.json:
        print_json({"topic": args.topic, "clusters": clusters})
    else:
        for c in clusters:
            stdout.print(c, markup=False)
    return 0


def add(
    sub: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser
) -> None:
    p = sub.add_parser("topic", help="create, list and inspect topics")
    tsub = p.add_subparsers(dest="topic_command", metavar="ACTION")
    tsub.required = True
    c = tsub.add_parser("create", parents=[common],
                        help="create or update a topic on every broker, or those of --cluster, or --broker")
    c.add_argument("topic")
    c.add_argument("--cluster", help="only the brokers of this cluster (default: every broker)")
    c.add_argument("--broker", help="only this broker (name or its master's HOST:PORT)")
    c.add_argument("--queues", type=int, default=4, help="read/write queues per broker (default 4)")
    c.add_argument("--read-queues", type=int, help="read queues per broker (default: --queues)")
    c.add_argument("--write-queues", type=int, help="write queues per broker (default: --queues)")
    c.add_argument(
        "--force",
        action="store_true",
        help="lower the read queues even where messages are still unconsumed (they become "
        "unreadable), or give fewer read than write queues",
    )
    c.add_argument("--order", action="store_true", help="an order topic: --type FIFO")
    c.add_argument(
        "--type",
        choices=topic_types.TOPIC_TYPES,
        help="RocketMQ 5's topic message type (attribute message.type; a send of another type "
        "is refused): NORMAL (the default), FIFO, DELAY, TRANSACTION, or MIXED (any; needs the "
        "broker's enable_mixed_message_type)",
    )
    c.set_defaults(func=cmd_create)
    c = tsub.add_parser("list", parents=[common], help="every topic the name server knows")
    c.set_defaults(func=cmd_list)
    c = tsub.add_parser("status", parents=[common], help="offsets of each queue of a topic")
    c.add_argument("topic")
    c.set_defaults(func=cmd_status)
    c = tsub.add_parser(
        "delete", parents=[common], help="delete a topic on its brokers and the name servers"
    )
    c.add_argument("topic")
    c.set_defaults(func=cmd_delete)
    c = tsub.add_parser("update", parents=[common], help="change a topic's permission")
    c.add_argument("topic")
    c.add_argument(
        "--perm",
        type=parse_perm,
        required=True,
        help="rw (6), r (4: no sends), w (2: no consumption) or none (0)",
    )
    c.set_defaults(func=cmd_update)
    c = tsub.add_parser("route", parents=[common],
                        help="the topic's route as the name server returns it (brokers, queues, perms)")
    c.add_argument("topic")
    c.set_defaults(func=cmd_route)
    c = tsub.add_parser("clusters", parents=[common], help="the clusters whose brokers serve the topic")
    c.add_argument("topic")
    c.set_defaults(func=cmd_clusters)
    add_topic_actions(tsub, common)
