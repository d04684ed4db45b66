"""`ferrymq group list|update|delete`: the brokers' subscription group table (RocketMQ's
updateSubGroup / deleteSubGroup), per-group settings such as the retry count and whether the
group may consume."""

from __future__ import annotations

import argparse

from ..client.admin import AdminClient
from ..common.group_fields import GROUP_FIELDS
from .auth import credentials
from .failures import CommandFailed
from .render import print_json, print_table, stdout

# The settings `update` takes, as --flag names; the others stay as RocketMQ's tools set them.
_SETTABLE = ("consume_enable", "consume_broadcast_enable", "consume_from_min_enable",
             "retry_max_times", "retry_queue_nums", "which_broker_when_consume_slowly")
_KINDS = {ours: kind for ours, _, kind in GROUP_FIELDS}
_COLUMNS = ["group", "broker", "consume", "broadcast", "from min", "retry max", "retry queues",
            "slow broker id"]


def _bool(text: str) -> bool:
    lowered = text.strip().lower()
    if lowered not in ("true", "false"):
        raise argparse.ArgumentTypeError(f"expected true or false, got {text!r}")
    return lowered == "true"


def _row(s: dict[str, bool | int]) -> list[object]:
    return [s.get("consume_enable"), s.get("consume_broadcast_enable"), s.get("consume_from_min_enable"),
            s.get("retry_max_times"), s.get("retry_queue_nums"), s.get("which_broker_when_consume_slowly")]


def cmd_list(args: argparse.Namespace) -> int:
    with AdminClient(args.namesrv, **credentials(args)) as admin:
        rows = admin.subscription_groups(args.broker)
    if args.json:
        print_json([r.to_json() for r in rows])
        return 0
    if not rows:
        stdout.print("no subscription group on any broker", markup=False)
        return 0
    print_table(f"{len({r.group for r in rows})} subscription group(s)", _COLUMNS,
                ([r.group, r.broker, *_row(r.settings)] for r in rows),
                right=["retry max", "retry queues", "slow broker id"])
    return 0


def cmd_update(args: argparse.Namespace) -> int:
    changes = {k: getattr(args, k) for k in _SETTABLE if getattr(args, k) is not None}
    if not changes:
        raise CommandFailed("name at least one setting to change (see ferrymq group update --help)",
                            kind="UsageError", exit_code=2)
    with AdminClient(args.namesrv, **credentials(args)) as admin:
        rows = admin.update_subscription_group(args.group, changes, args.broker)
        missed = [] if args.broker else admin.masterless_brokers()
    if args.json:
        print_json({"group": args.group, "changed": changes, "brokers": [r.to_json() for r in rows],
                    "not_updated": missed})
        return 0
    print_table(f"group {args.group} updated", _COLUMNS, ([r.group, r.broker, *_row(r.settings)] for r in rows),
                right=["retry max", "retry queues", "slow broker id"])
    _note_missed(missed)
    return 0


def _note_missed(missed: list[str]) -> None:
    # A change goes to masters only (a slave copies its master's table): a broker group whose
    # master is down keeps what it had, and said nothing of it.
    if missed:
        stdout.print(f"not changed on {', '.join(missed)}: no master is registered (down?); run this again "
                     "once it is back", markup=False)


def cmd_delete(args: argparse.Namespace) -> int:
    with AdminClient(args.namesrv, **credentials(args)) as admin:
        brokers = admin.delete_subscription_group(args.group, args.broker)
        missed = [] if args.broker else admin.masterless_brokers()
    if args.json:
        print_json({"group": args.group, "brokers": brokers, "not_updated": missed})
        return 0
    stdout.print(f"subscription group {args.group} deleted on {', '.join(brokers) or 'no broker'} "
                 "(its offsets are kept)", markup=False)
    _note_missed(missed)
    return 0


def add_actions(gsub: argparse._SubParsersAction[argparse.ArgumentParser],
                common: argparse.ArgumentParser) -> None:
    where = "a broker name or master HOST:PORT (default: every master)"
    c = gsub.add_parser("list", parents=[common], help="the subscription groups and their settings")
    c.add_argument("--broker", help=where)
    c.set_defaults(func=cmd_list)
    c = gsub.add_parser("update", parents=[common],
                        help="create a subscription group or change its settings (others keep theirs)")
    c.add_argument("group")
    c.add_argument("--broker", help=where)
    for name in _SETTABLE:
        flag = "--" + name.replace("_", "-")
        if _KINDS[name] is bool:
            c.add_argument(flag, dest=name, type=_bool, metavar="true|false")
        else:
            c.add_argument(flag, dest=name, type=int, metavar="N")
    c.set_defaults(func=cmd_update)
    c = gsub.add_parser("delete", parents=[common], help="remove a subscription group (offsets are kept)")
    c.add_argument("group")
    c.add_argument("--broker", help=where)
    c.set_defaults(func=cmd_delete)
