"""The send-batch core, both implementations (pure Python and compiled) against the same
expectations: a batch's body is RocketMQ's batch layout, its results are each message's own,
and a lane hands every message over once, in its batch, with a unique id."""

from __future__ import annotations

import concurrent.futures
import threading
from types import ModuleType
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ferrymq.client.futures import SendFuture
from ferrymq.client.results import SendResult, SendStatus
from ferrymq.client.sendbatch import _py as PY
from ferrymq.common.ids import UniqIdGenerator, decode_uniq_id
from ferrymq.common.message import Message, MessageBatchItem
from ferrymq.common.record import encode_batch, properties_encode, split_batch
from waits import wait_until

try:
    from ferrymq.client.sendbatch import _cbatch as C  # type: ignore[attr-defined]
except ImportError:
    C = None

IMPLS = [pytest.param(PY, id="python"),
         pytest.param(C, id="cython") if C is not None else
         pytest.param(None, id="cython", marks=pytest.mark.skip(
             reason="the compiled module is not built in this tree (make venv builds it)"))]

props_st = st.dictionaries(st.text("abcKEYS_", min_size=1, max_size=8),
                           st.text("xyz 09é", max_size=12), max_size=3)
entry_st = st.tuples(st.binary(min_size=1, max_size=300), st.integers(-2**31, 2**31 - 1), props_st)


@pytest.mark.parametrize("impl", IMPLS)
@settings(max_examples=60, deadline=None)
@given(entries=st.lists(entry_st, min_size=1, max_size=12))
def test_a_batch_body_is_the_codecs_encoding_of_its_entries(impl: ModuleType, entries: list[Any]) -> None:
    batch = impl.EntryBatch("t")
    items = [MessageBatchItem(flag, body, props) for body, flag, props in entries]
    for i, item in enumerate(items):
        batch.add(item.body, item.flag, properties_encode(item.properties), f"u{i}", None)
    assert batch.body() == encode_batch(items)
    assert [(f, b) for f, b, _ in split_batch(batch.body())] == [(i.flag, i.body) for i in items]
    assert len(batch) == len(items) and batch.size == sum(len(i.body) for i in items)
    assert batch.ids == [f"u{i}" for i in range(len(items))]


@pytest.mark.parametrize("impl", IMPLS)
def test_an_entry_the_wire_cannot_carry_is_refused_and_leaves_the_batch_as_it_was(impl: ModuleType) -> None:
    batch = impl.EntryBatch("t")
    batch.add(b"one", 0, b"", "u1", None)
    with pytest.raises(ValueError, match="32767"):
        batch.add(b"bad", 0, b"p" * 40_000, "u2", None)
    with pytest.raises(ValueError, match="32 bits"):
        batch.add(b"bad", 2**31, b"", "u2", None)
    batch.add(bytearray(b"two"), -(2**31), memoryview(b"k\x01v\x02"), "u3", None)
    assert split_batch(batch.body()) == [(0, b"one", b""), (-(2**31), b"two", b"k\x01v\x02")]
    assert batch.ids == ["u1", "u3"] and len(batch.waiters) == 2 and batch.size == 6


class Topic(str):
    """A topic given as a str subclass (an enum of topic names, say)."""


@pytest.mark.parametrize("impl", IMPLS)
def test_each_waiter_gets_its_own_result_and_a_done_one_is_left_alone(impl: ModuleType) -> None:
    batch = impl.EntryBatch("t")
    waiters: list[concurrent.futures.Future[SendResult]] = [SendFuture() for _ in range(3)]
    called: list[SendResult] = []
    waiters[1].add_done_callback(lambda f: called.append(f.result()))
    done: concurrent.futures.Future[SendResult] = concurrent.futures.Future()
    done.set_exception(RuntimeError("gone"))
    for i, w in enumerate([*waiters, done]):
        batch.add(b"x", 0, b"", f"u{i}", w, None)
    batch.settle(SendResult(SendStatus.SEND_OK, "u0,u1,u2,u3", "o0,o1,o2", 5, 10, "b"))
    got = [w.result(0) for w in waiters]
    assert got == [SendResult(SendStatus.SEND_OK, f"u{i}", f"o{i}", 5, 10 + i, "b") for i in range(3)]
    assert called == [got[1]]
    assert isinstance(done.exception(), RuntimeError)
    # A broker that named no offset (-1) gives -1 to every message.
    batch = impl.EntryBatch("t")
    f: SendFuture[SendResult] = SendFuture()
    batch.add(b"x", 0, b"", "u", f, None)
    batch.settle(SendResult(SendStatus.FLUSH_DISK_TIMEOUT, "u", "", 0, -1, "b"))
    assert f.result(0) == SendResult(SendStatus.FLUSH_DISK_TIMEOUT, "u", "", 0, -1, "b")


