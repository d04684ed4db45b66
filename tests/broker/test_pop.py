"""Pop consumption against an in-process broker and name server over real sockets, with the
broker's clock injected so invisible times pass without waiting: the asyncio SimpleConsumer
for receive / ack / change invisible duration / redelivery / DLQ / FIFO, and the raw
remoting requests for RocketMQ 5's header fields."""

from __future__ import annotations

import asyncio
import base64
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from wire_util import Wire

from ferrymq.aio import ReceiptHandleError, SimpleConsumer
from ferrymq.broker.config import BrokerConfig
from ferrymq.broker.controller import Broker
from ferrymq.broker.pop import pop_service
from ferrymq.common import jsonx
from ferrymq.common.codes import RequestCode, ResponseCode
from ferrymq.common.popinfo import parse_msg_offset_info, parse_start_offset_info
from ferrymq.common.record import decode_records
from ferrymq.namesrv.server import NameServer, NamesrvConfig

TOPIC = "pop-topic"
GROUP = "pop-group"


class Clock:
    def __init__(self) -> None:
        self.ms = int(time.time() * 1000)

    def __call__(self) -> int:
        return self.ms

    def advance(self, seconds: float) -> None:
        self.ms += int(seconds * 1000)


@dataclass
class Env:
    namesrv: NameServer
    broker: Broker
    wire: Wire
    clock: Clock
    consumers: list[SimpleConsumer]

    async def consumer(self, **options: Any) -> SimpleConsumer:
        options.setdefault("await_duration", 0.0)
        c = SimpleConsumer(GROUP, self.namesrv.address, **options)
        c.subscribe(TOPIC)
        await c.start()
        self.consumers.append(c)
        return c

    async def send(self, n: int, queue_id: int = 0, prefix: str = "m") -> None:
        for i in range(n):
            resp = await self.wire.send(TOPIC, f"{prefix}{i}".encode(), queue_id=queue_id)
            assert resp.code == ResponseCode.SUCCESS, resp.remark

    def committed(self, queue_id: int = 0) -> int:
        return self.broker.offsets.query(GROUP, TOPIC, queue_id)


async def _env(tmp_path: Path, **config: Any) -> AsyncIterator[Env]:
    namesrv = NameServer(NamesrvConfig(port=0))
    await namesrv.start()
    clock = Clock()
    broker = Broker(BrokerConfig(store_dir=tmp_path / "store", listen_port=0,
                                 namesrv_addr=namesrv.address, **config), clock=clock)
    await broker.start()
    wire = Wire(namesrv.address, broker.addr)
    await wire.create_topic(TOPIC, queues=1)
    await broker.register_once()
    env = Env(namesrv, broker, wire, clock, [])
    try:
        yield env
    finally:
        for c in env.consumers:
            await c.shutdown()
        await wire.close()
        await broker.stop()
        await namesrv.stop()


@pytest.fixture
async def env(tmp_path: Path) -> AsyncIterator[Env]:
    async for e in _env(tmp_path, max_reconsume_times=2):
        yield e


def _bodies(views: list[Any]) -> list[str]:
    return [v.body.decode() for v in views]


async def test_receive_ack_and_redelivery_after_invisible_time(env: Env) -> None:
    await env.send(5)
    c = await env.consumer()
    got = await c.receive(10, invisible_duration=30)
    assert _bodies(got) == ["m0", "m1", "m2", "m3", "m4"]
    assert all(v.reconsume_times == 0 for v in got)
    assert await c.receive(10, 30) == []  # all invisible
    for v in (got[0], got[2], got[3]):
        await c.ack(v)
    # The group's offset is the lowest offset not acknowledged: lag tools keep working.
    assert env.committed() == 1
    env.clock.advance(29)
    assert await c.receive(10, 30) == []
    env.clock.advance(2)
    again = await c.receive(10, 30)
    assert _bodies(again) == ["m1", "m4"]
    assert [v.reconsume_times for v in again] == [1, 1]
    for v in again:
        await c.ack(v)
    assert env.committed() == 5
    env.clock.advance(120)
    assert await c.receive(10, 30) == []


