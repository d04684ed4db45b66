"""`ferrymq dlq list|resend`: inspect a group's dead-letter queue and send its messages back
through the group's retry path (the bookkeeping is client/dlq.py's): `list` shows what was not
re-driven yet, `resend` records what it sent, so nothing is re-driven twice."""

from __future__ import annotations

import argparse
from typing import Any

from ..client.admin import AdminClient
from ..client.dlq import pending, record_redriven, redrive_message
from ..client.message_json import preview
from ..client.producer import Producer
from ..common.message import MessageQueue
from ..common.names import dlq_topic, retry_topic
from .auth import credentials
from .failures import CommandFailed
from .render import fmt_time, print_json, print_table, progress, stdout

CLI_PRODUCER_GROUP = "ferrymq-cli-dlq"


def cmd_list(args: argparse.Namespace) -> int:
    with AdminClient(args.namesrv, **credentials(args)) as admin:
        entries, _ = pending(admin, args.group)
    if args.json:
        print_json([e.to_json() for e in entries])
        return 0
    if not entries:
        stdout.print(f"the dead-letter queue of {args.group} has nothing to re-drive", markup=False)
        return 0
    print_table(
        f"{dlq_topic(args.group)}: {len(entries)} message(s)",
        ["msg_id", "original topic", "reconsumed", "stored", "body"],
        (
            [
                e.msg.msg_id,
                e.original_topic or "-",
                e.msg.reconsume_times,
                fmt_time(e.msg.store_timestamp),
                preview(e.msg.body),
            ]
            for e in entries
        ),
        right=["reconsumed"],
    )
    return 0


def cmd_resend(args: argparse.Namespace) -> int:
    wanted = set(args.msg_id or [])  # argparse makes --msg-id and --all exclusive, one required
    with AdminClient(args.namesrv, **credentials(args)) as admin:
        entries, states = pending(admin, args.group)
        chosen = entries if args.all else [e for e in entries if e.matches(wanted)]
        if wanted and not args.all:
            missing = wanted - {
                i for e in chosen for i in (e.msg.msg_id, e.msg.offset_msg_id, e.original_msg_id)
            }
            if missing:
                raise CommandFailed(f"not pending in {dlq_topic(args.group)}: {', '.join(sorted(missing))}")
        sent: list[dict[str, Any]] = []
        done: set[tuple[MessageQueue, int]] = set()
        with (
            Producer(CLI_PRODUCER_GROUP, args.namesrv, **credentials(args)) as producer,
            progress("re-driving", len(chosen)) as bar,
        ):
            task = bar.add_task("resend", total=len(chosen))
            for entry in chosen:
                result = producer.send(redrive_message(args.group, entry))
                done.add((entry.mq, entry.msg.queue_offset))
                sent.append(
                    {
                        "msg_id": entry.msg.msg_id,
                        "original_msg_id": entry.original_msg_id,
                        "original_topic": entry.original_topic,
                        "offset_msg_id": result.offset_msg_id,
                    }
                )
                bar.update(task, advance=1)
        skipped = record_redriven(admin, states, done)
    if args.json:
        print_json({"group": args.group, "resent": sent, "held_back": skipped})
    else:
        stdout.print(f"re-drove {len(sent)} message(s) to {retry_topic(args.group)}", markup=False)
        if skipped:
            stdout.print(
                f"{skipped} re-driven message(s) lie behind older ones that were not, and this "
                "broker keeps no acknowledged ranges: they stay listed, and a later "
                "`dlq resend --all` sends them again",
                markup=False,
            )
    return 0


def add(
    sub: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser
) -> None:
    p = sub.add_parser("dlq", help="inspect and re-drive a group's dead-letter queue")
    dsub = p.add_subparsers(dest="dlq_command", metavar="ACTION")
    dsub.required = True
    c = dsub.add_parser("list", parents=[common], help="messages waiting in the DLQ")
    c.add_argument("group")
    c.set_defaults(func=cmd_list)
    c = dsub.add_parser(
        "resend", parents=[common], help="send DLQ messages back to the group's retry topic"
    )
    c.add_argument("group")
    which = c.add_mutually_exclusive_group(required=True)
    which.add_argument(
        "--msg-id",
        action="append",
        metavar="ID",
        help="a message to re-drive (msg_id, offset id or original id; repeatable)",
    )
    which.add_argument("--all", action="store_true", help="re-drive every pending message")
    c.set_defaults(func=cmd_resend)