@pytest.mark.parametrize("impl", IMPLS)
def test_a_thread_already_waiting_on_a_future_is_woken_by_the_settle(impl: ModuleType) -> None:
    batch = impl.EntryBatch("t")
    f: SendFuture[SendResult] = SendFuture()
    batch.add(b"x", 0, b"", "u", f, None)
    got: list[SendResult] = []
    waiting = threading.Thread(target=lambda: got.append(f.result(30)))
    waiting.start()
    # Once the waiter has built its condition it waits (or is about to).
    wait_until(lambda: f._cond is not None, 30, what="the waiting thread's condition", interval=0.001)
    batch.settle(SendResult(SendStatus.SEND_OK, "u", "o", 0, 1, "b"))
    waiting.join(30)
    assert got == [SendResult(SendStatus.SEND_OK, "u", "o", 0, 1, "b")]


def test_a_send_future_runs_from_the_start_and_cannot_be_cancelled() -> None:
    f: SendFuture[int] = SendFuture()
    assert f.running() and not f.cancel() and not f.done()
    f.set_result(3)
    assert f.result() == 3


class _Wakes:
    def __init__(self) -> None:
        self.count = 0

    def __call__(self) -> None:
        self.count += 1


def _lane(impl: ModuleType, **limits: int) -> tuple[Any, _Wakes, UniqIdGenerator]:
    wakes, ids = _Wakes(), UniqIdGenerator()
    lane = impl.Lane(wakes, ids, max_bytes=limits.get("max_bytes", 1000),
                     max_messages=limits.get("max_messages", 4),
                     compress_over=limits.get("compress_over", 0),
                     wake_when_full=bool(limits.get("wake_when_full", 0)))
    lane.learn("t", 100)
    return lane, wakes, ids


@pytest.mark.parametrize("impl", IMPLS)
def test_a_lane_takes_only_the_common_message(impl: ModuleType) -> None:
    lane, wakes, _ = _lane(impl)
    assert lane.submit(Message("other", b"x")) is None  # a topic it was not told of
    assert lane.submit(Message("t", b"x" * 101)) is None  # over the topic's limit
    assert lane.submit(Message("t", b"x" * 90, keys="0123456789")) is None  # body + properties over it
    assert lane.submit(Message("t", b"x", flag=2**40)) is None  # a flag the wire cannot carry
    for long_way in (Message("t", b"x", delay_level=2), Message("t", b"x", deliver_time_ms=5),
                     Message("t", b"x", properties={"UNIQ_KEY": "given"}),
                     Message("t", b"x", properties={"TIMER_DELAY_SEC": "3"}),
                     Message("t", b"x", properties={"a\x01b": "v"}),
                     Message("t", b"x", properties={"a": "v\x02"}),
                     Message("t", b"x", properties={"a": "\udc80"}),
                     Message("t", b"x", properties={"big": "v" * 32_700})):
        assert lane.submit(long_way) is None, long_way.properties
        assert "UNIQ_KEY" not in long_way.properties or long_way.properties["UNIQ_KEY"] == "given"
    squeezed = _lane(impl, compress_over=50)[0]
    assert squeezed.submit(Message("t", b"x" * 51)) is None  # to be compressed: the long way
    assert squeezed.submit(Message("t", b"x" * 50)) is not None
    assert wakes.count == 0 and lane.take() == []
    msg = Message("t", b"x" * 100, flag=7)
    f = lane.submit(msg)
    assert isinstance(f, SendFuture) and f.running()
    uniq = msg.properties["UNIQ_KEY"]
    decode_uniq_id(uniq)
    [batch] = lane.take()
    assert batch.ids == [uniq] and batch.waiters == [f]
    assert split_batch(batch.body()) == [(7, b"x" * 100, properties_encode({"UNIQ_KEY": uniq}))]
    # What was handed over is what the batch holds, whatever the caller does to the message.
    msg.body = b"changed"
    assert split_batch(batch.body())[0][1] == b"x" * 100


@pytest.mark.parametrize("impl", IMPLS)
def test_a_lane_encodes_tags_keys_and_user_properties_with_the_id_last(impl: ModuleType) -> None:
    lane, _, _ = _lane(impl)
    msg = Message("t", b"body", tags="TagA", keys=["k1", "k2"], properties={"mine": "é ünïcode"})
    before = dict(msg.properties)
    f = lane.submit(msg)
    assert f is not None
    uniq = msg.properties["UNIQ_KEY"]
    assert list(msg.properties) == [*before, "UNIQ_KEY"]  # the caller's map gets its id, as the long way
    [batch] = lane.take()
    assert batch.ids == [uniq]
    assert split_batch(batch.body()) == [(0, b"body", properties_encode({**before, "UNIQ_KEY": uniq}))]


