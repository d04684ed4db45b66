"""Single SEND_MESSAGE requests that reach a SYNC_FLUSH broker together are stored as one group
(store/groupcommit.py), and each is still answered with its own queue offset and message id."""

from __future__ import annotations

import asyncio
import http.client
import time
from collections.abc import Iterator

import pytest
from prometheus_client.parser import text_string_to_metric_families
from wire_util import Wire

from conftest import Standalone, start_standalone
from ferrymq.common.codes import RequestCode, ResponseCode
from ferrymq.common.ids import decode_offset_msg_id
from ferrymq.common.props import properties_to_string
from ferrymq.remoting import RemotingCommand
from ferrymq.remoting.codec import FrameSplitter, decode_frame, encode_frame

TOPIC = "coalesced"
SENDS = 32


@pytest.fixture
def sync_broker(tmp_path) -> Iterator[Standalone]:  # type: ignore[no-untyped-def]
    server = start_standalone(tmp_path / "store", "--flush", "sync", "--metrics-port", "0")
    try:
        yield server
    finally:
        server.stop()


def grouped_puts(metrics_addr: str) -> float:
    host, port = metrics_addr.rsplit(":", 1)
    conn = http.client.HTTPConnection(host, int(port), timeout=10)
    try:
        conn.request("GET", "/metrics")
        text = conn.getresponse().read().decode()
    finally:
        conn.close()
    return sum(s.value for fam in text_string_to_metric_families(text) for s in fam.samples
               if s.name == "ferrymq_store_grouped_puts_total")


def send_request(i: int) -> RemotingCommand:
    ext = dict(producerGroup="p", topic=TOPIC, defaultTopic="TBW102", defaultTopicQueueNums="4",
               queueId="0", sysFlag="0", bornTimestamp=str(int(time.time() * 1000)), flag="0",
               properties=properties_to_string({"UNIQ_KEY": f"u{i:04d}"}), reconsumeTimes="0",
               unitMode="false", batch="false")
    return RemotingCommand.request(RequestCode.SEND_MESSAGE, ext_fields=ext, body=b"body-%d" % i)


async def test_sends_arriving_together_are_stored_together_and_answered_apart(
        sync_broker: Standalone) -> None:
    wire = Wire(sync_broker.namesrv, sync_broker.broker)
    try:
        await wire.create_topic(TOPIC, 1)
        before = grouped_puts(sync_broker.metrics)
        requests = [send_request(i) for i in range(SENDS)]
        host, port = sync_broker.broker.rsplit(":", 1)
        reader, writer = await asyncio.open_connection(host, int(port))
        # One write: the broker reads the requests in one go and handles them in one turn.
        writer.write(b"".join(encode_frame(r) for r in requests))
        await writer.drain()
        splitter = FrameSplitter()
        answers: dict[int, RemotingCommand] = {}
        while len(answers) < SENDS:
            data = await asyncio.wait_for(reader.read(65536), 10)
            assert data, "the broker closed the connection"
            for frame in splitter.feed(data):
                resp = decode_frame(frame)
                answers[resp.opaque] = resp
        writer.close()
        stored = {m.queue_offset: m for m in await wire.pull_all(TOPIC, 0)}
        offsets = []
        for i, req in enumerate(requests):
            resp = answers[req.opaque]
            assert resp.code == ResponseCode.SUCCESS, resp.remark
            offset = int(resp.ext_fields["queueOffset"])
            offsets.append(offset)
            assert stored[offset].body == b"body-%d" % i
            assert (decode_offset_msg_id(resp.ext_fields["msgId"]).offset
                    == stored[offset].commit_log_offset)
        assert sorted(offsets) == list(range(SENDS))
        assert grouped_puts(sync_broker.metrics) - before >= 2
    finally:
        await wire.close()