async def test_max_reconsume_times_then_dlq(env: Env) -> None:
    await env.send(1)
    c = await env.consumer()
    for attempt in range(3):  # max_reconsume_times=2: delivered with 0, 1, 2
        got = await c.receive(1, 10)
        assert [v.reconsume_times for v in got] == [attempt]
        env.clock.advance(11)
    assert await c.receive(1, 10) == []
    assert env.committed() == 1  # acknowledged once dead-lettered
    dlq = await env.wire.pull_all(f"%DLQ%{GROUP}", 0, group="dlq-reader")
    assert [m.body for m in dlq] == [b"m0"]
    assert dlq[0].reconsume_times == 3
    assert dlq[0].properties.get("RETRY_TOPIC") == TOPIC


async def test_change_invisible_duration(env: Env) -> None:
    await env.send(1)
    c = await env.consumer()
    [view] = await c.receive(1, 10)
    old = view.receipt_handle
    await c.change_invisible_duration(view, 60)
    assert view.receipt_handle != old
    env.clock.advance(30)
    assert await c.receive(1, 10) == []  # extended past the first 10 s
    env.clock.advance(31)
    [again] = await c.receive(1, 10)
    assert again.reconsume_times == 1
    with pytest.raises(ReceiptHandleError):  # handed out again since: the old handle is stale
        await c.change_invisible_duration(view, 5)
    # Shortening works too.
    await c.change_invisible_duration(again, 1)
    env.clock.advance(2)
    [third] = await c.receive(1, 10)
    assert third.reconsume_times == 2
    await c.ack(third)
    with pytest.raises(ReceiptHandleError):
        await c.change_invisible_duration(third, 5)


async def test_fifo_next_only_after_ack(env: Env) -> None:
    await env.send(4)
    c = await env.consumer(orderly=True)
    assert _bodies(await c.receive(2, 10)) == ["m0", "m1"]
    assert await c.receive(2, 10) == []
    env.clock.advance(11)  # nothing acknowledged: the same two again, in order
    again = await c.receive(2, 10)
    assert _bodies(again) == ["m0", "m1"] and [v.reconsume_times for v in again] == [1, 1]
    first, second = again
    await c.ack(first)
    assert await c.receive(2, 10) == []  # m1 still in flight
    await c.ack(second)
    nxt = await c.receive(2, 10)
    assert _bodies(nxt) == ["m2", "m3"]
    await c.ack(nxt[0])
    env.clock.advance(11)
    last = await c.receive(2, 10)
    assert _bodies(last) == ["m3"] and last[0].reconsume_times == 1


async def test_inflight_bound(tmp_path: Path) -> None:
    async for env in _env(tmp_path, pop_max_inflight_per_queue=3):
        await env.send(10)
        c = await env.consumer()
        got = await c.receive(10, 30)
        assert _bodies(got) == ["m0", "m1", "m2"]
        assert await c.receive(10, 30) == []
        await c.ack(got[1])
        assert _bodies(await c.receive(10, 30)) == ["m3"]
        assert pop_service(env.broker).inflight(GROUP, TOPIC, 0) == 3


async def test_tag_filter_acknowledges_what_the_group_does_not_take(env: Env) -> None:
    for i, tag in enumerate(["a", "b", "a"]):
        await env.wire.send(TOPIC, f"m{i}".encode(), tags=tag)
    c = SimpleConsumer(GROUP, env.namesrv.address, await_duration=0)
    c.subscribe(TOPIC, "a")
    await c.start()
    env.consumers.append(c)
    got = await c.receive(10, 30)
    assert _bodies(got) == ["m0", "m2"]
    for v in got:
        await c.ack(v)
    assert env.committed() == 3


async def test_long_polling_answers_on_arrival(env: Env) -> None:
    c = await env.consumer(await_duration=10.0)
    task = asyncio.create_task(c.receive(4, 30))
    await asyncio.sleep(0.2)
    assert not task.done()
    started = time.monotonic()
    await env.send(1)
    got = await asyncio.wait_for(task, 5)
    assert _bodies(got) == ["m0"]
    assert time.monotonic() - started < 2.0