@pytest.mark.parametrize("impl", IMPLS)
def test_a_lane_takes_any_str_topic_and_bytes_like_body_it_is_handed(impl: ModuleType) -> None:
    lane, _, _ = _lane(impl)
    topic = Topic("t2")
    lane.learn(topic, 10)
    lane.submit_entry(topic, bytearray(b"abc"), 0, b"", "id")
    [batch] = lane.take()
    assert batch.topic == "t2" and split_batch(batch.body()) == [(0, b"abc", b"")]


@pytest.mark.parametrize("impl", IMPLS)
def test_a_lane_remembers_a_bounded_number_of_topics(impl: ModuleType) -> None:
    lane, _, _ = _lane(impl)
    for i in range(PY.MAX_TOPICS):
        lane.learn(f"x{i}", 100)
    assert lane.submit(Message("t", b"m")) is None  # forgotten when the table was full
    lane.learn("t", 100)
    assert lane.submit(Message("t", b"m")) is not None


@pytest.mark.parametrize("impl", IMPLS)
def test_a_lane_wakes_the_loop_once_a_burst_and_closes_full_batches(impl: ModuleType) -> None:
    lane, wakes, _ = _lane(impl, max_bytes=30, max_messages=4)
    for i in range(7):
        lane.submit(Message("t", b"%02d" % i * 5))  # 10 bytes each: 3 fill a batch
    lane.submit_entry("u", b"e", 0, b"", "id")
    assert wakes.count == 1
    batches = lane.take()
    assert [(b.topic, len(b)) for b in batches] == [("t", 3), ("t", 3), ("t", 1), ("u", 1)]
    assert lane.take() == []
    lane.submit(Message("t", b"x"))
    assert wakes.count == 2
    for _ in range(4):
        lane.submit(Message("t", b"y"))
    assert [len(b) for b in lane.take()] == [4, 1]  # max_messages closes a batch too


@pytest.mark.parametrize("impl", IMPLS)
def test_a_lingering_lane_wakes_again_when_a_batch_closes_and_keeps_open_ones_open(impl: ModuleType) -> None:
    lane, wakes, _ = _lane(impl, max_bytes=30, max_messages=4, wake_when_full=1)
    lane.submit(Message("t", b"a" * 10))
    assert wakes.count == 1  # the burst's first hand-over
    assert lane.take(full_only=True) == []
    for i in range(6):
        lane.submit(Message("t", b"%02d" % i * 5))
    assert wakes.count == 2  # two batches closed before the loop took them: one wake
    full = lane.take(full_only=True)
    assert [len(b) for b in full] == [3, 3]
    lane.submit(Message("t", b"b" * 10))
    assert wakes.count == 2  # the open batch (now 2) is not full, and the burst's wake is still due
    for _ in range(2):
        lane.submit(Message("t", b"c" * 10))
    assert wakes.count == 3
    assert [len(b) for b in lane.take()] == [3, 1]  # the linger's end: everything
    lane.submit(Message("t", b"d"))
    assert wakes.count == 4


@pytest.mark.parametrize("impl", IMPLS)
def test_a_closed_lane_refuses_and_keeps_what_it_took(impl: ModuleType) -> None:
    lane, _, _ = _lane(impl)
    lane.submit(Message("t", b"before"))
    lane.close(lambda: RuntimeError("closed"))
    msg = Message("t", b"after")
    with pytest.raises(RuntimeError, match="closed"):
        lane.submit(msg)
    with pytest.raises(RuntimeError, match="closed"):
        lane.submit_entry("t", b"e", 0, b"", "id")
    [batch] = lane.take()
    assert [body for _, body, _ in split_batch(batch.body())] == [b"before"]


@pytest.mark.parametrize("impl", IMPLS)
def test_threads_handing_over_at_once_lose_nothing_and_share_no_id(impl: ModuleType) -> None:
    lane, _, ids = _lane(impl, max_bytes=50, max_messages=16)
    taken: list[Any] = []
    stop = threading.Event()

    def take() -> None:
        while not stop.is_set():
            taken.extend(lane.take())
        taken.extend(lane.take())

    def send(n: int) -> None:
        for i in range(n):
            lane.submit(Message("t", b"%d" % i))

    taker = threading.Thread(target=take)
    taker.start()
    senders = [threading.Thread(target=send, args=(3000,)) for _ in range(3)]
    for t in senders:
        t.start()
    for t in senders:
        t.join()
    stop.set()
    taker.join()
    all_ids = [u for b in taken for u in b.ids]
    assert len(all_ids) == 9000 and len(set(all_ids)) == 9000
    assert all(len(b) <= 16 and b.size < 50 + 4 for b in taken)
    assert ids.next_id() not in set(all_ids)  # the lane's ids come from the generator's count
