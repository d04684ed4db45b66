"""What a broker exports: read from its state at scrape time (on the loop), so sends and pulls
pay only the counters in broker/stats.py. Names and labels follow rocketmq-exporter where it has
the figure, RocketMQ 5's own broker metrics for counters, and ferrymq_* otherwise
(docs/metrics.md lists them all)."""

from __future__ import annotations

import asyncio
import contextlib
import shutil
from dataclasses import dataclass
from typing import TYPE_CHECKING

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.metrics_core import Metric

from .. import __version__
from ..common.histogram import Histogram
from ..common.names import DLQ_GROUP_TOPIC_PREFIX, RETRY_GROUP_TOPIC_PREFIX
from .clients import client_families
from .rates import RateWindow

if TYPE_CHECKING:
    from ..broker.controller import Broker

# rocketmq-exporter's label sets.
BROKER_LABELS = ["cluster", "brokerIP", "broker"]
TOPIC_LABELS = ["cluster", "broker", "topic"]
GROUP_LABELS = ["cluster", "broker", "topic", "group"]
DIFF_LABELS = ["group", "topic", "countOfOnlineConsumers", "msgModel"]
RUNTIME_LABELS = ["cluster", "brokerIP", "brokerHost", "des", "boottime", "broker_version"]
# RocketMQ 5's broker metrics.
NODE_LABELS = ["cluster", "node_type", "node_id"]
# ferrymq's own.
QUEUE_LABELS = ["cluster", "broker", "topic", "group", "queueid"]
OWN_LABELS = ["cluster", "broker"]

# Queues (or topics) read between two yields to the loop: a scrape of a broker with thousands of
# lagging queues must not stall its sends and pulls (a lagging queue costs two small reads).
SLICE = 200

# rocketmq_brokeruntime_pmdt_* ranges: (name, upper bound in seconds); the histogram's buckets
# include every bound.
PMDT: tuple[tuple[str, float | None], ...] = (
    ("0ms", 0.001), ("0to10ms", 0.01), ("10to50ms", 0.05), ("50to100ms", 0.1), ("100to200ms", 0.2),
    ("200to500ms", 0.5), ("500to1s", 1.0), ("1to2s", 2.0), ("2to3s", 3.0), ("3to4s", 4.0), ("4to5s", 5.0),
    ("5to10s", 10.0), ("10stomore", None),
)

# Java's MessageModel ordinals, which rocketmq-exporter puts in msgModel.
_MSG_MODEL = {"BROADCASTING": "0", "CLUSTERING": "1"}


@dataclass(frozen=True, slots=True)
class QueueLag:
    topic: str
    group: str
    queue_id: int
    broker_offset: int
    consumer_offset: int
    lag_ms: int  # now - store time of the first message not consumed; 0 when caught up


