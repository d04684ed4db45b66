"""`ferrymq broker wipe-write-perm|add-write-perm` (mqadmin wipeWritePerm / addWritePerm: take
a broker out of writes for maintenance and back), `ferrymq cluster send-rt` (mqadmin
checkMsgSendRT: the round trip of probe sends to every broker), `ferrymq cluster
elect-master` (mqadmin electMaster, controller mode) and `ferrymq topic clean-unused` (mqadmin
cleanUnusedTopic)."""

from __future__ import annotations

import argparse
import statistics

from ..client.admin import AdminClient
from ..client.errors import BrokerError
from ..common.codes import ResponseCode
from ..common.names import SELF_TEST_TOPIC
from .auth import credentials
from .failures import CommandFailed
from .render import print_json, print_table, stdout


def cmd_wipe_write_perm(args: argparse.Namespace) -> int:
    with AdminClient(args.namesrv, **credentials(args)) as admin:
        counts = admin.wipe_write_perm(args.broker)
    return _report_perm(args, counts, wiped=True)


def cmd_add_write_perm(args: argparse.Namespace) -> int:
    with AdminClient(args.namesrv, **credentials(args)) as admin:
        counts = admin.add_write_perm(args.broker)
    return _report_perm(args, counts, wiped=False)


def _report_perm(args: argparse.Namespace, counts: dict[str, int], *, wiped: bool) -> int:
    if args.json:
        print_json({"broker": args.broker, "writable": not wiped, "namesrvs": counts})
        return 0
    what = "taken out of writes" if wiped else "takes writes again"
    for addr, n in counts.items():
        stdout.print(f"broker {args.broker} {what} on name server {addr} ({n} topic(s))", markup=False)
    return 0


def cmd_send_rt(args: argparse.Namespace) -> int:
    if args.count < 1 or args.size < 1:
        raise CommandFailed("--count and --size must be at least 1", kind="UsageError", exit_code=2)
    with AdminClient(args.namesrv, **credentials(args)) as admin:
        rows = admin.send_round_trips(args.topic, count=args.count, size=args.size)
    if args.json:
        print_json([r.to_json() for r in rows])
    else:
        print_table(
            f"send round trip to topic {args.topic}",
            ["broker", "queue", "result", "rt ms"],
            ([r.broker, r.queue_id, "ok" if r.ok else f"failed: {r.error}", f"{r.rt_ms:.2f}"] for r in rows),
            right=["queue", "rt ms"],
        )
        by_broker: dict[str, list[float]] = {}
        for r in rows:
            if r.ok:
                by_broker.setdefault(r.broker, []).append(r.rt_ms)
        for name, rts in sorted(by_broker.items()):
            stdout.print(f"{name}: avg {statistics.fmean(rts):.2f} ms, max {max(rts):.2f} ms "
                         f"over {len(rts)} send(s)", markup=False)
    failed = [r for r in rows if not r.ok]
    return 1 if failed else 0


def cmd_elect_master(args: argparse.Namespace) -> int:
    with AdminClient(args.namesrv, **credentials(args)) as admin:
        try:
            elected = admin.elect_master(args.broker, args.broker_id, controller=args.controller)
        except BrokerError as exc:
            if exc.code != ResponseCode.REQUEST_CODE_NOT_SUPPORTED:
                raise
            raise CommandFailed(
                f"no controller answers at {args.controller or args.namesrv}: elect-master needs controller "
                "mode (a name server run with --enable-controller; --controller names it)") from None
    if args.json:
        print_json(elected.to_json())
    else:
        stdout.print(f"broker group {elected.broker}: replica {elected.master_id} ({elected.master_addr}) is "
                     f"the master at epoch {elected.epoch}, in sync: "
                     f"{', '.join(map(str, elected.sync_state_set))}", markup=False)
    return 0


def cmd_clean_unused(args: argparse.Namespace) -> int:
    with AdminClient(args.namesrv, **credentials(args)) as admin:
        cleaned = admin.clean_unused_topics(broker=args.broker, cluster=args.cluster)
    if args.json:
        print_json([c.to_json() for c in cleaned])
        return 0
    print_table(None, ["broker", "bid", "addr", "topics cleaned"],
                ([c.broker, c.broker_id, c.addr, ", ".join(c.topics) or "-"] for c in cleaned), right=["bid"])
    return 0


def add_topic_actions(
    tsub: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser
) -> None:
    c = tsub.add_parser("clean-unused", parents=[common],
                        help="delete the consume queues of topics a broker has no configuration for")
    c.add_argument("--broker", help="only this broker group (name; default every broker)")
    c.add_argument("--cluster", help="only the broker groups of this cluster")
    c.set_defaults(func=cmd_clean_unused)


def add_broker_perm_actions(
    bsub: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser
) -> None:
    c = bsub.add_parser("wipe-write-perm", parents=[common],
                        help="take a broker out of writes in the name servers' routes (maintenance)")
    c.add_argument("broker", help="broker name")
    c.set_defaults(func=cmd_wipe_write_perm)
    c = bsub.add_parser("add-write-perm", parents=[common],
                        help="give a broker taken out of writes its write permission back")
    c.add_argument("broker", help="broker name")
    c.set_defaults(func=cmd_add_write_perm)


def add_cluster_actions(
    csub: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser
) -> None:
    c = csub.add_parser("send-rt", parents=[common],
                        help="time probe sends to every broker (mqadmin checkMsgSendRT)")
    c.add_argument("--topic", default=SELF_TEST_TOPIC,
                   help=f"topic to probe (default {SELF_TEST_TOPIC}, which every broker serves)")
    c.add_argument("--count", type=int, default=3, help="sends per broker (default 3)")
    c.add_argument("--size", type=int, default=128, help="body bytes of each probe (default 128)")
    c.set_defaults(func=cmd_send_rt)
    c = csub.add_parser("elect-master", parents=[common],
                        help="make a replica the master of its broker group (controller mode)")
    c.add_argument("broker", help="broker group (broker name)")
    c.add_argument("--broker-id", type=int, required=True, help="the replica to elect (alive and in sync)")
    c.add_argument("--controller", help="the controller's HOST:PORT (default: the name servers)")
    c.set_defaults(func=cmd_elect_master)
