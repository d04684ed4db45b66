"""`ferrymq namesrv config get|update` (mqadmin getNamesrvConfig / updateNamesrvConfig) and
`ferrymq namesrv kv get|put|delete` (the name servers' KV config, e.g. ORDER_TOPIC_CONFIG):
actions of the `namesrv` command, which without one runs a name server."""

from __future__ import annotations

import argparse

from ..client.admin import AdminClient
from .auth import credentials
from .cluster_cmds import parse_pairs
from .failures import CommandFailed
from .render import print_json, print_table, stdout


def cmd_config_get(args: argparse.Namespace) -> int:
    with AdminClient(args.namesrv, **credentials(args)) as admin:
        configs = admin.namesrv_config()
    if args.keys:
        for addr, config in configs.items():
            unknown = [k for k in args.keys if k not in config]
            if unknown:
                raise CommandFailed(f"name server {addr} has no configuration key {', '.join(unknown)}")
            configs[addr] = {k: config[k] for k in args.keys}
    if args.json:
        print_json(configs)
        return 0
    for addr, config in configs.items():
        print_table(f"name server {addr} configuration", ["key", "value"], sorted(config.items()))
    return 0


def cmd_config_update(args: argparse.Namespace) -> int:
    values = parse_pairs(args.pairs)
    with AdminClient(args.namesrv, **credentials(args)) as admin:
        addrs = admin.update_namesrv_config(values)
    if args.json:
        print_json({"updated": values, "namesrvs": addrs})
        return 0
    changes = ", ".join(f"{k}={v}" for k, v in values.items())
    stdout.print(f"updated {changes} on name server {', '.join(addrs)}", markup=False)
    # A name server has no configuration file to write it to (README): say it before a
    # restart shows it.
    stdout.print("in memory only: a name server restarted goes back to its command line", markup=False)
    return 0


def cmd_kv_get(args: argparse.Namespace) -> int:
    with AdminClient(args.namesrv, **credentials(args)) as admin:
        if args.key is None:
            table = admin.kv_list(args.namespace)
            if args.json:
                print_json({"namespace": args.namespace, "table": table})
            else:
                print_table(f"namespace {args.namespace}", ["key", "value"], sorted(table.items()))
            return 0
        value = admin.kv_get(args.namespace, args.key)
    if value is None:
        raise CommandFailed(f"the name server has no key {args.key} in namespace {args.namespace}",
                            kind="NotFound")
    if args.json:
        print_json({"namespace": args.namespace, "key": args.key, "value": value})
    else:
        stdout.print(value, markup=False)
    return 0


def cmd_kv_put(args: argparse.Namespace) -> int:
    with AdminClient(args.namesrv, **credentials(args)) as admin:
        addrs = admin.kv_put(args.namespace, args.key, args.value)
    if args.json:
        print_json({"namespace": args.namespace, "key": args.key, "value": args.value, "namesrvs": addrs})
    else:
        stdout.print(f"{args.namespace} {args.key}={args.value} on name server {', '.join(addrs)}",
                     markup=False)
    return 0


def cmd_kv_delete(args: argparse.Namespace) -> int:
    with AdminClient(args.namesrv, **credentials(args)) as admin:
        addrs = admin.kv_delete(args.namespace, args.key)
    if args.json:
        print_json({"namespace": args.namespace, "key": args.key, "deleted": True, "namesrvs": addrs})
    else:
        stdout.print(f"{args.namespace} {args.key} deleted on name server {', '.join(addrs)}", markup=False)
    return 0


def add_namesrv_actions(
    namesrv: argparse.ArgumentParser, common: argparse.ArgumentParser
) -> list[argparse.ArgumentParser]:
    """The actions under `namesrv`; returns their parsers (they need the client commands'
    error handling)."""
    nsub = namesrv.add_subparsers(dest="namesrv_command", metavar="ACTION")
    nsub.required = False
    cfg = nsub.add_parser("config", help="read or change the name servers' configuration")
    fsub = cfg.add_subparsers(dest="config_command", metavar="ACTION")
    fsub.required = True
    c = fsub.add_parser("get", parents=[common], help="every name server's configuration keys")
    c.add_argument("keys", nargs="*", metavar="KEY", help="only these keys")
    c.set_defaults(func=cmd_config_get)
    c = fsub.add_parser("update", parents=[common],
                        help="change keys that can change at runtime, on every name server")
    c.add_argument("pairs", nargs="+", metavar="KEY=VALUE")
    c.set_defaults(func=cmd_config_update)
    kv = nsub.add_parser("kv", help="the name servers' KV config (namespace, key, value)")
    ksub = kv.add_subparsers(dest="kv_command", metavar="ACTION")
    ksub.required = True
    c = ksub.add_parser("get", parents=[common], help="a key's value, or every key of the namespace")
    c.add_argument("namespace", help="e.g. ORDER_TOPIC_CONFIG")
    c.add_argument("key", nargs="?")
    c.set_defaults(func=cmd_kv_get)
    c = ksub.add_parser("put", parents=[common], help="set a key on every name server")
    c.add_argument("namespace")
    c.add_argument("key")
    c.add_argument("value")
    c.set_defaults(func=cmd_kv_put)
    c = ksub.add_parser("delete", parents=[common], help="delete a key on every name server")
    c.add_argument("namespace")
    c.add_argument("key")
    c.set_defaults(func=cmd_kv_delete)
    return list(nsub.choices.values())
