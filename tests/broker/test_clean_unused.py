"""CLEAN_UNUSED_TOPIC (RocketMQ's cleanUnusedTopic) with in-process brokers over real sockets
and files: a slave copies its master's topic deletion into its table but keeps the topic's
consume queues (which a failover would serve again); the request deletes them, and only them."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from inproc_cluster import Group

from ferrymq.common import jsonx
from ferrymq.common.codes import RequestCode, ResponseCode
from waits import eventually


@pytest.fixture
async def group(tmp_path: Path) -> AsyncIterator[Group]:
    g = Group(tmp_path)
    await g.namesrv.start()
    yield g
    await g.close()


async def test_a_slave_drops_the_queues_of_a_topic_its_master_deleted(group: Group) -> None:
    master = await group.broker("m")
    slave = await group.broker("s", broker_role="SLAVE", broker_id=1)
    wm, ws = group.wire(master), group.wire(slave)
    for topic in ("gone", "kept"):
        await wm.create_topic(topic, 1)
        assert (await wm.send(topic, b"x")).code == ResponseCode.SUCCESS
    assert slave.store is not None
    await eventually(lambda: {"gone", "kept"} <= set(slave.store.reads.queues()) and slave.topics.get("gone"),
                     what="the slave to hold both topics")
    deleted = await wm.call(RequestCode.DELETE_TOPIC_IN_BROKER, topic="gone")
    assert deleted.code == ResponseCode.SUCCESS, deleted.remark
    await eventually(lambda: slave.topics.get("gone") is None, what="the slave to copy the deletion")
    assert "gone" in slave.store.reads.queues()  # what a failover to this slave would serve again

    cleaned = await ws.call(RequestCode.CLEAN_UNUSED_TOPIC, addr=slave.addr)
    assert cleaned.code == ResponseCode.SUCCESS and jsonx.loads(cleaned.body or b"{}") == {"topics": ["gone"]}
    queues = set(slave.store.reads.queues())
    assert "gone" not in queues and "kept" in queues
    assert not (slave.config.store_dir / "consumequeue" / "gone").exists()
    again = await wm.call(RequestCode.CLEAN_UNUSED_TOPIC, addr=master.addr)
    assert jsonx.loads(again.body or b"{}") == {"topics": []}
