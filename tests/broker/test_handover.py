"""Release before take (broker/handover.py): a member asking where to start on a queue that
another live member still owns is answered once that owner released it (its last commit,
marked as a release), left the group, or the wait ran out. Two raw connections over real TCP
play the two members, so every field is what a client puts on the wire."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest
from wire_util import Wire

from ferrymq.broker.config import BrokerConfig
from ferrymq.broker.controller import Broker
from ferrymq.client.consumer.types import ConsumeFromWhere, ConsumeStatus
from ferrymq.common import jsonx
from ferrymq.common.codes import RequestCode, ResponseCode
from ferrymq.common.progress import QueueProgressUpdate, encode_progress
from ferrymq.namesrv.server import NameServer, NamesrvConfig
from ferrymq.remoting import RemotingCommand
from waits import eventually

TOPIC = "handover"
GROUP = "g-handover"


def _heartbeat(client_id: str, *, releases: bool) -> bytes:
    consumer: dict[str, object] = {
        "groupName": GROUP, "consumeType": "CONSUME_PASSIVELY", "messageModel": "CLUSTERING",
        "consumeFromWhere": "CONSUME_FROM_FIRST_OFFSET", "unitMode": False,
        "subscriptionDataSet": [{"topic": TOPIC, "subString": "*", "tagsSet": [], "codeSet": [],
                                 "subVersion": 1, "expressionType": "TAG"}]}
    if releases:
        consumer["releasesQueues"] = True
    return jsonx.dumps_bytes({"clientID": client_id, "consumerDataSet": [consumer],
                              "producerDataSet": []})


@pytest.fixture
async def broker(tmp_path: Path) -> AsyncIterator[tuple[Broker, Callable[[], Wire]]]:
    namesrv = NameServer(NamesrvConfig(port=0))
    await namesrv.start()
    b = Broker(BrokerConfig(store_dir=tmp_path / "store", listen_port=0, namesrv_addr=namesrv.address,
                            grpc_listen_port=-1, handover_wait_ms=30_000))
    await b.start()
    wires: list[Wire] = []

    def wire() -> Wire:
        wires.append(Wire(namesrv.address, b.addr))  # a connection of its own: one member
        return wires[-1]

    try:
        setup = wire()
        await setup.create_topic(TOPIC, 2)
        for i in range(10):
            assert (await setup.send(TOPIC, b"m%d" % i, queue_id=0)).code == ResponseCode.SUCCESS
        yield b, wire
    finally:
        for w in wires:
            await w.close()
        await b.stop()
        await namesrv.stop()


async def _member(wire: Wire, client_id: str, *, releases: bool = True) -> None:
    resp = await wire.call(RequestCode.HEART_BEAT, _heartbeat(client_id, releases=releases))
    assert resp.code == ResponseCode.SUCCESS, resp.remark


async def _own(wire: Wire, upto: int) -> None:
    """Pull queue 0 (which makes this connection its owner) and commit `upto`."""
    resp = await wire.pull(TOPIC, 0, 0, group=GROUP, commit_offset=upto)
    assert resp.code == ResponseCode.SUCCESS, resp.remark


async def _owned_by_old(wire: Callable[[], Wire], upto: int) -> tuple[Wire, Wire]:
    """Two members: "old" owns queue 0 (committed `upto`), "new" is about to take it over."""
    old, new = wire(), wire()
    await _member(old, "old")
    await _own(old, upto)
    await _member(new, "new")
    return old, new


def _query(wire: Wire, wait_ms: int | None = 30_000) -> asyncio.Task[RemotingCommand]:
    ext: dict[str, object] = {"consumerGroup": GROUP, "topic": TOPIC, "queueId": 0}
    if wait_ms is not None:
        ext["handoverWaitMs"] = wait_ms
    return asyncio.ensure_future(wire.call(RequestCode.QUERY_CONSUMER_OFFSET, timeout=40, **ext))


async def _release(wire: Wire, offset: int, *, released: bool = True) -> None:
    body = encode_progress(GROUP, [QueueProgressUpdate(TOPIC, 0, offset, ((offset + 1, offset + 3),))])
    ext = {"released": "true"} if released else {}
    resp = await wire.call(RequestCode.UPDATE_CONSUMER_PROGRESS, body, **ext)
    assert resp.code == ResponseCode.SUCCESS, resp.remark


async def test_the_new_owner_is_answered_with_the_old_owners_release(
        broker: tuple[Broker, Callable[[], Wire]]) -> None:
    b, wire = broker
    old, new = await _owned_by_old(wire, 2)
    asked = _query(new)
    await eventually(lambda: b.handover.waiting == 1, what="the query to wait for the release")
    # The old owner consumed on meanwhile; a plain commit is not a release.
    await _release(old, 6, released=False)
    assert b.handover.waiting == 1
    await _release(old, 7)
    resp = await asyncio.wait_for(asked, 10)
    assert resp.code == ResponseCode.SUCCESS
    assert resp.ext_fields["offset"] == "7"  # the release's offset, not the one before it
    assert (b.handover.waits, b.handover.waited_out) == (1, 0)


async def test_the_wait_ends_when_the_old_owner_leaves(broker: tuple[Broker, Callable[[], Wire]]) -> None:
    b, wire = broker
    old, new = await _owned_by_old(wire, 4)
    asked = _query(new)
    await eventually(lambda: b.handover.waiting == 1, what="the query to wait for the release")
    assert b.handover.owned == 1
    await old.close()  # its connection closes: it is no longer a member
    resp = await asyncio.wait_for(asked, 10)
    assert resp.ext_fields["offset"] == "4"
    await eventually(lambda: b.handover.owned == 0, what="the closed connection to own nothing")
    assert b.handover.waited_out == 0


async def test_the_wait_runs_out_at_the_askers_limit(broker: tuple[Broker, Callable[[], Wire]]) -> None:
    b, wire = broker
    _old, new = await _owned_by_old(wire, 3)
    resp = await asyncio.wait_for(_query(new, wait_ms=100), 10)  # the broker's own limit: 30 s
    assert resp.ext_fields["offset"] == "3"
    assert (b.handover.waits, b.handover.waited_out) == (1, 1)


@pytest.mark.parametrize("case", ["owner-does-not-release", "asker-does-not-wait", "asker-not-a-member",
                                  "asker-is-the-owner"])
async def test_no_wait_where_the_handover_does_not_apply(
        broker: tuple[Broker, Callable[[], Wire]], case: str) -> None:
    b, wire = broker
    old, new = wire(), wire()
    await _member(old, "old", releases=case != "owner-does-not-release")
    await _own(old, 5)
    if case != "asker-not-a-member":
        await _member(new, "new")
    asker = old if case == "asker-is-the-owner" else new
    resp = await asyncio.wait_for(_query(asker, None if case == "asker-does-not-wait" else 30_000), 10)
    assert resp.ext_fields["offset"] == "5"
    assert b.handover.waits == 0


async def test_a_client_that_reconnected_does_not_wait_for_its_old_connection(
        broker: tuple[Broker, Callable[[], Wire]]) -> None:
    """The old connection is still registered (the broker has not seen it close), but it is
    the same client: nobody else's progress is pending."""
    b, wire = broker
    before, after = wire(), wire()
    await _member(before, "same-client")
    await _own(before, 6)
    await _member(after, "same-client")
    resp = await asyncio.wait_for(_query(after), 10)
    assert resp.ext_fields["offset"] == "6"
    assert b.handover.waits == 0


