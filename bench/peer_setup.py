"""The e2e bench's peers, installed when missing: the servers from Debian (`apt-get install`),
their Python clients from PyPI at the versions pinned in pyproject.toml's `bench` extra.
`python -m bench.peer_setup` (what `make bench-peers` runs) installs all of them at once; the
bench calls the same functions before it starts a peer."""

from __future__ import annotations

import importlib
import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

PYPROJECT = Path(__file__).resolve().parent.parent / "pyproject.toml"

# binary -> (Debian package, where Debian puts it when not on PATH)
SERVERS: dict[str, tuple[str, str]] = {
    "redis-server": ("redis-server", "/usr/bin/redis-server"),
    "nats-server": ("nats-server", "/usr/sbin/nats-server"),
    # Debian's /usr/sbin/rabbitmq-server switches to the rabbitmq user; the script under
    # /usr/lib runs the node as the caller, on the directories the bench gives it.
    "rabbitmq-server": ("rabbitmq-server", "/usr/lib/rabbitmq/bin/rabbitmq-server"),
}
# Python module -> the name of its distribution in the bench extra
CLIENTS: dict[str, str] = {"nats": "nats-py", "aio_pika": "aio-pika"}


def _apt_install(package: str) -> None:
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    cmd = ["apt-get", "install", "-y", "-q", "--no-install-recommends", package]
    if subprocess.run(cmd, env=env, capture_output=True).returncode != 0:
        # A machine whose package lists were never fetched (or are stale) knows no package.
        subprocess.run(["apt-get", "update", "-q"], env=env, check=True, capture_output=True)
        subprocess.run(cmd, env=env, check=True, capture_output=True)


def server_binary(binary: str) -> str:
    """The path of a peer's server, installed from Debian first when missing."""
    package, fallback = SERVERS[binary]
    for _ in range(2):
        found = fallback if Path(fallback).exists() else shutil.which(binary)
        if found:
            return found
        _apt_install(package)
    raise RuntimeError(f"{binary} is not installed and apt-get install {package} did not provide it")


def bench_pins() -> dict[str, str]:
    """Distribution name -> its pinned requirement, from pyproject.toml's bench extra."""
    extras = tomllib.loads(PYPROJECT.read_text())["project"]["optional-dependencies"]
    return {req.split("==")[0].lower(): req for req in extras["bench"]}


def client_module(module: str) -> None:
    """Import a peer's Python client, installed from PyPI (the pinned version) first when
    missing."""
    try:
        importlib.import_module(module)
        return
    except ImportError:
        pass
    requirement = bench_pins()[CLIENTS[module]]
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", requirement], check=True)
    importlib.invalidate_caches()
    importlib.import_module(module)


def main() -> int:
    for binary in SERVERS:
        print(binary, server_binary(binary))
    for module in CLIENTS:
        client_module(module)
        print(module, bench_pins()[CLIENTS[module]])
    return 0


if __name__ == "__main__":
    sys.exit(main())
