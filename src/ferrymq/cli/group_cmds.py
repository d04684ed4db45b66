"""`ferrymq group progress|connections|reset-offset`."""

from __future__ import annotations

import argparse
import datetime as dt

from ..client.admin import AdminClient
from . import group_ops_cmds, group_table_cmds
from .auth import credentials
from .failures import CommandFailed
from .render import broker_label, print_json, print_slave_note, print_table, stdout


def cmd_progress(args: argparse.Namespace) -> int:
    with AdminClient(args.namesrv, **credentials(args)) as admin:
        rows = admin.group_progress(args.group)
    if args.json:
        print_json([r.to_json() for r in rows])
        return 0
    if not rows:
        stdout.print(f"group {args.group} has no progress on any broker", markup=False)
        return 0
    total = sum(r.lag for r in rows)
    print_table(
        f"group {args.group}: total lag {total}",
        ["topic", "broker", "queue", "broker offset", "consumer offset", "lag"],
        ([r.topic, broker_label(r.broker, r.read_from), r.queue_id, r.broker_offset,
          r.consumer_offset, r.lag] for r in rows),
        right=["queue", "broker offset", "consumer offset", "lag"],
    )
    print_slave_note(rows)
    return 0


def cmd_connections(args: argparse.Namespace) -> int:
    with AdminClient(args.namesrv, **credentials(args)) as admin:
        conns = admin.consumer_connections(args.group)
    if args.json:
        print_json(conns.to_json())
        return 0
    if not conns.connections:
        stdout.print(f"no consumer of group {args.group} is online", markup=False)
        return 0
    print_table(
        f"group {args.group}: {conns.message_model or '-'} {conns.consume_type or '-'}, "
        f"from {conns.consume_from_where or '-'}",
        ["client id", "address", "language", "version"],
        ([c.client_id, c.client_addr, c.language, c.version] for c in conns.connections),
        right=["version"],
    )
    print_table(None, ["topic", "expression"], sorted(conns.subscriptions.items()))
    return 0


def _target_timestamp(args: argparse.Namespace) -> int:
    """-1 asks the broker for the end of each queue; 0 is before the first message."""
    if args.to_end:
        return -1
    if args.to_start:
        return 0
    if args.timestamp is not None:
        return int(args.timestamp)
    when = dt.datetime.fromisoformat(args.to_time)
    if when.tzinfo is None:
        when = when.astimezone()  # a time without zone is local time, as people write it
    return int(when.timestamp() * 1000)


def cmd_reset(args: argparse.Namespace) -> int:
    try:
        ts = _target_timestamp(args)
    except ValueError as exc:
        # A usage error, like argparse's.
        raise CommandFailed(f"bad --to-time: {exc}", kind="UsageError", exit_code=2) from exc
    with AdminClient(args.namesrv, **credentials(args)) as admin:
        offsets = admin.reset_offset_by_time(args.group, args.topic, ts)
    rows = [
        {"broker": mq.broker_name, "queue_id": mq.queue_id, "offset": off}
        for mq, off in offsets.items()
    ]
    if args.json:
        print_json({"group": args.group, "topic": args.topic, "timestamp": ts, "offsets": rows})
        return 0
    print_table(
        f"group {args.group} on {args.topic} reset",
        ["broker", "queue", "offset"],
        ([r["broker"], r["queue_id"], r["offset"]] for r in rows),
        right=["queue", "offset"],
    )
    return 0


def add(
    sub: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser
) -> None:
    p = sub.add_parser("group", help="consumer group progress and offsets")
    gsub = p.add_subparsers(dest="group_command", metavar="ACTION")
    gsub.required = True
    c = gsub.add_parser("progress", parents=[common], help="lag per queue, retry topic included")
    c.add_argument("group")
    c.set_defaults(func=cmd_progress)
    c = gsub.add_parser(
        "connections", parents=[common], help="the group's online consumers and subscriptions"
    )
    c.add_argument("group")
    c.set_defaults(func=cmd_connections)
    c = gsub.add_parser(
        "reset-offset",
        parents=[common],
        help="move the group's offsets on a topic (online members follow)",
    )
    c.add_argument("group")
    c.add_argument("--topic", required=True)
    target = c.add_mutually_exclusive_group(required=True)
    target.add_argument("--timestamp", type=int, metavar="MS", help="ms since the epoch")
    target.add_argument("--to-time", metavar="ISO", help="e.g. 2024-05-01T12:00:00")
    target.add_argument("--to-end", action="store_true", help="skip everything stored so far")
    target.add_argument("--to-start", action="store_true", help="consume everything again")
    c.set_defaults(func=cmd_reset)
    group_ops_cmds.add_actions(gsub, common)
    group_table_cmds.add_actions(gsub, common)