async def test_a_pull_from_outside_the_group_does_not_take_the_queue_over(
        broker: tuple[Broker, Callable[[], Wire]]) -> None:
    """A connection that is no member (an admin tool, the dashboard, a Spark read: they pull
    with a group but never send a heartbeat) neither becomes the queue's owner, which would end
    the wait for the real owner's release, nor stays in the owner table after it closed (its
    close is never watched)."""
    b, wire = broker
    old, tool, new = wire(), wire(), wire()
    await _member(old, "old")
    await _own(old, 2)
    assert (await tool.pull(TOPIC, 0, 0, group=GROUP)).code == ResponseCode.SUCCESS
    await tool.close()
    await _member(new, "new")
    asked = _query(new)
    await eventually(lambda: b.handover.waiting == 1, what="the query to wait for the owner's release")
    await _release(old, 7)
    resp = await asyncio.wait_for(asked, 10)
    assert resp.ext_fields["offset"] == "7"


async def test_a_broker_stopping_answers_the_waiting_members_at_once(
        broker: tuple[Broker, Callable[[], Wire]]) -> None:
    """A stop wakes the held pulls; a member held for a release is answered too, with what is
    committed, rather than holding the stop (a restart, a failover) until its wait ends."""
    b, wire = broker
    _old, new = await _owned_by_old(wire, 4)
    asked = _query(new)  # the broker's limit here: 30 s, beyond the stop's grace
    await eventually(lambda: b.handover.waiting == 1, what="the query to wait for the release")
    await b.stop()
    resp = await asyncio.wait_for(asked, 10)
    assert resp.code == ResponseCode.SUCCESS and resp.ext_fields["offset"] == "4"


