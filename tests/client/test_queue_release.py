"""A concurrent consumer giving a queue up (ConcurrentService.begin_close / finish_queue):
what its listener finishes on the queue after the drop is acknowledged in the release, so
the next owner does not deliver it again; a call that outlives the wait is left to the next
owner. Real listener threads (ListenerRunner); the host records what would be committed."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

from ferrymq.client.consumer.concurrent import ConcurrentService
from ferrymq.client.consumer.options import ConsumerOptions
from ferrymq.client.consumer.process_queue import ProcessQueue
from ferrymq.client.consumer.runner import ListenerRunner
from ferrymq.client.consumer.types import ConsumeStatus
from ferrymq.common.message import MessageExt, MessageQueue


class Host:
    """The consumer side ConcurrentService reports to: which messages it settles, and how."""

    group = "g-release"

    def __init__(self) -> None:
        self.options = ConsumerOptions()
        self.settled: list[tuple[list[int], bool]] = []  # (queue offsets, closing)

    @property
    def clustering(self) -> bool:
        return True

    def is_retry(self, mq: MessageQueue) -> bool:
        return False

    def reset_retry_topic(self, msgs: list[MessageExt]) -> None:
        pass

    def settle(self, pq: ProcessQueue, consumed: list[MessageExt], *, closing: bool = False) -> None:
        self.settled.append(([m.queue_offset for m in consumed], closing))

    def settle_orderly(self, pq: ProcessQueue, *, closing: bool = False) -> None:
        raise AssertionError("not orderly")

    async def send_back(self, msg: MessageExt, delay_level: int) -> bool:
        raise AssertionError("nothing fails here")


def _msg(offset: int) -> MessageExt:
    m = MessageExt("t", b"x")
    m.queue_id, m.queue_offset = 0, offset
    return m


async def _until(predicate: Any, what: str) -> None:
    async with asyncio.timeout(10):
        while not predicate():
            await asyncio.sleep(0.001)


def _service(release: threading.Event, started: threading.Event) -> tuple[Host, ConcurrentService, ProcessQueue]:
    def listener(msgs: list[MessageExt], ctx: Any) -> ConsumeStatus:
        started.set()
        release.wait(10)
        return ConsumeStatus.CONSUME_SUCCESS

    host = Host()
    service = ConcurrentService(host, ListenerRunner(listener, 2, "t-release"))  # type: ignore[arg-type]
    return host, service, ProcessQueue(MessageQueue("t", "b", 0))


async def _dropped_while_running(offset: int) -> tuple[Host, ConcurrentService, ProcessQueue, threading.Event]:
    """One message's listener call is running (blocked until the event is set) when its queue
    is dropped and the hand-over begins, as release_queue does."""
    release, started = threading.Event(), threading.Event()
    host, service, pq = _service(release, started)
    service.submit(pq, [_msg(offset)])
    await _until(started.is_set, "the listener call")
    pq.dropped = True
    service.begin_close(pq)
    return host, service, pq, release


def test_a_call_finishing_between_the_drop_and_the_wait_is_acknowledged() -> None:
    """The run comes back to the loop after the queue was dropped but before the release's
    wait began (the release runs as a task of its own): acknowledged, not thrown away."""
    async def scenario() -> None:
        host, service, pq, release = await _dropped_while_running(7)
        release.set()
        await _until(lambda: host.settled, "the run handed back")  # by the runner's own delivery
        await service.finish_queue(pq, 5.0)
        assert host.settled == [([7], True)]
        service.runner.shutdown()

    asyncio.run(scenario())


def test_the_release_waits_for_a_call_still_running() -> None:
    async def scenario() -> None:
        host, service, pq, release = await _dropped_while_running(3)
        finishing = asyncio.ensure_future(service.finish_queue(pq, 30.0))
        await asyncio.sleep(0)
        assert service.runner.busy_with(pq) and not finishing.done()
        release.set()
        async with asyncio.timeout(10):
            await finishing
        assert host.settled == [([3], True)]
        service.runner.shutdown()

    asyncio.run(scenario())


def test_a_call_outliving_the_wait_is_left_to_the_next_owner() -> None:
    async def scenario() -> None:
        host, service, pq, release = await _dropped_while_running(5)
        await service.finish_queue(pq, 0.05)  # gives up: the call is still running
        assert host.settled == []
        release.set()
        await service.runner.wait_idle()
        assert host.settled == []  # handed back after the release: the next owner has it
        service.runner.shutdown()

    asyncio.run(scenario())
