"""A broker group on loopback in one call: a name server (optionally running the controller)
and one master with N slaves, each its own `ferrymq` process (docs/replication.md).

Static roles: the master is broker id 0 with `role`, the slaves ids 1..N as SLAVE. Controller
mode: every broker gets `--controller NAMESRV` and replica ids 1..N+1, `role` saying whether the
master waits for its slaves; replica 1 is started first and awaited as master, so it is the
first master. Every process keeps its store and ports across restarts.

Several name servers (`namesrvs`): every broker registers with all of them, and in controller
mode each runs a controller; with `namesrv_extra` giving them `--controller-etcd` they form a
quorum (docs/replication.md, "Three controllers")."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from types import TracebackType

from ..common.paths import StrPath, as_path
from .process import ServerProcess

ROLES = ("ASYNC_MASTER", "SYNC_MASTER", "SLAVE")
ConfigValue = str | int | float | bool


def _port(addr: str | None) -> str:
    return "0" if not addr else addr.rsplit(":", 1)[1]


def _toml_value(value: ConfigValue) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def write_broker_toml(path: Path, values: Mapping[str, ConfigValue]) -> Path:
    path.write_text("".join(f"{k} = {_toml_value(v)}\n" for k, v in values.items()), encoding="utf-8")
    return path


class NamesrvProcess(ServerProcess):
    def __init__(self, base_dir: Path, *, controller: bool, lease_ms: int, extra: Sequence[str],
                 timeout: float, index: int = 0) -> None:
        suffix = f"-{index}" if index else ""
        self.controller_dir = base_dir / f"controller{suffix}"
        self._controller = controller
        self._lease_ms = lease_ms
        self._extra = tuple(extra)
        name = f"namesrv{suffix}"
        super().__init__(name, self._command, base_dir / "logs" / f"{name}.log", "namesrv", timeout=timeout)

    @property
    def addr(self) -> str:
        return self.ready["namesrv"]

    def _command(self) -> list[str]:
        argv = ["namesrv", "--port", _port(self.ready.get("namesrv"))]
        if self._controller:
            argv += ["--enable-controller", "--controller-dir", str(self.controller_dir),
                     "--controller-lease-ms", str(self._lease_ms)]
        return [*argv, *self._extra]


class BrokerProcess(ServerProcess):
    """One replica. `master_ha_addr`, when given, is asked at every start for the address this
    broker (a static slave) copies from; a test puts a proxy there."""

    def __init__(self, cluster: LocalCluster, broker_id: int, role: str,
                 master_ha_addr: Callable[[BrokerProcess], str] | None, extra: Sequence[str],
                 timeout: float) -> None:
        self.cluster = cluster
        self.broker_name = cluster.broker_name
        self.broker_id = broker_id
        self.role = role
        self.store_dir = cluster.base_dir / f"{cluster.broker_name}-{broker_id}"
        self._master_ha_addr = master_ha_addr
        self._extra = tuple(extra)
        name = f"{cluster.broker_name}-{broker_id}"
        super().__init__(name, self._command, cluster.base_dir / "logs" / f"{name}.log", "broker", timeout=timeout)

    @property
    def addr(self) -> str:
        return self.ready["broker"]

    @property
    def ha_addr(self) -> str:
        return self.ready["ha"]

    def _command(self) -> list[str]:
        c = self.cluster
        argv = [
            "broker", "--namesrv", c.namesrv_addrs, "--store-dir", str(self.store_dir),
            "--broker-name", self.broker_name, "--broker-id", str(self.broker_id), "--role", self.role,
            "--broker-port", _port(self.ready.get("broker")), "--ha-port", _port(self.ready.get("ha")),
            "--grpc-port", _port(self.ready.get("grpc")),
        ]
        if c.config_file is not None:
            argv += ["--config", str(c.config_file)]
        if c.controller:
            argv += ["--controller", c.namesrv_addrs]
        if self._master_ha_addr is not None:
            argv += ["--master-ha-addr", self._master_ha_addr(self)]
        return [*argv, *self._extra]


class LocalCluster:
    """The processes of one broker group; a context manager that stops them all at its end."""

    def __init__(self, base_dir: Path, *, broker_name: str, controller: bool, namesrv: NamesrvProcess,
                 config_file: Path | None, more_namesrvs: Sequence[NamesrvProcess] = ()) -> None:
        self.base_dir = base_dir
        self.broker_name = broker_name
        self.controller = controller
        self.namesrv = namesrv
        self.namesrvs = [namesrv, *more_namesrvs]
        self.config_file = config_file
        self.brokers: list[BrokerProcess] = []

    # --- who is who ---------------------------------------------------------------------------
    @property
    def processes(self) -> list[ServerProcess]:
        return [*self.namesrvs, *self.brokers]

    @property
    def namesrv_addrs(self) -> str:
        """Every name server, `;`-separated, as brokers and clients are given them."""
        return ";".join(ns.addr for ns in self.namesrvs)

    def broker(self, broker_id: int) -> BrokerProcess:
        for b in self.brokers:
            if b.broker_id == broker_id:
                return b
        raise KeyError(f"no broker id {broker_id} in {self.broker_name}")

    def by_addr(self, addr: str) -> BrokerProcess | None:
        return next((b for b in self.brokers if b.ready.get("broker") == addr), None)

    def registered_master(self) -> BrokerProcess | None:
        """The broker the name server lists as id 0 of the group, if any and ours."""
        from ..client.admin import AdminClient

        with AdminClient(self.namesrv_addrs, timeout=2.0) as admin:
            addr = admin.brokers().get(self.broker_name)
        return None if addr is None else self.by_addr(addr)

    def wait_master(self, timeout: float = 30.0, *, not_addr: str | None = None) -> BrokerProcess:
        """Poll the name server until a running broker of ours is the group's master (and not
        `not_addr`: waiting for a failover)."""
        deadline = time.monotonic() + timeout
        last: Exception | None = None
        while True:
            try:
                master = self.registered_master()
                if master is not None and master.running and master.addr != not_addr:
                    return master
            except Exception as exc:  # a name server restarting answers nothing for a moment
                last = exc
            if time.monotonic() > deadline:
                raise TimeoutError(f"no master of {self.broker_name} within {timeout}s (last error: {last})")
            time.sleep(0.05)

    def static_master(self) -> BrokerProcess:
        return self.brokers[0]

    def slaves(self) -> list[BrokerProcess]:
        """Static roles: the brokers started as SLAVE."""
        return [b for b in self.brokers if b.role == "SLAVE"]

    # --- faults and repair --------------------------------------------------------------------
    def heal(self) -> None:
        """Resume what is paused and start what is down, name server first."""
        for p in self.processes:
            if p.paused:
                p.resume()
            elif not p.running:
                p.start()

    def crash_all(self) -> None:
        for p in reversed(self.processes):
            p.kill()

    def close(self, timeout: float = 20.0) -> None:
        """Stop every process (brokers first, each with SIGTERM); one that does not stop in
        time is killed."""
        for p in reversed(self.processes):
            try:
                p.stop(timeout)
            except Exception:
                p.kill()

    def __enter__(self) -> LocalCluster:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    def __iter__(self) -> Iterator[ServerProcess]:
        return iter(self.processes)


def start_cluster(
    base_dir: StrPath,
    *,
    slaves: int = 1,
    role: str = "SYNC_MASTER",
    controller: bool = False,
    broker_name: str = "broker-a",
    controller_lease_ms: int = 3000,
    broker_config: Mapping[str, ConfigValue] | None = None,
    broker_extra: Sequence[str] = (),
    namesrv_extra: Sequence[str] = (),
    master_ha_addr: Callable[[BrokerProcess], str] | None = None,
    timeout: float = 30.0,
    namesrvs: int = 1,
) -> LocalCluster:
    """Start the name server, then the master, then the slaves, each awaited until ready (in
    controller mode, until the first replica is registered as master). `broker_config` is
    written to a TOML file every broker reads (in controller mode with the controller's lease
    as `controller_lease_ms` unless it says otherwise); `master_ha_addr` is used by static
    slaves."""
    if role not in ROLES[:2]:
        raise ValueError(f"role must be ASYNC_MASTER or SYNC_MASTER, not {role!r}")
    if slaves < 0:
        raise ValueError("slaves must be >= 0")
    base_dir = as_path(base_dir)
    base_dir.mkdir(parents=True, exist_ok=True)
    values = dict(broker_config or {})
    if controller:
        # A master fences itself after the lease the controller replaces it after; a longer
        # broker lease would let a frozen old master take writes after the election.
        values.setdefault("controller_lease_ms", controller_lease_ms)
    config_file = write_broker_toml(base_dir / "broker.toml", values) if values else None
    if namesrvs < 1:
        raise ValueError("namesrvs must be >= 1")
    ns, *more = [NamesrvProcess(base_dir, controller=controller, lease_ms=controller_lease_ms,
                                extra=namesrv_extra, timeout=timeout, index=i) for i in range(namesrvs)]
    cluster = LocalCluster(base_dir, broker_name=broker_name, controller=controller, namesrv=ns,
                           config_file=config_file, more_namesrvs=more)
    try:
        for one in cluster.namesrvs:
            one.start()
        ids = range(1, slaves + 2) if controller else range(slaves + 1)
        for n, broker_id in enumerate(ids):
            broker_role = role if controller or n == 0 else "SLAVE"
            ha = None if controller or n == 0 else master_ha_addr
            broker = BrokerProcess(cluster, broker_id, broker_role, ha, broker_extra, timeout)
            cluster.brokers.append(broker)
            broker.start()
            if n == 0:
                cluster.wait_master(timeout)
    except BaseException:
        cluster.close()
        raise
    return cluster
