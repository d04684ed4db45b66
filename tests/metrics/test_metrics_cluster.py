"""`ferrymq namesrv --metrics-port` and `ferrymq broker --metrics-port` as separate processes, in
controller mode with one slave: the name server exports its routes and the controller's view,
the master its slaves' lag, the slave its own."""

from __future__ import annotations

from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families
from test_metrics_endpoint import FAST_PRODUCER, Samples, get, scrape, value

from ferrymq import AdminClient, Message, Producer
from ferrymq.embedded import start_cluster
from waits import wait_until

FAST_BROKER: dict[str, str | int | float | bool] = {
    "register_broker_interval_ms": 500,
    "ha_slave_sync_interval_ms": 300,
    "ha_heartbeat_interval_ms": 200,
}


def test_namesrv_controller_master_and_slave_metrics(tmp_path: Path) -> None:
    metrics = ("--metrics-port", "0")
    with start_cluster(tmp_path, slaves=1, role="ASYNC_MASTER", controller=True, broker_config=FAST_BROKER,
                       broker_extra=metrics, namesrv_extra=metrics) as cluster:
        ns = cluster.namesrv
        master = cluster.wait_master()
        (slave,) = [b for b in cluster.brokers if b is not master]
        for proc in (ns, master, slave):
            assert proc.ready["metrics"].startswith("127.0.0.1:"), proc.ready

        def ns_view() -> Samples | None:
            s = scrape(ns.ready["metrics"])
            alive = [v for (n, _), v in s.items() if n == "ferrymq_controller_replica_alive"]
            return s if value(s, "ferrymq_namesrv_brokers", broker="broker-a") == 2 and alive == [1, 1] else None

        samples = wait_until(ns_view, timeout=30, what="both replicas registered and alive")
        assert value(samples, "ferrymq_controller_master_id", broker="broker-a") == master.broker_id
        assert value(samples, "ferrymq_controller_epoch", broker="broker-a") >= 1
        assert value(samples, "ferrymq_namesrv_broker_registered", broker_id="0", addr=master.addr) == 1
        # A bare name server has no broker families.
        assert not any(n.startswith("rocketmq_broker") for n, _ in samples)

        with AdminClient(ns.addr) as admin:
            admin.create_topic("mc", 1)
        with Producer("p-mc", ns.addr, **FAST_PRODUCER) as producer:
            for i in range(20):
                producer.send(Message("mc", f"m{i}".encode()))

        def caught_up() -> Samples | None:
            s = scrape(master.ready["metrics"])
            rows = [v for (n, _), v in s.items() if n == "ferrymq_replication_slave_lag_bytes"]
            return s if rows == [0] and value(s, "rocketmq_messages_in_total", topic="mc") == 20 else None

        m = wait_until(caught_up, timeout=30, what="the master to see its slave caught up")
        assert value(m, "ferrymq_replication_slave_in_sync", slave_id=str(slave.broker_id)) == 1
        assert value(m, "rocketmq_broker_commitlog_diff", broker="broker-a") == 0
        assert value(m, "ferrymq_broker_role", role="ASYNC_MASTER") == 1

        def slave_view() -> Samples | None:
            s = scrape(slave.ready["metrics"])
            ok = value(s, "ferrymq_replication_connected") == 1 and value(s, "ferrymq_replication_lag_bytes") == 0
            return s if ok else None

        s = wait_until(slave_view, timeout=30, what="the slave connected and caught up")
        assert value(s, "ferrymq_broker_role", role="SLAVE") == 1
        assert value(s, "ferrymq_store_commitlog_max_offset") == value(m, "ferrymq_store_commitlog_max_offset")


def test_metrics_parse_as_prometheus_text(tmp_path: Path) -> None:
    """The whole exposition of a broker with traffic parses, and every family has help text."""
    with start_cluster(tmp_path, slaves=0, role="ASYNC_MASTER", broker_config=FAST_BROKER,
                       broker_extra=("--metrics-port", "0")) as cluster:
        broker = cluster.static_master()
        with Producer("p-parse", cluster.namesrv.addr, **FAST_PRODUCER) as producer:
            producer.send(Message("parse-topic", b"x"))
        status, _, text = get(broker.ready["metrics"])
        assert status == 200
        families = list(text_string_to_metric_families(text))
        ours = [f for f in families if f.name.startswith(("rocketmq_", "ferrymq_"))]
        assert len(ours) > 40
        assert all(f.documentation for f in ours)
        assert "metrics" not in cluster.namesrv.ready  # only where the flag was given
