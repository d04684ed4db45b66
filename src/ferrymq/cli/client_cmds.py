"""The client commands of `ferrymq`: topic, send, consume, group, msg, dlq.

`add_client_commands(subparsers)` is called by the entry point. Every command takes
--namesrv (default $FERRYMQ_NAMESRV, else 127.0.0.1:9876) and --json; exit codes are 0 ok,
1 a runtime failure (explained on stderr), 2 bad usage (argparse)."""

from __future__ import annotations

import argparse
import functools
import logging
import os
from collections.abc import Callable

from ..client.errors import ClientError
from ..common.ids import MessageIdError
from ..common.names import InvalidNameError
from ..common.props import PropertyError
from ..remoting import RemotingError
from . import dlq_cmds, group_cmds, message_cmds, topic_cmds
from .render import fail

DEFAULT_NAMESRV = "127.0.0.1:9876"

Command = Callable[[argparse.Namespace], int]


def _guarded(fn: Command) -> Command:
    """Turn the errors a user can cause or meet into a one-line message and exit code 1."""

    @functools.wraps(fn)
    def run(args: argparse.Namespace) -> int:
        if not getattr(args, "verbose", False):
            # The clients log their routine (rebalance, queue moves) at INFO; a command's
            # output is its result.
            logging.getLogger("ferrymq.client").setLevel(logging.WARNING)
        try:
            return fn(args)
        except (InvalidNameError, MessageIdError, PropertyError) as exc:
            return fail(str(exc))
        except ClientError as exc:
            return fail(str(exc))
        except RemotingError as exc:
            return fail(f"cannot reach {args.namesrv} or a broker: {exc}")
        except (TimeoutError, OSError, ValueError) as exc:
            return fail(str(exc) or type(exc).__name__)

    return run


def add_client_commands(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--namesrv",
        default=os.environ.get("FERRYMQ_NAMESRV", DEFAULT_NAMESRV),
        help="name server HOST:PORT (default $FERRYMQ_NAMESRV, else 127.0.0.1:9876)",
    )
    common.add_argument("--json", action="store_true", help="machine-readable output")
    before = set(subparsers.choices)
    for module in (topic_cmds, message_cmds, group_cmds, dlq_cmds):
        module.add(subparsers, common)
    for name in set(subparsers.choices) - before:
        _wrap(subparsers.choices[name])


def _wrap(parser: argparse.ArgumentParser) -> None:
    """Guard the func of this parser and of every nested sub-command."""
    func = parser.get_default("func")
    if func is not None:
        parser.set_defaults(func=_guarded(func))
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for child in action.choices.values():
                _wrap(child)
