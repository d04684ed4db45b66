"""rocketmq-exporter's rocketmq_client_* families: each online consumer's own figures per topic
(its running info's statusTable: pull and consume rates and round trips, failures).

The exporter asks every client of every group for its running info through a broker
(GET_CONSUMER_RUNNING_INFO); here the broker asks the clients connected to it at scrape time,
over the connections they opened, all at once and each within CLIENT_TIMEOUT_S, so a client
that hangs costs a scrape that much and no more, and is left out of it."""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.metrics_core import Metric

from ..common import jsonx
from ..common.codes import RequestCode, ResponseCode
from ..remoting import RemotingCommand

if TYPE_CHECKING:
    from ..broker.clients import ClientChannel
    from ..broker.controller import Broker

log = logging.getLogger("ferrymq.metrics")

CLIENT_LABELS = ["clientAddr", "clientId", "group", "topic"]

# Well under a Prometheus scrape timeout (10 s by default), with the broker's own families
# still to read.
CLIENT_TIMEOUT_S = 2.0

# (family, the ConsumeStatus field it carries, help): the exporter's names and fields.
FAMILIES: tuple[tuple[str, str, str], ...] = (
    ("rocketmq_client_consume_fail_msg_count", "consumeFailedMsgs",
     "Messages the client failed to consume (listener failed or threw) in the last hour"),
    ("rocketmq_client_consume_fail_msg_tps", "consumeFailedTPS",
     "Messages the client failed to consume per second (last minute)"),
    ("rocketmq_client_consume_ok_msg_tps", "consumeOKTPS",
     "Messages the client consumed successfully per second (last minute)"),
    ("rocketmq_client_consume_rt", "consumeRT", "Mean listener time per call in ms (last minute)"),
    ("rocketmq_client_consumer_pull_rt", "pullRT", "Mean pull round trip in ms (last minute)"),
    ("rocketmq_client_consumer_pull_tps", "pullTPS", "Messages pulled per second (last minute)"),
)


async def client_families(broker: Broker) -> list[Metric]:
    asked = [(group, channel)
             for group, info in sorted(list(broker.clients.consumers.items()))
             for channel in sorted(info.channels.values(), key=lambda c: c.client_id)]
    tables = await asyncio.gather(*(_status_table(group, channel) for group, channel in asked))
    families = [GaugeMetricFamily(name, doc, labels=CLIENT_LABELS) for name, _, doc in FAMILIES]
    for (group, channel), table in zip(asked, tables, strict=True):
        for topic, status in sorted(table.items()):
            labels = [channel.addr, channel.client_id, group, str(topic)]
            for family, (_, field, _) in zip(families, FAMILIES, strict=True):
                family.add_metric(labels, _number(status.get(field)))
    return list(families)


async def _status_table(group: str, channel: ClientChannel) -> dict[str, dict[str, Any]]:
    """topic -> ConsumeStatus of one client; {} when it does not answer in time or at all."""
    ask = RemotingCommand.request(RequestCode.GET_CONSUMER_RUNNING_INFO, ext_fields={
        "consumerGroup": group, "clientId": channel.client_id, "jstackEnable": "false"})
    try:
        answer = await channel.conn.invoke(ask, CLIENT_TIMEOUT_S)
        if answer.code != ResponseCode.SUCCESS or not answer.body:
            return {}
        table = jsonx.loads(answer.body).get("statusTable") or {}
    except Exception as exc:  # a client gone, slow or answering nonsense is left out of this scrape
        log.debug("running info of %s (%s) not had for the metrics: %s", channel.client_id, group, exc)
        return {}
    return {str(t): s for t, s in table.items() if isinstance(s, dict)}


def _number(value: object) -> float:
    try:
        return float(str(value))
    except ValueError:
        return 0.0
