"""The client commands of `ferrymq`: topic, send, consume, group, msg, dlq, cluster, store,
dashboard.

`add_client_commands(subparsers)` is called by the entry point. Every command takes
--namesrv (default $FERRYMQ_NAMESRV, else 127.0.0.1:9876) and --json; exit codes are 0 ok,
1 a runtime failure, 2 bad usage, the same with and without --json (see failures.py for
how a failure is printed)."""

from __future__ import annotations

import argparse
import functools
import logging
import os
from collections.abc import Callable

from ..common.errors import FerryMQError
from . import (
    acl_cmds,
    auth,
    cluster_cmds,
    dashboard_cmds,
    dlq_cmds,
    group_cmds,
    message_cmds,
    producer_cmds,
    stats_cmds,
    store_cmds,
    topic_cmds,
)
from .failures import CommandFailed, describe, report
from .tls_flags import add_tls_client_flags, apply_tls_client_flags

DEFAULT_NAMESRV = "127.0.0.1:9876"

Command = Callable[[argparse.Namespace], int]


def operation_of(args: argparse.Namespace) -> str:
    """The command as typed, without its arguments: "topic create", "send"."""
    words = [str(args.command)]
    action = getattr(args, f"{args.command}_command", None)
    if action:
        words.append(str(action))
    return " ".join(words)


def _guarded(fn: Command) -> Command:
    """Turn the errors a user can cause or meet into one message and exit code 1."""

    @functools.wraps(fn)
    def run(args: argparse.Namespace) -> int:
        if not getattr(args, "verbose", False):
            # The clients log their routine (rebalance, queue moves) at INFO; a command's
            # output is its result.
            logging.getLogger("ferrymq.client").setLevel(logging.WARNING)
        apply_tls_client_flags(args)
        try:
            return fn(args)
        except (CommandFailed, FerryMQError, TimeoutError, OSError, ValueError) as exc:
            return report(describe(exc, operation_of(args), str(getattr(args, "namesrv", "") or "")),
                          as_json=bool(args.json))

    return run


def common_options() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--namesrv",
        default=os.environ.get("FERRYMQ_NAMESRV", DEFAULT_NAMESRV),
        help="name server HOST:PORT (default $FERRYMQ_NAMESRV, else 127.0.0.1:9876)",
    )
    common.add_argument(
        "--json",
        action="store_true",
        help="machine-readable output; a failure prints {\"error\": {...}} on stdout",
    )
    auth.add_options(common)
    add_tls_client_flags(common)
    return common


def add_client_commands(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    common = common_options()
    before = set(subparsers.choices)
    for module in (topic_cmds, message_cmds, group_cmds, dlq_cmds, cluster_cmds, store_cmds, dashboard_cmds,
                   acl_cmds, producer_cmds, stats_cmds):
        module.add(subparsers, common)
    for name in set(subparsers.choices) - before:
        wrap(subparsers.choices[name])


def wrap(parser: argparse.ArgumentParser) -> None:
    """Guard the func of this parser and of every nested sub-command."""
    func = parser.get_default("func")
    if func is not None:
        parser.set_defaults(func=_guarded(func))
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for child in action.choices.values():
                wrap(child)
