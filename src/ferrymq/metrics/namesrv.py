"""What a name server exports: its route table and, in controller mode, each broker group's
elected master, epoch and replicas. Read at scrape time on the server's loop."""

from __future__ import annotations

from typing import TYPE_CHECKING

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.metrics_core import Metric

if TYPE_CHECKING:
    from ..namesrv import NameServer


class NamesrvCollector:
    def __init__(self, namesrv: NameServer) -> None:
        self.namesrv = namesrv

    async def collect(self) -> list[Metric]:
        ns = self.namesrv
        node = ns.address
        reg = ns.registry
        brokers = GaugeMetricFamily("ferrymq_namesrv_brokers", "Broker addresses registered, per cluster and "
                                    "broker name", labels=["namesrv", "cluster", "broker"])
        broker_addr = GaugeMetricFamily("ferrymq_namesrv_broker_registered", "1 per registered broker address",
                                        labels=["namesrv", "cluster", "broker", "broker_id", "addr"])
        since = GaugeMetricFamily("ferrymq_namesrv_broker_last_update_age_ms", "Time since the broker's last "
                                  "registration", labels=["namesrv", "addr"])
        now = reg._clock()
        with reg._lock:
            for bname, data in sorted(reg.brokers.items()):
                brokers.add_metric([node, data.cluster, bname], len(data.broker_addrs))
                for bid, addr in sorted(data.broker_addrs.items()):
                    broker_addr.add_metric([node, data.cluster, bname, str(bid), addr], 1)
            for addr, live in sorted(reg.live.items()):
                since.add_metric([node, addr], max(0, now - live.last_update_ms))
            topic_count = len(reg.topic_queues)
            clusters = len(reg.clusters)
        topics = GaugeMetricFamily("ferrymq_namesrv_topics", "Topics with a route", labels=["namesrv"])
        topics.add_metric([node], topic_count)
        cluster_fam = GaugeMetricFamily("ferrymq_namesrv_clusters", "Clusters registered", labels=["namesrv"])
        cluster_fam.add_metric([node], clusters)
        out: list[Metric] = [brokers, broker_addr, since, topics, cluster_fam]
        if ns.controller is not None:
            out += self._controller(node)
        return out

    def _controller(self, node: str) -> list[Metric]:
        assert self.namesrv.controller is not None
        controller = self.namesrv.controller.controller
        labels = ["namesrv", "cluster", "broker"]
        epoch = GaugeMetricFamily("ferrymq_controller_epoch", "The group's master epoch", labels=labels)
        master = GaugeMetricFamily("ferrymq_controller_master_id", "The group's elected master's broker id "
                                   "(-1: none)", labels=labels)
        sync_set = GaugeMetricFamily("ferrymq_controller_sync_state_set_size", "Replicas in the group's sync "
                                     "state set", labels=labels)
        replica_alive = GaugeMetricFamily("ferrymq_controller_replica_alive", "1 when the replica's heartbeat "
                                          "is within the lease", labels=[*labels, "broker_id", "addr"])
        for bname in sorted(controller.groups):
            info = controller.replica_info(bname)
            values = [node, str(info["clusterName"]), bname]
            epoch.add_metric(values, int(info["epoch"]))
            master.add_metric(values, int(info["masterId"]))
            sync_set.add_metric(values, len(info["syncStateSet"]))
            for r in info["replicas"]:
                replica_alive.add_metric([*values, str(r["brokerId"]), str(r["addr"])], 1 if r["alive"] else 0)
        return [epoch, master, sync_set, replica_alive]