async def test_raw_headers_and_batch_ack(env: Env) -> None:
    await env.send(3)
    w = env.wire
    resp = await w.call(RequestCode.POP_MESSAGE, consumerGroup=GROUP, topic=TOPIC, queueId=-1,
                        maxMsgNums=33, invisibleTime=10_000, pollTime=0, bornTime=0, initMode=0)
    assert resp.code == ResponseCode.INVALID_PARAMETER
    resp = await w.call(RequestCode.POP_MESSAGE, consumerGroup=GROUP, topic=TOPIC, queueId=-1,
                        maxMsgNums=3, invisibleTime=10_000, pollTime=0, bornTime=0, initMode=0)
    assert resp.code == ResponseCode.SUCCESS, resp.remark
    e = resp.ext_fields
    assert int(e["popTime"]) == env.clock.ms and e["invisibleTime"] == "10000"
    assert e["reviveQid"] == "0" and e["restNum"] == "0"
    assert parse_start_offset_info(e["startOffsetInfo"]) == {"0@0": 0}
    assert parse_msg_offset_info(e["msgOffsetInfo"]) == {"0@0": [0, 1, 2]}
    assert [m.queue_offset for m in decode_records(resp.body or b"")] == [0, 1, 2]
    empty = await w.call(RequestCode.POP_MESSAGE, consumerGroup=GROUP, topic=TOPIC, queueId=0,
                         maxMsgNums=3, invisibleTime=10_000, pollTime=0, bornTime=0, initMode=0)
    assert empty.code == ResponseCode.POLLING_TIMEOUT and "popTime" in empty.ext_fields
    extra = f"0 {e['popTime']} 10000 0 0 broker-a 0 1"
    resp = await w.call(RequestCode.ACK_MESSAGE, consumerGroup=GROUP, topic=TOPIC, queueId=0,
                        extraInfo=extra, offset=1)
    assert resp.code == ResponseCode.SUCCESS, resp.remark
    resp = await w.call(RequestCode.ACK_MESSAGE, consumerGroup=GROUP, topic=TOPIC, queueId=0,
                        extraInfo=extra, offset=7)
    assert resp.code == ResponseCode.NO_MESSAGE
    body = jsonx.dumps_bytes({"brokerName": "broker-a", "acks": [{
        "c": GROUP, "t": TOPIC, "r": "0", "so": 0, "q": 0, "rq": 0, "pt": int(e["popTime"]),
        "it": 10_000, "b": base64.b64encode(bytes([0b101])).decode()}]})  # offsets 0 and 2
    resp = await w.call(RequestCode.BATCH_ACK_MESSAGE, body)
    assert resp.code == ResponseCode.SUCCESS, resp.remark
    assert env.committed() == 3
    resp = await w.call(RequestCode.CHANGE_MESSAGE_INVISIBLETIME, consumerGroup=GROUP, topic=TOPIC,
                        queueId=0, extraInfo=extra, offset=1, invisibleTime=5000)
    assert resp.code == ResponseCode.NO_MESSAGE  # acknowledged already


async def test_orderly_raw_header_counts(env: Env) -> None:
    await env.send(2)
    args = dict(consumerGroup=GROUP, topic=TOPIC, queueId=0, maxMsgNums=2, invisibleTime=1000,
                pollTime=0, bornTime=0, initMode=0, order=True)
    resp = await env.wire.call(RequestCode.POP_MESSAGE, **args)
    assert resp.ext_fields["reviveQid"] == "999"
    assert resp.ext_fields["orderCountInfo"] == "0 qo0%0 0;0 qo0%1 0"
    env.clock.advance(2)
    resp = await env.wire.call(RequestCode.POP_MESSAGE, **args)
    assert resp.ext_fields["orderCountInfo"] == "0 qo0%0 1;0 qo0%1 1"


async def test_sql92_selector(env: Env) -> None:
    for i, a in enumerate([1, 5, 3]):
        await env.wire.send(TOPIC, f"m{i}".encode(), props={"a": str(a)})
    args = dict(consumerGroup=GROUP, topic=TOPIC, queueId=0, maxMsgNums=8, invisibleTime=10_000,
                pollTime=0, bornTime=0, initMode=0)
    bad = await env.wire.call(RequestCode.POP_MESSAGE, expType="SQL92", exp="a >", **args)
    assert bad.code == ResponseCode.SUBSCRIPTION_PARSE_FAILED
    resp = await env.wire.call(RequestCode.POP_MESSAGE, expType="SQL92", exp="a > 2", **args)
    assert resp.code == ResponseCode.SUCCESS, resp.remark
    assert [m.body for m in decode_records(resp.body or b"")] == [b"m1", b"m2"]
    assert env.committed() == 1  # m0 was rejected: acknowledged for the group


