"""AdminClient and Producer against a real standalone broker."""

from __future__ import annotations

import concurrent.futures
from typing import Any

import pytest
from scenario_util import FAST_PRODUCER

from ferrymq import AdminClient, Message, Producer, PullStatus, SendError, SendStatus
from ferrymq.client.errors import MessageNotFoundError, NoRouteError
from ferrymq.client.producer_async import hash_queue_index
from ferrymq.common.message import MessageQueue
from ferrymq.common.record import SYSFLAG_COMPRESSED
from waits import wait_until

# The tests here each use their own topics and groups: one server serves the module.
pytestmark = pytest.mark.shared_standalone


def test_admin_reads_routes_offsets_and_single_pulls(standalone: Any) -> None:
    with (
        AdminClient(standalone.namesrv) as admin,
        Producer("p", standalone.namesrv, **FAST_PRODUCER) as producer,
    ):
        assert admin.create_topic("orders", 4) == ["broker-a"]
        route = admin.topic_route("orders")
        assert route.brokers == {"broker-a": standalone.broker}
        mqs = admin.message_queues("orders")
        assert [mq.queue_id for mq in mqs] == [0, 1, 2, 3]
        q0 = mqs[0]
        results = [
            producer.send_to_queue(
                Message("orders", f"m{i}".encode(), tags="TagA" if i % 2 else "TagB", keys=f"k{i}"),
                q0,
            )
            for i in range(10)
        ]
        assert [r.queue_offset for r in results] == list(range(10))
        assert all(r.status is SendStatus.SEND_OK and r.queue_id == 0 for r in results)
        assert admin.max_offset(q0) == 10 and admin.min_offset(q0) == 0

        found = admin.pull(q0, 0, 4)
        assert found.status is PullStatus.FOUND and found.next_begin_offset == 4
        assert [m.body for m in found.messages] == [b"m0", b"m1", b"m2", b"m3"]
        assert found.messages[1].tags == "TagA" and found.messages[1].keys == "k1"
        assert found.messages[0].msg_id == results[0].msg_id  # UNIQ_KEY travels
        tagged = admin.pull(q0, 0, 32, expression="TagA")
        assert [m.body for m in tagged.messages] == [b"m1", b"m3", b"m5", b"m7", b"m9"]
        assert admin.pull(q0, 10).status is PullStatus.NO_NEW_MSG
        assert admin.pull(q0, 500).status is PullStatus.OFFSET_ILLEGAL

        assert admin.query_consumer_offset("g-admin", q0) == -1
        admin.update_consumer_offset("g-admin", q0, 7)
        assert admin.query_consumer_offset("g-admin", q0) == 7
        progress = {(r.topic, r.queue_id): r for r in admin.consume_stats("g-admin", "orders")}
        assert progress[("orders", 0)].lag == 3

        status = {r.queue_id: r for r in admin.topic_status("orders")}
        assert status[0].max_offset == 10 and status[1].max_offset == 0
        assert status[0].last_update > 0

        stored = admin.view_message(results[3].offset_msg_id)
        assert stored.body == b"m3" and stored.queue_offset == 3
        assert admin.search_offset(q0, stored.store_timestamp) <= 3
        by_key = admin.query_message("orders", "k5")
        assert [m.body for m in by_key] == [b"m5"]
        assert admin.query_by_uniq_key("orders", results[8].msg_id).body == b"m8"
        with pytest.raises(MessageNotFoundError):
            admin.query_by_uniq_key("orders", "0" * 32)
        with pytest.raises(NoRouteError):
            admin.topic_route("no-such-topic")
        assert "orders" in admin.topic_list()


def test_send_to_an_unknown_topic_creates_it_through_tbw102(standalone: Any) -> None:
    with (
        Producer("p", standalone.namesrv, **FAST_PRODUCER) as producer,
        AdminClient(standalone.namesrv) as admin,
    ):
        result = producer.send(Message("fresh-topic", b"hello"))
        assert result.status is SendStatus.SEND_OK
        mqs = wait_until(lambda: _queues_or_none(admin, "fresh-topic"), what="route of the new topic")
        assert len(mqs) == 8  # the producer's default for auto-created topics
        assert admin.view_message(result.offset_msg_id).body == b"hello"


def _queues_or_none(admin: AdminClient, topic: str) -> list[MessageQueue] | None:
    try:
        return admin.message_queues(topic)
    except NoRouteError:
        return None


