"""Producer auto-batching: concurrent single sends share SEND_BATCH requests, and every caller
still gets the result of its own message."""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from typing import Any

import pytest
from scenario_util import FAST_PRODUCER

from ferrymq import AdminClient, Message, Producer, SendStatus
from ferrymq.aio import Producer as AsyncProducer
from ferrymq.client.accumulator import Accumulator, AutoBatchConfig
from ferrymq.client.errors import BrokerError, ClientStateError, broker_error
from ferrymq.client.results import SendResult
from ferrymq.client.sendbatch import EntryBatch, Lane
from ferrymq.common.codes import RequestCode, ResponseCode
from ferrymq.common.ids import UniqIdGenerator
from ferrymq.common.message import MessageBatchItem, MessageQueue
from ferrymq.common.record import properties_encode
from waits import wait_until

# The tests here each use their own topics and groups: one server serves the module.
pytestmark = pytest.mark.shared_standalone


def test_a_burst_of_sends_shares_requests_and_each_result_is_its_own(standalone: Any) -> None:
    with AdminClient(standalone.namesrv) as admin:
        admin.create_topic("ab", 2)
        with Producer("ab-p", standalone.namesrv, **FAST_PRODUCER) as producer:
            producer.send(Message("ab", b"warm"))
            futures = [producer.send_async(Message("ab", b"m%d" % i, keys=f"k{i}")) for i in range(600)]
            results = [f.result(30) for f in futures]
            acc = producer._impl._accumulator
            assert acc.batches_sent >= 1 and acc.messages_batched >= 2
            assert acc.batches_sent < 600 // 2, "a burst should form batches"
        assert all(r.status is SendStatus.SEND_OK for r in results)
        assert len({r.msg_id for r in results}) == 600
        assert len({r.offset_msg_id for r in results}) == 600
        assert len({(r.queue_id, r.queue_offset) for r in results}) == 600
        # Each result points at its own message: body, key and unique id match.
        for i in range(0, 600, 37):
            r = results[i]
            got = admin.pull(MessageQueue("ab", r.broker, r.queue_id), r.queue_offset, 1).messages[0]
            assert got.body == b"m%d" % i
            assert got.keys == f"k{i}"
            assert got.msg_id == r.msg_id


def test_a_linger_gathers_sends_on_the_lane_and_a_full_batch_does_not_wait_for_it(standalone: Any) -> None:
    with AdminClient(standalone.namesrv) as admin:
        admin.create_topic("ab-linger", 1)
    # Sends made within the linger leave as one batch when it ends.
    with Producer("ab-linger-p", standalone.namesrv, batch_max_delay_ms=2000, **FAST_PRODUCER) as producer:
        assert producer._lane is not None, "a linger keeps the compiled lane"
        futures = [producer.send_async(Message("ab-linger", b"a%d" % i)) for i in range(5)]
        assert all(f.result(30).status is SendStatus.SEND_OK for f in futures)
        acc = producer._impl._accumulator
        assert (acc.batches_sent, acc.messages_batched) == (1, 5)
    # A batch that fills goes at once, not after the linger (a minute here); what is still
    # lingering goes at shutdown.
    with Producer("ab-linger-p2", standalone.namesrv, batch_max_delay_ms=60_000, batch_max_bytes=4096,
                  **FAST_PRODUCER) as producer:
        futures = [producer.send_async(Message("ab-linger", b"x" * 1024))]
        # The loop has taken the burst's first wake (its linger runs) before the batch fills.
        wait_until(lambda: producer._impl._linger is not None, 10, what="the linger to start")
        futures += [producer.send_async(Message("ab-linger", b"x" * 1024)) for _ in range(5)]
        assert futures[3].result(20).status is SendStatus.SEND_OK
        assert not futures[5].done()
    assert all(f.result(10).status is SendStatus.SEND_OK for f in futures)


