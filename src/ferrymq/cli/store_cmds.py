"""`ferrymq store damage|skip`: records the brokers' stores found damaged at rest, and skipping
a queue range an operator gives up on."""

from __future__ import annotations

import argparse

from ..client.admin import AdminClient
from .auth import credentials
from .failures import CommandFailed
from .render import print_json, print_table, stdout


def cmd_damage(args: argparse.Namespace) -> int:
    with AdminClient(args.namesrv, **credentials(args)) as admin:
        damage = admin.store_damage(args.broker)
    if args.json:
        print_json(damage.to_json())
        return 0
    if not damage.records and not damage.skipped:
        stdout.print("no damaged record found", markup=False)
        return 0
    if damage.records:
        print_table(
            "damaged records",
            ["broker", "segment", "offset", "size", "topic", "queue", "queue offset", "found by",
             "reason"],
            ([r.broker, r.segment, r.phys_offset, r.size, r.topic or "-",
              r.queue_id if r.queue_id >= 0 else "-",
              r.queue_offset if r.queue_offset >= 0 else "-", r.found_by, r.reason]
             for r in damage.records),
            right=["offset", "size", "queue", "queue offset"],
        )
    if damage.skipped:
        print_table(
            "skipped ranges",
            ["broker", "topic", "queue", "from", "to (exclusive)"],
            ([s.broker, s.topic, s.queue_id, s.from_offset, s.to_offset] for s in damage.skipped),
            right=["queue", "from", "to (exclusive)"],
        )
    return 0


def cmd_skip(args: argparse.Namespace) -> int:
    if not 0 <= args.from_offset < args.to_offset:
        raise CommandFailed(f"need 0 <= FROM < TO, got {args.from_offset} and {args.to_offset}",
                            kind="UsageError", exit_code=2)
    with AdminClient(args.namesrv, **credentials(args)) as admin:
        brokers = admin.skip_store_range(args.topic, args.queue, args.from_offset,
                                         args.to_offset)
    result = {"topic": args.topic, "queue_id": args.queue, "from": args.from_offset,
              "to": args.to_offset, "brokers": brokers}
    if args.json:
        print_json(result)
    else:
        stdout.print(f"{args.topic} queue {args.queue}: offsets {args.from_offset} to "
                     f"{args.to_offset - 1} skipped on {', '.join(brokers)}", markup=False)
    return 0


def add(
    sub: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser
) -> None:
    p = sub.add_parser("store", help="damage found in the brokers' stores")
    ssub = p.add_subparsers(dest="store_command", metavar="ACTION")
    ssub.required = True
    c = ssub.add_parser("damage", parents=[common],
                        help="records found damaged (by reads, the scrub, the tail check)")
    c.add_argument("--broker", help="one broker (name or HOST:PORT); default every broker")
    c.set_defaults(func=cmd_damage)
    c = ssub.add_parser("skip", parents=[common],
                        help="let consumers pass over a queue range (damaged records there)")
    c.add_argument("topic")
    c.add_argument("queue", type=int)
    c.add_argument("from_offset", type=int, metavar="FROM", help="first offset skipped")
    c.add_argument("to_offset", type=int, metavar="TO", help="first offset after the range")
    c.set_defaults(func=cmd_skip)
