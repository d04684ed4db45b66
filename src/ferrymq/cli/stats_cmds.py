"""`ferrymq stats all` (mqadmin's statsAll: per topic and consuming group, lag, in/out TPS
and the last day's messages) and `ferrymq broker consume-stats` (brokerConsumeStats: every
group's lag on one broker)."""

from __future__ import annotations

import argparse

from ..client.admin import AdminClient
from .auth import credentials
from .render import fmt_time, print_json, print_table, stdout


def cmd_stats_all(args: argparse.Namespace) -> int:
    with AdminClient(args.namesrv, **credentials(args)) as admin:
        rows = admin.stats_all(active_only=args.active)
    if args.json:
        print_json([r.to_json() for r in rows])
        return 0
    if not rows:
        stdout.print("no topic" + (" had traffic in the last day" if args.active else ""),
                     markup=False)
        return 0
    print_table(
        "traffic per topic and group (TPS: last minute; msgs: last 24 h)",
        ["topic", "group", "lag", "in tps", "out tps", "in msgs", "out msgs"],
        ([r.topic, r.group or "-", r.lag if r.group else "-", f"{r.in_tps:.2f}",
          f"{r.out_tps:.2f}" if r.group else "-", r.in_msgs_24h,
          r.out_msgs_24h if r.group else "-"] for r in rows),
        right=["lag", "in tps", "out tps", "in msgs", "out msgs"],
    )
    return 0


def cmd_consume_stats(args: argparse.Namespace) -> int:
    with AdminClient(args.namesrv, **credentials(args)) as admin:
        stats = admin.broker_consume_stats(args.broker, order=args.order)
    if args.json:
        print_json(stats.to_json())
        return 0
    print_table(
        f"broker {stats.broker} ({stats.addr}): total lag {stats.total_diff}",
        ["group", "topic", "queue", "broker offset", "consumer offset", "lag", "last consumed",
         "consume tps"],
        ([s.group, s.topic, q.queue_id, q.broker_offset, q.consumer_offset, q.lag,
          fmt_time(q.last_timestamp), s.consume_tps]
         for s in stats.stats for q in s.queues),
        right=["queue", "broker offset", "consumer offset", "lag", "consume tps"],
    )
    return 0


def add(
    sub: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser
) -> None:
    p = sub.add_parser("stats", help="traffic figures of every topic and group")
    ssub = p.add_subparsers(dest="stats_command", metavar="ACTION")
    ssub.required = True
    c = ssub.add_parser("all", parents=[common],
                        help="per topic and group: lag, in/out TPS, messages in the last day")
    c.add_argument("--active", action="store_true",
                   help="only topics and groups with traffic in the last day")
    c.set_defaults(func=cmd_stats_all)


def add_broker_actions(
    bsub: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser
) -> None:
    """`broker consume-stats`, under the `broker` command (cluster_cmds.add_broker_actions)."""
    c = bsub.add_parser("consume-stats", parents=[common],
                        help="every group's lag on every topic it consumes on one broker")
    c.add_argument("broker", help="broker name (its master) or HOST:PORT")
    c.add_argument("--order", action="store_true",
                   help="only groups that lock queues there (orderly consumers)")
    c.set_defaults(func=cmd_consume_stats)
