"""`ferrymq producer connections`: a producer group's online clients (mqadmin's
producerConnection)."""

from __future__ import annotations

import argparse

from ..client.admin import AdminClient
from .auth import credentials
from .render import print_json, print_table, stdout


def cmd_connections(args: argparse.Namespace) -> int:
    with AdminClient(args.namesrv, **credentials(args)) as admin:
        conns = admin.producer_connections(args.group, args.topic)
    if args.json:
        print_json({"group": args.group, "topic": args.topic,
                    "connections": [c.to_json() for c in conns]})
        return 0
    if not conns:
        stdout.print(f"no producer of group {args.group} is connected to a broker of "
                     f"{args.topic}", markup=False)
        return 0
    print_table(
        f"producer group {args.group} (brokers of {args.topic})",
        ["client id", "address", "language", "version", "brokers"],
        ([c.client_id, c.client_addr, c.language, c.version, ", ".join(c.brokers)] for c in conns),
        right=["version"],
    )
    return 0


def add(
    sub: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser
) -> None:
    p = sub.add_parser("producer", help="producer groups' online clients")
    psub = p.add_subparsers(dest="producer_command", metavar="ACTION")
    psub.required = True
    c = psub.add_parser("connections", parents=[common],
                        help="the group's online clients: id, address, language, version")
    c.add_argument("group")
    c.add_argument("--topic", required=True,
                   help="a topic the group sends to: its brokers are asked")
    c.set_defaults(func=cmd_connections)
