"""Incremental registration (RocketMQ 5's way, issue 24): a broker that a name server already
knows sends it only the topics changed since the version it acknowledged, and its whole table
when the name server holds another version. An in-process name server and broker over real
sockets and files; the name server's REGISTER_BROKER handler is wrapped to see what arrives."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from topic_seed import seed_topics

from ferrymq.broker.config import BrokerConfig
from ferrymq.broker.controller import Broker
from ferrymq.client.admin_async import AsyncAdminClient
from ferrymq.client.errors import NoRouteError
from ferrymq.common import jsonx
from ferrymq.common.codes import RequestCode
from ferrymq.common.headers import PERM_READ
from ferrymq.common.registration import FULL_REQUIRED_FIELD, INCREMENT_FIELD
from ferrymq.namesrv.server import NameServer, NamesrvConfig
from ferrymq.remoting import Connection, RemotingCommand
from waits import eventually

SEEDED = 2000


@dataclass
class Seen:
    """One REGISTER_BROKER as the name server received it, and whether it answered
    'send the whole table'."""

    topics: set[str]
    increment: dict[str, Any] | None
    full_required: bool = False


@dataclass
class Setup:
    namesrv: NameServer
    broker: Broker
    admin: AsyncAdminClient
    seen: list[Seen] = field(default_factory=list)


@pytest.fixture
async def setup(tmp_path: Path) -> AsyncIterator[Setup]:
    store = tmp_path / "store"
    seed_topics(store, SEEDED)
    namesrv = NameServer(NamesrvConfig(port=0))
    await namesrv.start()
    seen: list[Seen] = []
    original = namesrv._register_broker

    async def recording(conn: Connection, req: RemotingCommand) -> RemotingCommand:
        body = jsonx.loads(req.body) if req.body else {}
        wrapper = body.get("topicConfigSerializeWrapper") or {}
        resp = await original(conn, req)
        seen.append(Seen(set(wrapper.get("topicConfigTable") or {}), body.get(INCREMENT_FIELD),
                         resp.ext_fields.get(FULL_REQUIRED_FIELD) == "true"))
        return resp

    namesrv.server.register(RequestCode.REGISTER_BROKER, recording)
    broker = Broker(BrokerConfig(store_dir=store, listen_port=0, namesrv_addr=namesrv.address))
    await broker.start()
    admin = AsyncAdminClient(namesrv.address)
    try:
        await eventually(lambda: len(namesrv.registry.topic_list()) >= SEEDED, what="the seeded table")
        yield Setup(namesrv, broker, admin, seen)
    finally:
        await admin.close()
        await broker.stop()
        await namesrv.stop()


async def _no_route(admin: AsyncAdminClient, topic: str) -> bool:
    try:
        await admin.topic_route(topic, refresh=True)
    except NoRouteError:
        return True
    return False


async def test_a_new_topic_among_2000_is_registered_alone_and_routed(setup: Setup) -> None:
    first = setup.seen[0]
    assert first.increment is None and len(first.topics) >= SEEDED  # the first one is whole
    before = len(setup.seen)
    await setup.admin.create_topic("fresh", 3)
    sent = setup.seen[before:]
    assert sent and all(s.increment is not None and not s.full_required for s in sent)
    assert set().union(*(s.topics for s in sent)) == {"fresh"}
    route = await setup.admin.topic_route("fresh", refresh=True)
    assert [(q.broker_name, q.write_queue_nums) for q in route.queue_datas] == [
        (setup.broker.config.broker_name, 3)]
    for old in ("seed-00000", "seed-01234", f"seed-{SEEDED - 1:05d}"):
        assert (await setup.admin.topic_route(old, refresh=True)).queue_datas[0].read_queue_nums == 2
    assert len(setup.namesrv.registry.topic_list()) == len(setup.broker.topics.topics)


async def test_permission_change_and_deletion_reach_the_name_server_incrementally(setup: Setup) -> None:
    await setup.admin.update_topic_perm("seed-00042", PERM_READ)
    assert (await setup.admin.topic_route("seed-00042", refresh=True)).queue_datas[0].perm == PERM_READ
    before = len(setup.seen)
    # Deleted on the broker alone: only its registration tells the name server.
    await setup.admin.api.delete_topic_in_broker(setup.broker.addr, "seed-00043")
    await setup.broker.register_once()
    sent = setup.seen[before:]
    assert sent and all(s.increment is not None and s.topics == set() for s in sent)
    assert any(s.increment and s.increment.get("deletedTopics") == ["seed-00043"] for s in sent)
    assert await _no_route(setup.admin, "seed-00043")
    assert setup.namesrv.registry.route("seed-00044") is not None


async def test_a_consumer_group_created_by_heartbeat_registers_only_its_retry_topic(setup: Setup) -> None:
    before = len(setup.seen)
    setup.broker.topics.create_group_topic("%RETRY%g1")
    await setup.broker.register_once()
    assert set().union(*(s.topics for s in setup.seen[before:])) == {"%RETRY%g1"}
    assert setup.namesrv.registry.route("%RETRY%g1") is not None


async def test_a_name_server_that_lost_the_table_is_sent_it_whole(setup: Setup) -> None:
    registry = setup.namesrv.registry
    # What a restart or the broker's connection closing leaves: no record of this broker.
    assert registry.on_channel_closed(registry.live[setup.broker.addr].channel)
    assert registry.route("seed-00001") is None
    before = len(setup.seen)
    await setup.broker.register_once()
    sent = setup.seen[before:]
    assert [s.full_required for s in sent] == [True, False]
    assert sent[1].increment is None and len(sent[1].topics) == len(setup.broker.topics.topics)
    assert len(registry.topic_list()) == len(setup.broker.topics.topics)
    # And from there on incremental again.
    before = len(setup.seen)
    await setup.admin.create_topic("after", 1)
    assert all(s.increment is not None for s in setup.seen[before:])