async def test_a_member_taking_queues_of_two_topics_waits_for_both_releases_at_once(
        broker: tuple[Broker, Callable[[], Wire]]) -> None:
    """A ferrymq consumer's rebalance updates its topics side by side: the question for a queue
    of one topic held for a release does not keep the other topic's question from being asked
    (start() would otherwise wait for each topic's owner in turn)."""
    from ferrymq.aio import PushConsumer

    b, wire = broker
    setup, old = wire(), wire()
    await setup.create_topic("handover-b", 1)
    assert (await setup.send("handover-b", b"m", queue_id=0)).code == ResponseCode.SUCCESS
    body = jsonx.loads(_heartbeat("zz-old", releases=True))
    body["consumerDataSet"][0]["subscriptionDataSet"].append(
        {"topic": "handover-b", "subString": "*", "tagsSet": [], "codeSet": [], "subVersion": 1,
         "expressionType": "TAG"})
    resp = await old.call(RequestCode.HEART_BEAT, jsonx.dumps_bytes(body))
    assert resp.code == ResponseCode.SUCCESS, resp.remark
    for topic, queue_id in ((TOPIC, 0), (TOPIC, 1), ("handover-b", 0)):  # "zz-old" owns them all
        resp = await old.pull(topic, queue_id, 0, group=GROUP, commit_offset=0)
        assert resp.code in (ResponseCode.SUCCESS, ResponseCode.PULL_NOT_FOUND), resp.remark
    consumer = PushConsumer(GROUP, old.namesrv, consume_from_where=ConsumeFromWhere.FIRST_OFFSET)
    consumer.subscribe(TOPIC)
    consumer.subscribe("handover-b")
    consumer.register_listener(lambda msgs, ctx: ConsumeStatus.CONSUME_SUCCESS)
    starting = asyncio.ensure_future(consumer.start())
    try:
        # Its client id sorts before "zz-old": it is given queue 0 of both topics.
        await eventually(lambda: b.handover.waiting == 2, what="both topics' questions held at once")
        await _release(old, 1)  # TOPIC queue 0
        body_b = encode_progress(GROUP, [QueueProgressUpdate("handover-b", 0, 0, ())])
        resp = await old.call(RequestCode.UPDATE_CONSUMER_PROGRESS, body_b, released="true")
        assert resp.code == ResponseCode.SUCCESS
        await asyncio.wait_for(starting, 10)
        assert b.handover.waited_out == 0
    finally:
        if not starting.done():
            starting.cancel()
        await consumer.shutdown()