def test_shutdown_sends_what_callers_handed_over(standalone: Any) -> None:
    with AdminClient(standalone.namesrv) as admin:
        admin.create_topic("ab-stop", 1)
        producer = Producer("ab-stop-p", standalone.namesrv, batch_max_delay_ms=5000, **FAST_PRODUCER)
        producer.start()
        futures = [producer.send_async(Message("ab-stop", b"x%d" % i)) for i in range(50)]
        producer.shutdown()  # a 5 s linger would still be waiting: shutdown must flush it
        assert all(f.result(10).status is SendStatus.SEND_OK for f in futures)
        assert admin.max_offset(MessageQueue("ab-stop", "broker-a", 0)) == 50


def test_shutdown_while_threads_keep_sending_ends_and_settles_every_future(standalone: Any) -> None:
    """Senders that keep calling send_async until they are refused: shutdown must stop taking
    new sends before it drains (else the drain never ends), and every future handed out
    settles, stored or refused, none left pending."""
    with AdminClient(standalone.namesrv) as admin:
        admin.create_topic("ab-race", 2)
    producer = Producer("ab-race-p", standalone.namesrv, **FAST_PRODUCER)
    producer.start()
    producer.send(Message("ab-race", b"warm"))
    futures: list[concurrent.futures.Future[SendResult]] = []
    refused: list[BaseException] = []
    lock = threading.Lock()
    enough = threading.Event()

    def spam() -> None:
        while True:
            try:
                f = producer.send_async(Message("ab-race", b"x"))
            except ClientStateError as exc:
                refused.append(exc)
                return
            with lock:
                futures.append(f)
                if len(futures) >= 300:
                    enough.set()

    threads = [threading.Thread(target=spam, daemon=True) for _ in range(3)]
    for t in threads:
        t.start()
    assert enough.wait(30)
    producer.shutdown()
    for t in threads:
        t.join(30)
        assert not t.is_alive(), "a sender was never refused"
    assert len(refused) == 3
    _, pending = concurrent.futures.wait(futures, timeout=30)
    assert not pending, f"{len(pending)} of {len(futures)} futures never settled"
    for f in futures:
        exc = f.exception()
        assert exc is None or isinstance(exc, ClientStateError), exc


async def test_shutdown_refuses_new_sends_before_it_drains(standalone: Any) -> None:
    """A task sending one message per loop turn keeps a batch in flight at every turn: a drain
    that still took new sends would never see the accumulator empty and never end."""
    admin = AdminClient(standalone.namesrv)
    with admin:
        admin.create_topic("ab-drain", 1)
    producer = AsyncProducer("ab-drain-p", standalone.namesrv, **FAST_PRODUCER)
    await producer.start()
    await producer.send(Message("ab-drain", b"warm"))
    futures: list[asyncio.Future[SendResult]] = []

    async def spam() -> ClientStateError:
        while True:
            try:
                futures.append(producer.send_async(Message("ab-drain", b"x")))
            except ClientStateError as exc:
                return exc
            await asyncio.sleep(0)

    sender = asyncio.ensure_future(spam())
    while len(futures) < 50:
        await asyncio.sleep(0)
    async with asyncio.timeout(30):
        await producer.shutdown()
        assert isinstance(await sender, ClientStateError)
    assert all(f.done() for f in futures)
    assert all(f.result().status is SendStatus.SEND_OK for f in futures)


def test_auto_batch_off_sends_each_message_on_its_own(standalone: Any) -> None:
    with Producer("ab-off", standalone.namesrv, auto_batch=False, **FAST_PRODUCER) as producer:
        futures = [producer.send_async(Message("ab-off", b"m")) for _ in range(100)]
        assert all(f.result(30).status is SendStatus.SEND_OK for f in futures)
        assert producer._impl._accumulator.batches_sent == 0