async def test_an_entry_pointing_at_another_topics_record_is_rebuilt_not_popped(
        env: Env) -> None:
    """Entry 2 of the popped queue is damaged: it points at another topic's record of the same
    size. Pop read records by their entry's word (TOTALSIZE and magic only) and handed the
    other topic's message to this group; it now checks each as a pull does, and the store
    rebuilds the entry from the commit log, so the group gets its own message 2. The other
    topic's record is still read through its own queue."""
    other = "pop-topiz"  # as long as TOPIC: records of the same size
    await env.wire.create_topic(other, queues=1)
    await env.send(4)
    for i in range(4):
        resp = await env.wire.send(other, f"x{i}".encode(), queue_id=0)
        assert resp.code == ResponseCode.SUCCESS, resp.remark
    store = env.broker.store
    assert store is not None
    mine, theirs = store.reads.read_queue_entries(TOPIC, 0, 0, 4), store.reads.read_queue_entries(other, 0, 0, 4)
    assert mine[2].size == theirs[1].size
    queue_file = env.broker.config.store_dir / "consumequeue" / TOPIC / "0" / f"{0:020d}"
    with open(queue_file, "r+b") as f:
        f.seek(2 * 20)
        f.write(theirs[1].phys_offset.to_bytes(8, "big"))
    c = await env.consumer()
    got = await c.receive(10, invisible_duration=30)
    assert _bodies(got) == ["m0", "m1", "m2", "m3"]
    assert store.damaged_records() == []
    assert [m.body for m in decode_records(store.reads.get_messages(other, 0, 0, 32).data)] == [
        b"x0", b"x1", b"x2", b"x3"]


async def test_an_entry_naming_bytes_retention_removed_is_passed_over_not_held(
        tmp_path: Path) -> None:
    """An entry whose offset is damaged to below the log's first segment (retention removed
    what lies there): a pull passes over it; pop held its queue there for good."""
    async for env in _env(tmp_path, max_reconsume_times=2, mapped_file_size_commitlog=64 * 1024,
                          scrub_bytes_per_s=0):
        for i in range(200):
            resp = await env.wire.send(TOPIC, b"m%03d" % i + b"." * 700, queue_id=0)
            assert resp.code == ResponseCode.SUCCESS, resp.remark
        store = env.broker.store
        assert store is not None and store.retention.delete_segments(1)
        first = store.reads.get_min_offset(TOPIC, 0)
        bad = first + 3
        per_file = env.broker.config.mapped_file_size_consume_queue_entries
        queue_dir = env.broker.config.store_dir / "consumequeue" / TOPIC / "0"
        with open(queue_dir / f"{bad // per_file * per_file:020d}", "r+b") as f:
            f.seek(bad % per_file * 20)
            f.write((0).to_bytes(8, "big"))
        c = await env.consumer()
        got: list[str] = []
        while len(got) < 200 - first - 1:
            batch = await c.receive(32, invisible_duration=30)
            assert batch, f"pop stopped after {len(got)} messages"
            got += _bodies(batch)
            for m in batch:
                await c.ack(m)
        assert f"m{bad:03d}" not in [b[:4] for b in got]


async def test_init_mode_max_starts_a_young_queue_at_its_first_message(env: Env) -> None:
    """RocketMQ 5's getInitOffset (initPopOffsetByCheckMsgInMem): a group new to a queue whose
    first message is still in memory starts at 0 even with initMode MAX; otherwise at the
    queue's last message ("pop last one, then commit offset"), committed at once."""
    await env.send(3)
    args = dict(topic=TOPIC, queueId=0, maxMsgNums=8, invisibleTime=10_000, pollTime=0,
                bornTime=0, initMode=1)
    resp = await env.wire.call(RequestCode.POP_MESSAGE, consumerGroup="g-young", **args)
    assert resp.code == ResponseCode.SUCCESS, resp.remark
    assert [m.body for m in decode_records(resp.body or b"")] == [b"m0", b"m1", b"m2"]
    # 0 % of memory: the first record lies beyond the window, as an old queue's does.
    ok = await env.wire.call(RequestCode.UPDATE_BROKER_CONFIG, b"accessMessageInMemoryMaxRatio=0\n")
    assert ok.code == ResponseCode.SUCCESS, ok.remark
    resp = await env.wire.call(RequestCode.POP_MESSAGE, consumerGroup="g-old", **args)
    assert resp.code == ResponseCode.SUCCESS, resp.remark
    assert [m.body for m in decode_records(resp.body or b"")] == [b"m2"]
    assert env.broker.offsets.query("g-old", TOPIC, 0) == 2  # the start, committed at init
    await env.send(1, prefix="late")
    resp = await env.wire.call(RequestCode.POP_MESSAGE, consumerGroup="g-old", **args)
    assert [m.body for m in decode_records(resp.body or b"")] == [b"late0"]
