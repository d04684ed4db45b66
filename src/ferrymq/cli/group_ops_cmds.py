"""`ferrymq group status|clone-offset`: each online member's running info (mqadmin's
consumerStatus) and copying a group's offsets to another group (cloneGroupOffset). Added to
the `group` command by group_cmds."""

from __future__ import annotations

import argparse

from ..client.admin import AdminClient
from .auth import credentials
from .render import fmt_time, print_json, print_table, stdout


def cmd_status(args: argparse.Namespace) -> int:
    with AdminClient(args.namesrv, **credentials(args)) as admin:
        members = admin.consumer_status(args.group)
    if args.json:
        print_json({"group": args.group, "clients": [m.to_json() for m in members]})
        return 0
    if not members:
        stdout.print(f"no consumer of group {args.group} is online", markup=False)
        return 0
    for m in members:
        if m.error is not None:
            stdout.print(f"client {m.client_id}: not answered: {m.error}", markup=False)
            continue
        props = m.properties
        stdout.print(
            f"client {m.client_id}: {props.get('messageModel', '-')} "
            f"{props.get('consumeType', '-')}, orderly {props.get('consumeOrderly', '-')}, "
            f"{props.get('consumeThreads', '-')} thread(s)", markup=False)
        print_table(None, ["topic", "expression"], sorted(m.subscriptions.items()))
        print_table(
            None,
            ["topic", "broker", "queue", "cached msgs", "cached MiB", "commit offset", "locked",
             "last pull", "last consume"],
            ([q.topic, q.broker, q.queue_id, q.cached_msg_count, q.cached_msg_size_mib,
              q.commit_offset, "yes" if q.locked else "no", fmt_time(q.last_pull_timestamp),
              fmt_time(q.last_consume_timestamp)] for q in m.queues),
            right=["queue", "cached msgs", "cached MiB", "commit offset"],
        )
        print_table(
            None,
            ["topic", "pull tps", "pull rt ms", "consume ok tps", "failed tps", "consume rt ms",
             "failed (1 h)"],
            ([f.topic, f.pull_tps, f.pull_rt, f.consume_ok_tps, f.consume_failed_tps,
              f.consume_rt, f.consume_failed_msgs] for f in m.figures),
            right=["pull tps", "pull rt ms", "consume ok tps", "failed tps", "consume rt ms",
                   "failed (1 h)"],
        )
    return 0


def cmd_clone(args: argparse.Namespace) -> int:
    with AdminClient(args.namesrv, **credentials(args)) as admin:
        cloned = admin.clone_group_offset(args.src, args.dst, args.topic, offline=args.offline)
    rows = [{"broker": b, "queue_id": q, "offset": o}
            for b, per in cloned.items() for q, o in per.items()]
    if args.json:
        print_json({"src": args.src, "dst": args.dst, "topic": args.topic,
                    "brokers": sorted(cloned), "offsets": rows})
        return 0
    if not rows:
        stdout.print(f"group {args.src} has no offset on {args.topic} to copy "
                     f"(brokers: {', '.join(sorted(cloned))})", markup=False)
        return 0
    print_table(
        f"offsets of {args.src} on {args.topic} copied to {args.dst}",
        ["broker", "queue", "offset"],
        ([r["broker"], r["queue_id"], r["offset"]] for r in rows),
        right=["queue", "offset"],
    )
    return 0


def add_actions(
    gsub: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser
) -> None:
    c = gsub.add_parser(
        "status", parents=[common],
        help="each online member's subscriptions, queues held, cache sizes, TPS and failures")
    c.add_argument("group")
    c.set_defaults(func=cmd_status)
    c = gsub.add_parser(
        "clone-offset", parents=[common],
        help="give group DST the offsets group SRC has on a topic")
    c.add_argument("src", metavar="SRC")
    c.add_argument("dst", metavar="DST")
    c.add_argument("--topic", required=True)
    c.add_argument("--offline", action="store_true",
                   help="copy even when SRC is online and does not subscribe to the topic")
    c.set_defaults(func=cmd_clone)