async def test_async_sends_in_one_loop_turn_form_one_batch(standalone: Any) -> None:
    async with AsyncProducer("ab-aio", standalone.namesrv, **FAST_PRODUCER) as producer:
        await producer.send(Message("ab-aio", b"warm"))
        futures = [producer.send_async(Message("ab-aio", b"%d" % i)) for i in range(20)]
        results = await asyncio.gather(*futures)
        assert producer._accumulator.batches_sent == 1
        assert sorted(r.queue_offset for r in results) == list(range(results[0].queue_offset,
                                                                   results[0].queue_offset + 20))
        # compressed and delayed messages never join a batch; they still arrive
        big = producer.send_async(Message("ab-aio", b"z" * 10_000))
        late = producer.send_async(Message("ab-aio", b"later", delay_level=1))
        assert (await big).status is SendStatus.SEND_OK and (await late).status is SendStatus.SEND_OK
        assert producer._accumulator.batches_sent == 1


# --- the accumulator's own rules, with a sender that records what it is given --------------

def _add(acc: Accumulator, loop: asyncio.AbstractEventLoop, i: int, alone: list[int],
         size: int = 10) -> asyncio.Future[SendResult]:
    async def send_alone() -> SendResult:
        alone.append(i)
        if i == 3:
            raise broker_error("127.0.0.1:1", RequestCode.SEND_MESSAGE_V2, ResponseCode.MESSAGE_ILLEGAL, "bad")
        return SendResult(SendStatus.SEND_OK, f"u{i}", f"o{i}", 0, i, "b")

    future: asyncio.Future[SendResult] = loop.create_future()
    acc.add("t", MessageBatchItem(0, b"x" * size), f"u{i}", future, send_alone)
    return future


async def test_a_refused_batch_is_retried_message_by_message_so_only_the_culprit_fails() -> None:
    loop = asyncio.get_running_loop()
    batches: list[list[str]] = []

    async def refuse(batch: EntryBatch) -> SendResult:
        batches.append(list(batch.ids))
        raise broker_error("127.0.0.1:1", RequestCode.SEND_BATCH_MESSAGE, ResponseCode.MESSAGE_ILLEGAL, "bad")

    acc = Accumulator(AutoBatchConfig(), refuse)
    alone: list[int] = []
    futures = [_add(acc, loop, i, alone) for i in range(5)]
    await acc.drain()
    assert batches == [["u0", "u1", "u2", "u3", "u4"]]
    assert sorted(alone) == [0, 1, 2, 3, 4]
    assert [f.exception() is None for f in futures] == [True, True, True, False, True]


async def test_messages_without_a_path_of_their_own_take_the_accumulators_default() -> None:
    loop = asyncio.get_running_loop()

    async def refuse(batch: EntryBatch) -> SendResult:
        raise broker_error("127.0.0.1:1", RequestCode.SEND_BATCH_MESSAGE, ResponseCode.MESSAGE_ILLEGAL, "bad")

    alone: list[bytes] = []

    async def default(topic: str, flag: int, body: bytes, props: bytes, uniq: str) -> SendResult:
        assert (topic, flag, props) == ("t", 0, b"")
        alone.append(body)
        return SendResult(SendStatus.SEND_OK, uniq, "o", 0, len(alone), "b")

    acc = Accumulator(AutoBatchConfig(), refuse, default)
    futures = []
    for i in range(3):
        futures.append(loop.create_future())
        acc.add("t", MessageBatchItem(0, b"m%d" % i), f"u{i}", futures[-1])
    await acc.drain()
    assert sorted(alone) == [b"m0", b"m1", b"m2"]
    assert all(f.result().status is SendStatus.SEND_OK for f in futures)


async def test_batches_close_at_max_bytes_and_a_retriable_failure_fails_the_batch() -> None:
    loop = asyncio.get_running_loop()
    sizes: list[int] = []

    async def busy(batch: EntryBatch) -> SendResult:
        sizes.append(len(batch))
        raise broker_error("127.0.0.1:1", RequestCode.SEND_BATCH_MESSAGE, ResponseCode.SYSTEM_BUSY, "busy")

    acc = Accumulator(AutoBatchConfig(max_bytes=40), busy)
    alone: list[int] = []
    futures = [_add(acc, loop, i, alone) for i in range(10)]
    await acc.drain()
    assert sizes == [4, 4, 2]  # 4 x 10 bytes fill a batch; drain sends the rest
    assert alone == []  # SYSTEM_BUSY says nothing about the messages: no one-by-one retry
    assert all(isinstance(f.exception(), BrokerError) for f in futures)