class BrokerCollector:
    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        self._topic_rates: RateWindow[str] = RateWindow()
        self._group_rates: RateWindow[tuple[str, str]] = RateWindow()

    # --- reading the state -----------------------------------------------------------------
    async def queue_lags(self) -> list[QueueLag]:
        """Every (topic, group) with committed offsets or an online subscription, per queue
        (the same figures as GET_CONSUME_STATS)."""
        b = self.broker
        store = b.store
        assert store is not None
        pairs: set[tuple[str, str]] = set()
        for key in b.offsets.table:
            topic, sep, group = key.rpartition("@")
            if sep:
                pairs.add((topic, group))
        for group, info in b.clients.consumers.items():
            for topic in info.subscriptions:
                pairs.add((topic, group))
        now = b.now_ms()
        out: list[QueueLag] = []
        for topic, group in sorted(pairs):
            cfg = b.topics.get(topic)
            if cfg is None:
                continue
            for qid in range(cfg.read_queue_nums):
                broker_offset = store.reads.get_max_offset(topic, qid)
                consumer_offset = max(b.offsets.query(group, topic, qid), 0)
                lag_ms = 0
                if consumer_offset < broker_offset:
                    first = max(consumer_offset, store.reads.get_min_offset(topic, qid))
                    with contextlib.suppress(Exception):
                        stored = store.reads.get_store_time(topic, qid, first)
                        if stored > 0:
                            lag_ms = max(0, now - stored)
                out.append(QueueLag(topic, group, qid, broker_offset, consumer_offset, lag_ms))
                if len(out) % SLICE == 0:
                    await asyncio.sleep(0)
                    if b.store is None:  # stopped meanwhile
                        return out
        return out

    # --- the families ----------------------------------------------------------------------
    async def collect(self) -> list[Metric]:
        b = self.broker
        if b.store is None:
            return []
        cluster, name = b.config.broker_cluster_name, b.config.broker_name
        families: list[Metric] = []
        families += self._broker_families(cluster, name)
        families += await self._topic_families(cluster, name)
        families += await self._group_families(cluster, name)
        families += self._store_families(cluster, name)
        families += self._replication_families(cluster, name)
        families += await client_families(b)
        return families

    def _broker_families(self, cluster: str, name: str) -> list[Metric]:
        b = self.broker
        stats = b.stats
        put_rates, got_rates = stats.current_rates()
        ip = b.addr
        tps = GaugeMetricFamily("rocketmq_broker_tps", "Messages stored per second (last minute)",
                                labels=BROKER_LABELS)
        tps.add_metric([cluster, ip, name], put_rates[1])
        qps = GaugeMetricFamily("rocketmq_broker_qps", "Messages delivered per second (last minute)",
                                labels=BROKER_LABELS)
        qps.add_metric([cluster, ip, name], got_rates[1])
        out: list[Metric] = [tps, qps, *self._runtime_families(cluster, put_rates, got_rates)]
        conns = b.server.stats()
        c = GaugeMetricFamily("ferrymq_connections", "Open remoting connections", labels=OWN_LABELS)
        c.add_metric([cluster, name], conns.connections)
        held = GaugeMetricFamily("ferrymq_pull_held_requests", "Pull requests held by long polling",
                                 labels=OWN_LABELS)
        held.add_metric([cluster, name], b.waiters.pending() if b.waiters else 0)
        topics = GaugeMetricFamily("ferrymq_topics", "Topics on this broker", labels=OWN_LABELS)
        topics.add_metric([cluster, name], len(b.topics.topics))
        online = GaugeMetricFamily("ferrymq_consumer_groups_online", "Consumer groups with a client online",
                                   labels=OWN_LABELS)
        online.add_metric([cluster, name], len(b.clients.consumers))
        out += [c, held, topics, online,
                _histogram("ferrymq_send_latency_seconds",
                           "Send request handling time, arrival to answer (store, flush and slave waits included)",
                           [cluster, name], stats.send_latency),
                _histogram("ferrymq_pull_latency_seconds",
                           "Pull request handling time for pulls that found messages (a long-poll hold excluded)",
                           [cluster, name], stats.pull_latency)]
        return out

    def _runtime_families(self, cluster: str, put_rates: list[float], got_rates: list[float]) -> list[Metric]:
        """rocketmq-exporter's rocketmq_brokeruntime_* (GET_BROKER_RUNTIME_INFO's figures), the
        ones its overview dashboard charts and ferrymq has."""
        b = self.broker
        stats, store = b.stats, b.store
        assert store is not None
        ip = b.addr
        rt = [cluster, ip, ip.split(":")[0], "", str(b.started_ms), __version__]
        out: list[Metric] = []

        def runtime(metric: str, doc: str, value: float) -> None:
            g = GaugeMetricFamily(f"rocketmq_brokeruntime_{metric}", doc, labels=RUNTIME_LABELS)
            g.add_metric(rt, value)
            out.append(g)

        # RocketMQ's "today now" is the running total; today's count is now - this morning.
        runtime("msg_put_total_today_now", "Messages stored since the broker started", stats.put.total)
        runtime("msg_gettotal_today_now", "Messages delivered since the broker started", stats.got.total)
        runtime("msg_puttotal_todaymorning", "The stored total when today began", stats.put.today_morning)
        runtime("msg_gettotal_todaymorning", "The delivered total when today began", stats.got.today_morning)
        runtime("msg_puttotal_yesterdaymorning", "The stored total when yesterday began", stats.put.yesterday_morning)
        runtime("msg_gettotal_yesterdaymorning", "The delivered total when yesterday began",
                stats.got.yesterday_morning)
        for window, p, g in zip(("10", "60", "600"), put_rates, got_rates, strict=True):
            runtime(f"put_tps{window}", f"Messages stored per second over {window} s", p)
            runtime(f"gettransfered_tps{window}", f"Messages delivered per second over {window} s", g)
        stored_bytes = sum(row[1] for row in stats.topic_put.values())
        stored_msgs = sum(row[0] for row in stats.topic_put.values())
        runtime("put_message_size_total", "Bytes stored since the broker started", stored_bytes)
        runtime("put_message_average_size", "Mean stored message size in bytes",
                stored_bytes / stored_msgs if stored_msgs else 0.0)
        ratio = store.retention.disk_ratio()
        runtime("commitlog_disk_ratio", "Used fraction of the commit log's disk", ratio)
        runtime("consumequeue_disk_ratio", "Used fraction of the consume queues' disk (the same store)", ratio)
        runtime("commitlog_maxoffset", "Commit-log max physical offset", store.max_phy_offset)
        runtime("commitlog_minoffset", "Commit-log min physical offset", store.min_phy_offset)
        runtime("remain_howmanydata_toflush", "Commit-log bytes not yet flushed",
                max(0, store.max_phy_offset - store.flushed_offset))
        # Consume queues are written in the same put as the log: nothing waits to be dispatched.
        runtime("dispatch_behind_bytes", "Commit-log bytes not yet in the consume queues", 0)
        with contextlib.suppress(OSError):
            usage = shutil.disk_usage(store.root)
            runtime("commitlogdir_capacity_total", "Size of the commit log's disk", usage.total)
            runtime("commitlogdir_capacity_free", "Free bytes on the commit log's disk", usage.free)
        # RocketMQ's put time distribution (pmdt): sends per handling-time range since start,
        # from the send latency histogram.
        counts = dict(zip(stats.send_latency.bounds, stats.send_latency.counts, strict=False))
        over = stats.send_latency.counts[-1]
        previous = 0.0
        for label, bound in PMDT:
            if bound is None:
                runtime(f"pmdt_{label}", "Sends that took 10 s or more", over)
                continue
            n = sum(c for upper, c in counts.items() if previous < upper <= bound)
            runtime(f"pmdt_{label}", f"Sends handled in {label}", n)
            previous = bound
        return out

    async def _topic_families(self, cluster: str, name: str) -> list[Metric]:
        b = self.broker
        store = b.store
        assert store is not None
        node = [cluster, "broker", name]
        puts = b.stats.topic_put
        rates = self._topic_rates.rates(puts)
        tps = GaugeMetricFamily("rocketmq_producer_tps", "Messages stored per second per topic (last minute)",
                                labels=TOPIC_LABELS)
        size = GaugeMetricFamily("rocketmq_producer_message_size",
                                 "Bytes stored per second per topic (last minute)", labels=TOPIC_LABELS)
        msgs_in = CounterMetricFamily("rocketmq_messages_in", "Messages stored per topic",
                                      labels=[*NODE_LABELS, "topic"])
        bytes_in = CounterMetricFamily("rocketmq_throughput_in", "Bytes stored per topic (as stored: headers included)",
                                       labels=[*NODE_LABELS, "topic"])
        for topic, (n, nbytes) in sorted(puts.items()):
            rate = rates.get(topic, (0.0, 0.0))
            tps.add_metric([cluster, name, topic], rate[0])
            size.add_metric([cluster, name, topic], rate[1])
            msgs_in.add_metric([*node, topic], n)
            bytes_in.add_metric([*node, topic], nbytes)
        offset = GaugeMetricFamily("rocketmq_producer_offset", "Sum of the topic's queue max offsets",
                                   labels=TOPIC_LABELS)
        retry = GaugeMetricFamily("rocketmq_topic_retry_offset", "Sum of the retry topic's queue max offsets",
                                  labels=TOPIC_LABELS)
        dlq = GaugeMetricFamily("rocketmq_topic_dlq_offset", "Sum of the group's dead-letter queue max offsets",
                                labels=["cluster", "broker", "group"])
        for n, (topic, qids) in enumerate(sorted(store.reads.queues().items()), 1):
            if n % SLICE == 0:
                await asyncio.sleep(0)
            total = sum(store.reads.get_max_offset(topic, q) for q in qids)
            if topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
                retry.add_metric([cluster, name, topic], total)
            elif topic.startswith(DLQ_GROUP_TOPIC_PREFIX):
                dlq.add_metric([cluster, name, topic[len(DLQ_GROUP_TOPIC_PREFIX):]], total)
            else:
                offset.add_metric([cluster, name, topic], total)
        return [tps, size, msgs_in, bytes_in, offset, retry, dlq]

    async def _group_families(self, cluster: str, name: str) -> list[Metric]:
        b = self.broker
        node = [cluster, "broker", name]
        got = b.stats.group_got
        rates = self._group_rates.rates(got)
        tps = GaugeMetricFamily("rocketmq_consumer_tps", "Messages delivered per second per topic and group "
                                "(last minute)", labels=GROUP_LABELS)
        size = GaugeMetricFamily("rocketmq_consumer_message_size", "Bytes delivered per second per topic and group "
                                 "(last minute)", labels=GROUP_LABELS)
        msgs_out = CounterMetricFamily("rocketmq_messages_out", "Messages delivered per topic and group",
                                       labels=[*NODE_LABELS, "topic", "consumer_group"])
        bytes_out = CounterMetricFamily("rocketmq_throughput_out", "Bytes delivered per topic and group",
                                        labels=[*NODE_LABELS, "topic", "consumer_group"])
        for (topic, group), (n, nbytes) in sorted(got.items()):
            rate = rates.get((topic, group), (0.0, 0.0))
            tps.add_metric([cluster, name, topic, group], rate[0])
            size.add_metric([cluster, name, topic, group], rate[1])
            msgs_out.add_metric([*node, topic, group], n)
            bytes_out.add_metric([*node, topic, group], nbytes)
        back = CounterMetricFamily("ferrymq_send_back_messages", "Messages a consumer gave back for retry",
                                   labels=GROUP_LABELS)
        dead = CounterMetricFamily("rocketmq_send_to_dlq_messages", "Messages dead-lettered after their last retry",
                                   labels=[*NODE_LABELS, "topic", "consumer_group"])
        for (topic, group), (retried, dead_lettered) in sorted(b.stats.send_back.items()):
            back.add_metric([cluster, name, topic, group], retried)
            dead.add_metric([*node, topic, group], dead_lettered)

        lags = await self.queue_lags()
        queue_diff = GaugeMetricFamily("ferrymq_group_queue_diff", "Messages not yet consumed, per queue "
                                       "(queue max offset - group's committed offset)", labels=QUEUE_LABELS)
        queue_latency = GaugeMetricFamily("ferrymq_group_queue_latency_ms", "Age of the oldest message not yet "
                                          "consumed, per queue (0 when caught up)", labels=QUEUE_LABELS)
        per_pair: dict[tuple[str, str], list[int]] = {}
        for n, lag in enumerate(lags, 1):
            if n % SLICE == 0:
                await asyncio.sleep(0)
            labels = [cluster, name, lag.topic, lag.group, str(lag.queue_id)]
            queue_diff.add_metric(labels, max(0, lag.broker_offset - lag.consumer_offset))
            queue_latency.add_metric(labels, lag.lag_ms)
            row = per_pair.setdefault((lag.topic, lag.group), [0, 0, 0])
            row[0] += max(0, lag.broker_offset - lag.consumer_offset)
            row[1] += lag.consumer_offset
            row[2] = max(row[2], lag.lag_ms)
        diff = GaugeMetricFamily("rocketmq_group_diff", "Messages the group has not consumed on the topic",
                                 labels=DIFF_LABELS)
        retry_diff = GaugeMetricFamily("rocketmq_group_retrydiff", "Messages the group has not consumed on its "
                                       "retry topic", labels=DIFF_LABELS)
        dlq_diff = GaugeMetricFamily("rocketmq_group_dlqdiff", "Messages in the group's dead-letter topic not "
                                     "consumed", labels=DIFF_LABELS)
        consumer_offset = GaugeMetricFamily("rocketmq_consumer_offset", "Sum of the group's committed offsets on "
                                            "the topic", labels=GROUP_LABELS)
        latency = GaugeMetricFamily("rocketmq_group_get_latency_by_storetime", "Age in ms of the oldest message "
                                    "the group has not consumed on the topic", labels=GROUP_LABELS)
        for (topic, group), (pending, committed, lag_ms) in sorted(per_pair.items()):
            info = b.clients.consumers.get(group)
            online = str(len(info.channels)) if info is not None else "0"
            model = _MSG_MODEL.get(info.message_model, "1") if info is not None else "1"
            family = (retry_diff if topic.startswith(RETRY_GROUP_TOPIC_PREFIX)
                      else dlq_diff if topic.startswith(DLQ_GROUP_TOPIC_PREFIX) else diff)
            family.add_metric([group, topic, online, model], pending)
            consumer_offset.add_metric([cluster, name, topic, group], committed)
            latency.add_metric([cluster, name, topic, group], lag_ms)
        count = GaugeMetricFamily("rocketmq_group_count", "Consumers online in the group",
                                  labels=["caddr", "localaddr", "group"])
        for group, info in sorted(b.clients.consumers.items()):
            addrs = ",".join(sorted(c.addr for c in info.channels.values()))
            count.add_metric([addrs, b.addr, group], len(info.channels))
        return [tps, size, msgs_out, bytes_out, back, dead, queue_diff, queue_latency, diff, retry_diff,
                dlq_diff, consumer_offset, latency, count]

    def _store_families(self, cluster: str, name: str) -> list[Metric]:
        b = self.broker
        store = b.store
        assert store is not None
        labels = [cluster, name]
        node = [cluster, "broker", name]
        out: list[Metric] = []

        def gauge(metric: str, doc: str, value: float, values: list[str] = labels,
                  names: list[str] = OWN_LABELS) -> None:
            g = GaugeMetricFamily(metric, doc, labels=names)
            g.add_metric(values, value)
            out.append(g)

        gauge("ferrymq_store_commitlog_bytes", "Commit-log bytes kept (max offset - min offset)",
              store.max_phy_offset - store.min_phy_offset)
        gauge("ferrymq_store_commitlog_max_offset", "Commit-log max physical offset", store.max_phy_offset)
        gauge("ferrymq_store_commitlog_min_offset", "Commit-log min physical offset", store.min_phy_offset)
        gauge("rocketmq_storage_flush_behind_bytes", "Commit-log bytes written but not yet flushed",
              max(0, store.max_phy_offset - store.flushed_offset), node, NODE_LABELS)
        gauge("ferrymq_store_disk_used_ratio", "Used fraction of the store's disk", store.retention.disk_ratio())
        with contextlib.suppress(OSError):
            usage = shutil.disk_usage(store.root)
            gauge("ferrymq_store_disk_total_bytes", "Size of the store's disk", usage.total)
            gauge("ferrymq_store_disk_free_bytes", "Free bytes on the store's disk", usage.free)
        out.append(_histogram("ferrymq_flush_latency_seconds", "Commit-log fsync duration", labels,
                              store.flush_latency))
        co = store.coalescer
        for metric, doc, count in (
                ("ferrymq_store_put_groups", "Appends made for two or more coalesced puts", co.groups),
                ("ferrymq_store_grouped_puts", "Puts appended in a group of coalesced puts",
                 co.grouped_puts)):
            c = CounterMetricFamily(metric, doc, labels=OWN_LABELS)
            c.add_metric(labels, count)
            out.append(c)
        return out

    def _replication_families(self, cluster: str, name: str) -> list[Metric]:
        table = self.broker.ha_table()
        labels = [cluster, name]
        role = GaugeMetricFamily("ferrymq_broker_role", "1 for the role this broker has now",
                                 labels=[*OWN_LABELS, "role"])
        role.add_metric([*labels, table.get("brokerRole", "")], 1)
        epoch = GaugeMetricFamily("ferrymq_replication_epoch", "Replication epoch", labels=OWN_LABELS)
        epoch.add_metric(labels, _int(table.get("epoch")))
        out: list[Metric] = [role, epoch]
        slaves = self.broker.replication.master.slaves_table() if (
            "haSlaves" in table and self.broker.replication.master is not None) else []
        lag_bytes = GaugeMetricFamily("ferrymq_replication_slave_lag_bytes", "Commit-log bytes a slave is behind "
                                      "(on the master)", labels=[*OWN_LABELS, "slave_id", "slave_addr"])
        lag_ms = GaugeMetricFamily("ferrymq_replication_slave_lag_ms", "How far behind a slave is in time "
                                   "(on the master)", labels=[*OWN_LABELS, "slave_id", "slave_addr"])
        in_sync = GaugeMetricFamily("ferrymq_replication_slave_in_sync", "1 when the slave is in the sync set",
                                    labels=[*OWN_LABELS, "slave_id", "slave_addr"])
        diff = GaugeMetricFamily("rocketmq_broker_commitlog_diff", "Commit-log bytes a slave is behind its master",
                                 labels=BROKER_LABELS)
        for s in slaves:
            sl = [*labels, str(s["brokerId"]), str(s["addr"])]
            lag_bytes.add_metric(sl, _int(s["lagBytes"]))
            lag_ms.add_metric(sl, _int(s["lagMs"]))
            in_sync.add_metric(sl, 1 if s["inSync"] else 0)
            diff.add_metric([cluster, str(s["addr"]), name], _int(s["lagBytes"]))
        out += [lag_bytes, lag_ms, in_sync, diff]
        if "slaveLagBytes" in table:
            connected = GaugeMetricFamily("ferrymq_replication_connected", "1 when this slave is connected to "
                                          "its master", labels=OWN_LABELS)
            connected.add_metric(labels, 1 if table.get("haConnected") == "true" else 0)
            behind = GaugeMetricFamily("ferrymq_replication_lag_bytes", "Commit-log bytes this slave is behind "
                                       "its master (-1: unknown)", labels=OWN_LABELS)
            behind.add_metric(labels, _int(table.get("slaveLagBytes")))
            behind_ms = GaugeMetricFamily("ferrymq_replication_lag_ms", "How far behind its master this slave is "
                                          "in time (-1: not connected)", labels=OWN_LABELS)
            behind_ms.add_metric(labels, _int(table.get("slaveLagMs")))
            out += [connected, behind, behind_ms]
        return out


def _int(value: object) -> int:
    try:
        return int(str(value))
    except ValueError:
        return 0


def _histogram(metric: str, doc: str, values: list[str], h: Histogram) -> HistogramMetricFamily:
    fam = HistogramMetricFamily(metric, doc, labels=["cluster", "broker"])
    fam.add_metric(values, h.cumulative(), h.sum)
    return fam
