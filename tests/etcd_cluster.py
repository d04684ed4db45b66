"""A real etcd cluster on loopback for the controller quorum tests: N members, each its own
`etcd` process (Debian's etcd-server; `make etcd` installs it) on fixed ports so a killed member
restarts where it was. Importable from every test directory as `etcd_cluster`."""

from __future__ import annotations

import contextlib
import shutil
import socket
import subprocess
from pathlib import Path

from ferrymq.namesrv.etcd import EtcdClient, EtcdUnavailableError
from waits import wait_until


def etcd_binary() -> str:
    path = shutil.which("etcd")
    if path is None:
        raise AssertionError("etcd is not installed: `make etcd` installs Debian's etcd-server")
    return path


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


class EtcdCluster:
    def __init__(self, base_dir: Path, members: int = 3) -> None:
        self.base_dir = base_dir
        self.names = [f"e{i}" for i in range(members)]
        self.client_ports = [_free_port() for _ in self.names]
        self.peer_ports = [_free_port() for _ in self.names]
        self.procs: list[subprocess.Popen[bytes] | None] = [None] * members
        self._initial = ",".join(f"{n}=http://127.0.0.1:{p}" for n, p in zip(self.names, self.peer_ports, strict=True))

    @property
    def endpoints(self) -> list[str]:
        return [f"http://127.0.0.1:{p}" for p in self.client_ports]

    def start(self, i: int) -> None:
        if self.procs[i] is not None and self.procs[i].poll() is None:  # type: ignore[union-attr]
            raise RuntimeError(f"etcd member {self.names[i]} is running")
        client, peer = f"http://127.0.0.1:{self.client_ports[i]}", f"http://127.0.0.1:{self.peer_ports[i]}"
        log = open(self.base_dir / f"{self.names[i]}.log", "ab")  # noqa: SIM115 - the process owns it
        with log:
            self.procs[i] = subprocess.Popen(
                [etcd_binary(), "--name", self.names[i], "--data-dir", str(self.base_dir / self.names[i]),
                 "--listen-client-urls", client, "--advertise-client-urls", client,
                 "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
                 "--initial-cluster", self._initial, "--initial-cluster-state", "new",
                 "--initial-cluster-token", f"ferrymq-{self.base_dir.name}", "--log-level", "warn"],
                stdout=log, stderr=log)

    def start_all(self, timeout: float = 60.0) -> EtcdCluster:
        self.base_dir.mkdir(parents=True, exist_ok=True)
        for i in range(len(self.names)):
            self.start(i)
        self.wait_healthy(timeout)
        return self

    def wait_healthy(self, timeout: float = 60.0) -> None:
        """Until a write through the cluster succeeds (it has a leader and a majority)."""
        client = EtcdClient(self.endpoints, timeout=1.0)

        def writable() -> bool:
            try:
                client.put_if("/health-probe", b"", mod_revision=0, guard_key="/none", guard_create_revision=0)
            except EtcdUnavailableError:
                return False
            return True

        wait_until(writable, timeout, "the etcd cluster to take a write", interval=0.1)

    def kill(self, i: int) -> None:
        proc = self.procs[i]
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait()

    def close(self) -> None:
        for i in range(len(self.names)):
            with contextlib.suppress(OSError):
                self.kill(i)
