"""A name server run with --acl-file and brokers as separate processes: a broker registers only
when it signs with an admin account of the name server's file (broker config keys access_key /
secret_key); one with a non-admin account or no credentials stays out of the routes."""

from __future__ import annotations

from pathlib import Path

from acl_util import ADMIN, APP, RULES, write_rules

from ferrymq import AdminClient, Message, Producer
from ferrymq.embedded.cluster import start_cluster
from ferrymq.embedded.process import ServerProcess
from waits import wait_until


def _broker(tmp_path: Path, name: str, namesrv: str, creds: str) -> ServerProcess:
    config = tmp_path / f"{name}.toml"
    config.write_text(f'broker_name = "{name}"\n{creds}')
    return ServerProcess(name, lambda: ["broker", "--namesrv", namesrv, "--broker-port", "0", "--grpc-port", "-1",
                                        "--ha-port", "0", "--store-dir", str(tmp_path / name), "--config",
                                        str(config)], tmp_path / f"{name}.log", "broker")


def _log(proc: ServerProcess) -> str:
    return proc.log_path.read_text(errors="replace")


def test_name_server_registers_only_brokers_signing_as_an_admin(tmp_path: Path) -> None:
    acl = tmp_path / "plain_acl.yml"
    write_rules(acl, RULES)
    ns = ServerProcess("namesrv", lambda: ["namesrv", "--port", "0", "--acl-file", str(acl)], tmp_path / "ns.log",
                       "namesrv")
    ns.start()
    brokers = [
        _broker(tmp_path, "broker-none", ns.ready["namesrv"], ""),
        _broker(tmp_path, "broker-app", ns.ready["namesrv"], 'access_key = "appKey01"\nsecret_key = "appSecret01"\n'),
        _broker(tmp_path, "broker-ok", ns.ready["namesrv"], 'accessKey = "adminKey1"\nsecretKey = "adminSecret1"\n'),
    ]
    try:
        for b in brokers:
            b.start()
        none, app, ok = brokers
        assert "carries no AccessKey" in _log(none)
        assert ("refused the registration: ACL: register broker (REGISTER_BROKER, request code 103) needs an admin "
                "account; accessKey=appKey01") in _log(app)
        with AdminClient(ns.ready["namesrv"]) as admin:
            assert set(admin.cluster_brokers()) == {"broker-ok"}
        assert "refused" not in _log(ok)
        # Stopping unregisters with the same credentials.
        ok.stop()
        with AdminClient(ns.ready["namesrv"]) as admin:
            wait_until(lambda: not admin.cluster_brokers(), 10, what="broker-ok to unregister")
    finally:
        for b in brokers:
            b.kill()
        ns.kill()


def test_controller_mode_group_with_acl_everywhere(tmp_path: Path) -> None:
    """Name server (with the controller) and both replicas check the file; the replicas sign
    their registrations, controller heartbeats and the slave's metadata copies as the admin
    account: a master is elected, the slave follows it, and an application's sends replicate."""
    acl = tmp_path / "plain_acl.yml"
    write_rules(acl, RULES)
    admin_keys = {"access_key": "adminKey1", "secret_key": "adminSecret1"}
    with start_cluster(tmp_path / "group", controller=True, slaves=1, namesrv_extra=["--acl-file", str(acl)],
                       broker_config={"acl_file": str(acl), **admin_keys}) as cluster:
        master = cluster.wait_master()
        slave = next(b for b in cluster.brokers if b is not master)
        with AdminClient(cluster.namesrv.addr, **ADMIN) as admin:
            admin.create_topic("acl-rw", 2)
            with Producer("acl-group-pg", cluster.namesrv.addr, **APP) as producer:
                for i in range(10):
                    producer.send(Message("acl-rw", f"r{i}".encode()))

            def replicated() -> bool:
                statuses = {s.broker_id: s for s in admin.cluster_list()}
                master_status = statuses.get(0)
                slave_status = statuses.get(slave.broker_id)
                return (master_status is not None and slave_status is not None and slave_status.error is None
                        and slave.broker_id in (master_status.replication.in_sync_slaves or ())
                        and slave_status.replication.lag_bytes == 0)

            wait_until(replicated, 30, what="the slave to be registered, in sync and caught up")
        for broker in cluster.brokers:
            assert "refused" not in _log(broker), _log(broker)[-2000:]