async def test_a_message_sent_alone_is_what_was_handed_over_not_what_its_message_became() -> None:
    """A lane's batch of one goes on its own: from the batch's encoded entry, so a caller
    that reuses its Message after send_async cannot change (or break) what is sent."""
    sent: list[tuple[str, int, bytes, bytes, str]] = []

    async def never(batch: EntryBatch) -> SendResult:
        raise AssertionError("a batch of one is sent on its own")

    async def alone(topic: str, flag: int, body: bytes, props: bytes, uniq: str) -> SendResult:
        sent.append((topic, flag, body, props, uniq))
        return SendResult(SendStatus.SEND_OK, uniq, "o", 0, 0, "b")

    acc = Accumulator(AutoBatchConfig(), never, alone)
    lane = Lane(lambda: None, UniqIdGenerator(), max_bytes=1000, max_messages=8)
    lane.learn("t", 100)
    msg = Message("t", b"original", flag=3)
    future = lane.submit(msg)
    uniq = msg.properties["UNIQ_KEY"]
    msg.body = b"changed"
    msg.properties.clear()
    for batch in lane.take():
        acc.deliver(batch)
    await acc.drain()
    assert future.result(0).msg_id == uniq
    assert sent == [("t", 3, b"original", properties_encode({"UNIQ_KEY": uniq}), uniq)]


async def test_a_batch_cancelled_in_flight_fails_its_callers_futures() -> None:
    """A producer whose shutdown ran out of time cancels its batches in flight; their callers'
    futures (concurrent ones, from a lane) must settle, not wait forever."""
    entered = asyncio.Event()

    async def hang(batch: EntryBatch) -> SendResult:
        entered.set()
        await asyncio.Event().wait()
        raise AssertionError("never answered")

    acc = Accumulator(AutoBatchConfig(), hang)
    lane = Lane(lambda: None, UniqIdGenerator(), max_bytes=1000, max_messages=8)
    lane.learn("t", 100)
    futures = [lane.submit(Message("t", b"m%d" % i)) for i in range(3)]
    for batch in lane.take():
        acc.deliver(batch)
    await entered.wait()
    drain = asyncio.ensure_future(acc.drain())
    await asyncio.sleep(0)
    drain.cancel()  # what a timed-out shutdown does to the drain, and with it the batch
    with pytest.raises(asyncio.CancelledError):
        await drain
    for f in futures:
        assert f is not None
        assert isinstance(f.exception(5), ClientStateError), f


async def test_a_cancelled_message_is_left_out_of_its_batch() -> None:
    loop = asyncio.get_running_loop()
    sent: list[list[str]] = []

    async def record(batch: EntryBatch) -> SendResult:
        sent.append(list(batch.ids))
        return SendResult(SendStatus.SEND_OK, ",".join(batch.ids), "a,b,c", 1, 7, "b")

    acc = Accumulator(AutoBatchConfig(), record)
    futures = [_add(acc, loop, i, []) for i in range(4)]
    futures[1].cancel()
    await acc.drain()
    assert sent == [["u0", "u2", "u3"]]
    assert [(r.msg_id, r.offset_msg_id, r.queue_offset) for r in (futures[0].result(), futures[2].result(),
            futures[3].result())] == [("u0", "a", 7), ("u2", "b", 8), ("u3", "c", 9)]


def test_config_is_checked() -> None:
    with pytest.raises(ValueError):
        AutoBatchConfig(max_delay_ms=-1)
    with pytest.raises(ValueError):
        AutoBatchConfig(max_bytes=10, total_max_bytes=5)
