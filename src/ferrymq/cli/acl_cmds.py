"""`ferrymq acl check FILE`: read a plain_acl.yml as the servers read it, before they reload it
(a file they cannot read leaves the old rules in force, so check first)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from ..acl import Account, load_rules
from ..acl.permission import perm_text
from .render import print_json, print_table, stdout

# Shown for both defaults of an admin that may do everything (its defaults are never consulted).
ALL_ALLOWED = "ALL (admin)"


def _perms(account: Account, groups: bool) -> list[str]:
    out = []
    for name, perm in sorted((account.resource_perms or {}).items()):
        is_group = name.startswith("%RETRY%")
        if is_group == groups:
            out.append(f"{name[len('%RETRY%'):] if is_group else name}={perm_text(perm)}")
    return out


def _allows_all(a: Account) -> bool:
    # An admin that lists no topic or group is never checked against its defaults (RocketMQ's
    # PlainPermissionChecker); one that lists some is, for the resources it does not list.
    return a.admin and a.resource_perms is None


def _account_json(a: Account) -> dict[str, Any]:
    return {
        "accessKey": a.access_key,
        "admin": a.admin,
        "allowsAll": _allows_all(a),
        "whiteRemoteAddress": a.white_remote_address.text or None,
        "defaultTopicPerm": perm_text(a.default_topic_perm),
        "defaultGroupPerm": perm_text(a.default_group_perm),
        "topicPerms": _perms(a, groups=False),
        "groupPerms": _perms(a, groups=True),
    }


def cmd_check(args: argparse.Namespace) -> int:
    rules = load_rules(Path(args.file))
    accounts = [_account_json(a) for a in rules.accounts.values()]
    white = [p.text for p in rules.global_white]
    if args.json:
        print_json({"file": args.file, "globalWhiteRemoteAddresses": white, "accounts": accounts})
        return 0
    stdout.print(f"{args.file}: valid; {len(accounts)} accounts; globally white-listed: "
                 f"{', '.join(white) or 'none'}", markup=False)
    print_table(
        "accounts",
        ["accessKey", "admin", "white address", "default topic", "default group", "topics", "groups"],
        ([a["accessKey"], "yes" if a["admin"] else "no", a["whiteRemoteAddress"] or "-",
          *([ALL_ALLOWED, ALL_ALLOWED] if a["allowsAll"] else [a["defaultTopicPerm"], a["defaultGroupPerm"]]),
          " ".join(a["topicPerms"]) or "-", " ".join(a["groupPerms"]) or "-"]
         for a in accounts),
    )
    return 0


def add(sub: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("acl", help="ACL files (plain_acl.yml)")
    asub = p.add_subparsers(dest="acl_command", metavar="ACTION")
    asub.required = True
    c = asub.add_parser("check", parents=[common],
                        help="read an ACL file as the servers do: its accounts, or why it is refused")
    c.add_argument("file", metavar="FILE")
    c.set_defaults(func=cmd_check)
