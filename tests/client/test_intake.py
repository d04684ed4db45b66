"""The hand-over from user threads to the client's loop (client/intake.py): calls reach the
loop in bursts, and nothing submitted around a shutdown is left waiting forever."""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading

import pytest

from ferrymq.client.errors import ClientClosedError
from ferrymq.client.intake import Intake


def closed() -> BaseException:
    return ClientClosedError("producer", "send")


def test_a_burst_reaches_the_loop_in_one_turn_in_order() -> None:
    loop = asyncio.new_event_loop()
    started: list[tuple[int, int]] = []
    turns = [0]

    def start(item: int, result: concurrent.futures.Future[int]) -> None:
        started.append((turns[0], item))
        result.set_result(item * 2)

    intake: Intake[int, int] = Intake(loop, start)
    try:
        futures = [intake.submit(i) for i in range(5)]
        assert not any(f.done() for f in futures)  # nothing runs until the loop does

        def count_turn() -> None:
            turns[0] += 1

        loop.call_soon(count_turn)
        loop.call_soon(loop.stop)
        loop.run_forever()
        assert started == [(0, i) for i in range(5)]  # one drain, before the next callback
        assert [f.result(0) for f in futures] == [0, 2, 4, 6, 8]
    finally:
        loop.close()


def test_items_stranded_after_the_loops_last_turn_fail_at_close_and_later_ones_at_once() -> None:
    loop = asyncio.new_event_loop()  # never run again: as after a shutdown's last turn
    intake: Intake[int, int] = Intake(loop, lambda item, result: result.set_result(item))
    try:
        stranded = [intake.submit(i) for i in range(3)]
        cancelled = intake.submit(99)
        assert cancelled.cancel()  # a caller that gave up keeps its cancellation
        assert not any(f.done() for f in stranded)
        intake.close(closed)
        for f in stranded:
            with pytest.raises(ClientClosedError):
                f.result(0)
        assert cancelled.cancelled()
        late = intake.submit(4)
        with pytest.raises(ClientClosedError):
            late.result(0)
    finally:
        loop.close()


def test_close_races_submits_from_threads_and_every_future_ends() -> None:
    loop = asyncio.new_event_loop()
    runner = threading.Thread(target=loop.run_forever, daemon=True)
    runner.start()
    intake: Intake[int, int] = Intake(loop, lambda item, result: result.set_result(item))
    futures: list[concurrent.futures.Future[int]] = []
    lock = threading.Lock()
    go = threading.Event()

    def sender(base: int) -> None:
        go.wait()
        for i in range(2000):
            f = intake.submit(base + i)
            with lock:
                futures.append(f)

    threads = [threading.Thread(target=sender, args=(k * 10_000,)) for k in range(3)]
    for t in threads:
        t.start()
    go.set()
    # The loop stops somewhere in the middle of the sends, then the intake closes.
    loop.call_soon_threadsafe(loop.stop)
    runner.join(10)
    intake.close(closed)
    for t in threads:
        t.join(10)
    try:
        assert len(futures) == 6000
        done, pending = concurrent.futures.wait(futures, timeout=10)
        assert not pending
        outcomes = {type(f.exception()) if f.exception() else int for f in done}
        assert outcomes <= {int, ClientClosedError}
    finally:
        loop.close()
