"""ACL credentials of the client commands: --access-key/--secret-key, by default from
$FERRYMQ_ACCESS_KEY/$FERRYMQ_SECRET_KEY, given to every client a command makes."""

from __future__ import annotations

import argparse
import os
from typing import TypedDict


class CredentialOptions(TypedDict):
    access_key: str | None
    secret_key: str | None


def add_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--access-key", default=os.environ.get("FERRYMQ_ACCESS_KEY") or None,
                        help="ACL account to sign requests with (default $FERRYMQ_ACCESS_KEY)")
    parser.add_argument("--secret-key", default=os.environ.get("FERRYMQ_SECRET_KEY") or None,
                        help="its secret key (default $FERRYMQ_SECRET_KEY)")


def credentials(args: argparse.Namespace) -> CredentialOptions:
    """Keyword arguments for AdminClient, Producer and the consumers."""
    return {"access_key": getattr(args, "access_key", None), "secret_key": getattr(args, "secret_key", None)}
