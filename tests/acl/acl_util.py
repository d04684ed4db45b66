"""An ACL file for the server tests and a standalone server that checks it."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from conftest import Standalone, start_standalone
from ferrymq_cmd import run_ferrymq

ADMIN = {"access_key": "adminKey1", "secret_key": "adminSecret1"}
APP = {"access_key": "appKey01", "secret_key": "appSecret01"}

RULES = """
accounts:
  - accessKey: adminKey1
    secretKey: adminSecret1
    admin: true
  - accessKey: appKey01
    secretKey: appSecret01
    defaultTopicPerm: DENY
    defaultGroupPerm: SUB
    topicPerms: [acl-rw=PUB|SUB, acl-ro=SUB, acl-hot=SUB]
    groupPerms: [acl-banned-g=DENY]
"""


def write_rules(path: Path, text: str) -> None:
    """Replace the file in one step (a reader never sees half of it), with a new mtime even
    within the file system's timestamp granularity."""
    tmp = path.with_suffix(".tmp")
    tmp.write_text(text)
    old = path.stat().st_mtime_ns if path.exists() else 0
    os.replace(tmp, path)
    if path.stat().st_mtime_ns <= old:
        os.utime(path, ns=(old + 1_000_000, old + 1_000_000))


def start_acl_standalone(home: Path, rules: str = RULES) -> tuple[Standalone, Path]:
    acl = home / "plain_acl.yml"
    write_rules(acl, rules)
    config = home / "broker.toml"
    config.write_text("acl_reload_interval_ms = 50\n")
    return start_standalone(home / "store", "--config", str(config), "--acl-file", str(acl)), acl


def run_cli(server: Standalone, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """`ferrymq ARGS` as a user runs it against `server`, with no credentials in the environment
    unless `env` gives them."""
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("FERRYMQ_")}
    full_env.update(FERRYMQ_NAMESRV=server.namesrv, **(env or {}))
    return run_ferrymq(*args, env=full_env)