def test_large_bodies_are_compressed_on_the_wire_and_arrive_intact(standalone: Any) -> None:
    body = (b"0123456789abcdef" * 8192)[:100_000]
    with (
        Producer("p", standalone.namesrv, **FAST_PRODUCER) as producer,
        AdminClient(standalone.namesrv) as admin,
    ):
        admin.create_topic("big", 1)
        result = producer.send(Message("big", body))
        got = admin.pull(MessageQueue("big", "broker-a", 0), result.queue_offset, 1).messages[0]
        assert got.body == body
        assert got.sys_flag & SYSFLAG_COMPRESSED
        assert got.store_size < len(body) // 4


def test_batch_async_and_oneway_sends_all_arrive(standalone: Any) -> None:
    with (
        Producer("p", standalone.namesrv, **FAST_PRODUCER) as producer,
        AdminClient(standalone.namesrv) as admin,
    ):
        admin.create_topic("many", 1)
        q = MessageQueue("many", "broker-a", 0)
        batch = producer.send_batch([Message("many", f"b{i}".encode()) for i in range(5)])
        assert batch.status is SendStatus.SEND_OK and batch.queue_offset == 0
        assert len(batch.msg_id.split(",")) == 5
        futures = [producer.send_async(Message("many", f"a{i}".encode())) for i in range(20)]
        done = [f.result(10) for f in concurrent.futures.as_completed(futures)]
        assert all(r.status is SendStatus.SEND_OK for r in done)
        producer.send_oneway(Message("many", b"oneway"))
        wait_until(lambda: admin.max_offset(q) == 26, what="26 messages stored")
        bodies = {m.body for m in admin.pull(q, 0, 64).messages}
        assert {b"b0", b"b4", b"a0", b"a19", b"oneway"} <= bodies


def test_orderly_send_keeps_a_sharding_key_on_one_queue(standalone: Any) -> None:
    with (
        Producer("p", standalone.namesrv, **FAST_PRODUCER) as producer,
        AdminClient(standalone.namesrv) as admin,
    ):
        admin.create_topic("ordered", 4)
        for key in ("alpha", "beta", "gamma"):
            queues = {
                producer.send_orderly(Message("ordered", f"{key}-{i}".encode()), key).queue_id
                for i in range(5)
            }
            assert queues == {hash_queue_index(key, 4)}


def test_send_without_a_reachable_name_server_fails_with_a_typed_error() -> None:
    with (
        Producer("p", "127.0.0.1:1", send_timeout=0.5) as producer,
        pytest.raises((SendError, NoRouteError)),
    ):
        producer.send(Message("t", b"x"))


def test_a_burst_of_async_sends_at_start_uses_the_topics_real_route(standalone: Any) -> None:
    """The concurrent first sends of a fresh producer share one route lookup: none of them may
    borrow TBW102's 8 queues for a topic that exists with 4."""
    with AdminClient(standalone.namesrv) as admin:
        admin.create_topic("burst", 4)
        with Producer("burst-p", standalone.namesrv, **FAST_PRODUCER) as producer:
            futures = [producer.send_async(Message("burst", f"m{i}".encode())) for i in range(1000)]
            results = [f.result(30) for f in futures]
        assert all(r.status is SendStatus.SEND_OK for r in results)
        assert {r.queue_id for r in results} <= {0, 1, 2, 3}
        stored = sum(admin.max_offset(MessageQueue("burst", "broker-a", q)) for q in range(4))
        assert stored == 1000


def test_a_send_to_a_queue_that_no_longer_exists_refreshes_the_route(standalone: Any) -> None:
    """A topic shrunk under a running producer: the answer 'queueId illegal' makes the next
    attempt use a fresh route instead of retrying the same dead queue."""
    with AdminClient(standalone.namesrv) as admin:
        admin.create_topic("shrink", 8)
        with Producer("shrink-p", standalone.namesrv, **FAST_PRODUCER) as producer:
            assert producer.send(Message("shrink", b"first")).status is SendStatus.SEND_OK
            admin.create_topic("shrink", 1, force=True)  # "first" may be on a queue removed
            futures = [producer.send_async(Message("shrink", f"m{i}".encode())) for i in range(40)]
            results = [f.result(30) for f in futures]
            assert all(r.queue_id == 0 for r in results)
            assert all(producer.send(Message("shrink", b"sync")).queue_id == 0 for _ in range(8))
