"""`ferrymq cluster list`, `ferrymq broker status|config get|config update`: the brokers, their
runtime state and the configuration keys that can change while they run (mqadmin's
clusterList, brokerStatus, getBrokerConfig and updateBrokerConfig)."""

from __future__ import annotations

import argparse

from ..client.admin import AdminClient
from ..client.admin_results import BrokerStatus
from . import stats_cmds
from .auth import credentials
from .failures import CommandFailed
from .operator_cmds import add_broker_perm_actions, add_cluster_actions
from .render import fmt_time, print_json, print_table, stdout


def _ms(value: str) -> str:
    return fmt_time(int(value)) if value.isdigit() else "-"


def _first(rates: str | None) -> str:
    """The 10-second figure of RocketMQ's "10s 1min 10min" rate triple."""
    return rates.split()[0] if rates else "-"


def _today(runtime: dict[str, str], kind: str) -> str:
    now, morning = runtime.get(f"msg{kind}TotalTodayNow"), runtime.get(f"msg{kind}TotalTodayMorning")
    if now is None or morning is None:
        return "-"
    return str(int(now) - int(morning))


def _replication(b: BrokerStatus) -> list[str]:
    """ha addr, in sync, lag, ha conn: a master's side or a slave's, "-" where it has none."""
    r = b.replication
    if b.broker_role == "SLAVE" or r.connected is not None:
        lag = "-" if r.lag_bytes is None else f"{r.lag_bytes} B / {r.lag_ms if r.lag_ms is not None else '-'} ms"
        conn = "-" if r.connected is None else ("yes" if r.connected else "no")
        return ["-", "-", lag, conn]
    in_sync = "-" if r.in_sync_slaves is None else (",".join(map(str, r.in_sync_slaves)) or "none")
    return [r.ha_addr or "-", in_sync, "-", "-"]


def cmd_cluster_list(args: argparse.Namespace) -> int:
    with AdminClient(args.namesrv, **credentials(args)) as admin:
        brokers = admin.cluster_list()
    if args.json:
        print_json([b.to_json() for b in brokers])
        return 0
    if not brokers:
        stdout.print("no broker is registered with the name server", markup=False)
        return 0
    print_table(
        None,
        ["cluster", "broker", "bid", "role", "addr", "version", "in tps", "out tps",
         "in today", "out today", "disk ratio", "booted", "ha addr", "in sync", "lag", "ha conn",
         "error"],
        (
            [
                b.cluster,
                b.broker,
                b.broker_id,
                b.broker_role or b.role,
                b.addr,
                b.runtime.get("brokerVersionDesc", "-"),
                _first(b.runtime.get("putTps")),
                _first(b.runtime.get("getTransferedTps")),
                _today(b.runtime, "Put"),
                _today(b.runtime, "Get"),
                b.runtime.get("commitLogDiskRatio", "-"),
                _ms(b.runtime.get("bootTimestamp", "")),
                *_replication(b),
                b.error or "",
            ]
            for b in brokers
        ),
        right=["bid", "in tps", "out tps", "in today", "out today", "disk ratio", "lag"],
    )
    return 0


def cmd_broker_status(args: argparse.Namespace) -> int:
    with AdminClient(args.namesrv, **credentials(args)) as admin:
        status = admin.broker_status(args.broker)
    if args.json:
        print_json(status.to_json())
        return 0
    print_table(
        f"broker {status.broker} ({status.role} at {status.addr}, cluster {status.cluster})",
        ["key", "value"],
        sorted(status.runtime.items()),
    )
    return 0


def cmd_config_get(args: argparse.Namespace) -> int:
    with AdminClient(args.namesrv, **credentials(args)) as admin:
        config = admin.broker_config(args.broker)
    if args.keys:
        unknown = [k for k in args.keys if k not in config]
        if unknown:
            raise CommandFailed(f"broker {args.broker} has no configuration key {', '.join(unknown)}")
        config = {k: config[k] for k in args.keys}
    if args.json:
        print_json(config)
        return 0
    print_table(f"broker {args.broker} configuration", ["key", "value"], sorted(config.items()))
    return 0


def parse_pairs(items: list[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise CommandFailed(f"expected KEY=VALUE, got {item!r}", kind="UsageError", exit_code=2)
        out[key.strip()] = value.strip()
    return out


def cmd_config_update(args: argparse.Namespace) -> int:
    values = parse_pairs(args.pairs)
    with AdminClient(args.namesrv, **credentials(args)) as admin:
        addrs = admin.update_broker_config(values, args.broker)
        # A broker started without --config has no file to write the change to: it holds
        # until that broker restarts, which the operator must hear now, not after the restart.
        unkept = [a for a in addrs if not admin.broker_config(a).get("brokerConfigPath")]
    if args.json:
        print_json({"updated": values, "brokers": addrs, "not_persisted": unkept})
        return 0
    changes = ", ".join(f"{k}={v}" for k, v in values.items())
    stdout.print(f"updated {changes} on {', '.join(addrs)}", markup=False)
    if unkept:
        stdout.print(f"not kept across a restart on {', '.join(unkept)}: started without --config, so there is "
                     "no file to write it to (put it in the broker's config file too)", markup=False)
    return 0


def add(
    sub: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser
) -> None:
    p = sub.add_parser("cluster", help="the brokers of every cluster")
    csub = p.add_subparsers(dest="cluster_command", metavar="ACTION")
    csub.required = True
    c = csub.add_parser(
        "list", parents=[common], help="every broker (slaves too) with its runtime state"
    )
    c.set_defaults(func=cmd_cluster_list)
    add_cluster_actions(csub, common)


def add_broker_actions(
    broker: argparse.ArgumentParser, common: argparse.ArgumentParser
) -> list[argparse.ArgumentParser]:
    """`broker status|config` under the `broker` command, which without an action runs a
    broker. Returns the action parsers (they need the client commands' error handling)."""
    bsub = broker.add_subparsers(dest="broker_command", metavar="ACTION")
    bsub.required = False
    c = bsub.add_parser("status", parents=[common], help="a broker's runtime state")
    c.add_argument("broker", help="broker name (its master) or HOST:PORT")
    c.set_defaults(func=cmd_broker_status)
    cfg = bsub.add_parser("config", help="read or change a broker's configuration")
    fsub = cfg.add_subparsers(dest="config_command", metavar="ACTION")
    fsub.required = True
    c = fsub.add_parser("get", parents=[common], help="the broker's configuration keys")
    c.add_argument("broker", help="broker name (its master) or HOST:PORT")
    c.add_argument("keys", nargs="*", metavar="KEY", help="only these keys")
    c.set_defaults(func=cmd_config_get)
    c = fsub.add_parser(
        "update",
        parents=[common],
        help="change keys that can change at runtime (others are refused); a broker started with "
        "--config writes the change into that file",
    )
    c.add_argument("pairs", nargs="+", metavar="KEY=VALUE")
    c.add_argument("--broker", help="one broker (name or HOST:PORT); default every master")
    c.set_defaults(func=cmd_config_update)
    add_broker_perm_actions(bsub, common)
    stats_cmds.add_broker_actions(bsub, common)
    return list(bsub.choices.values())
