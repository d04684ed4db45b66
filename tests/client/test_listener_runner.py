"""ListenerRunner's hand-over: a caught-up (prompt) run on an idle runner goes to a worker
thread at once and comes back to the loop; a listener blocked on one request does not keep a
later prompt one from running on another worker."""

from __future__ import annotations

import asyncio
import threading
import time
from types import SimpleNamespace
from typing import Any

from ferrymq.client.consumer.runner import ConsumeRequest, ListenerRunner


class Queue:
    dropped = False


async def _wait(event: asyncio.Event, what: str) -> None:
    try:
        async with asyncio.timeout(10):
            await event.wait()
    except TimeoutError:
        raise AssertionError(f"{what} did not happen within 10 s") from None


def test_a_prompt_run_on_an_idle_runner_runs_on_a_worker_and_comes_back() -> None:
    async def scenario() -> None:
        loop_thread = threading.current_thread()
        ran_on: list[threading.Thread] = []

        def listener(msgs: list[Any], ctx: Any) -> str:
            ran_on.append(threading.current_thread())
            return "ok"

        runner = ListenerRunner(listener, 4, "t-prompt")
        back: list[ConsumeRequest] = []
        returned = asyncio.Event()

        def done(reqs: list[ConsumeRequest]) -> None:
            back.extend(reqs)
            returned.set()

        runner.on_done = done
        req = ConsumeRequest(Queue(), [b"m"], None)
        runner.submit([req], prompt=True)
        await _wait(returned, "the hand-back")
        await runner.wait_idle()
        runner.shutdown()
        assert back == [req] and req.ran and req.result == "ok"
        assert ran_on and ran_on[0] is not loop_thread

    asyncio.run(scenario())


def test_a_blocked_listener_does_not_strand_a_later_prompt_run() -> None:
    async def scenario() -> None:
        release = threading.Event()
        finished: list[bytes] = []
        second_done = asyncio.Event()
        loop = asyncio.get_running_loop()

        def listener(msgs: list[Any], ctx: Any) -> str:
            if msgs[0] == b"blocks":
                release.wait(10)
            finished.append(msgs[0])
            if msgs[0] == b"later":
                loop.call_soon_threadsafe(second_done.set)
            return "ok"

        runner = ListenerRunner(listener, 4, "t-blocked")
        runner.submit([ConsumeRequest(Queue(), [b"blocks"], None)], prompt=True)
        runner.submit([ConsumeRequest(Queue(), [b"later"], None)], prompt=True)
        try:
            await _wait(second_done, "the later run")
            assert finished == [b"later"]
        finally:
            release.set()
        await runner.wait_idle()
        runner.shutdown()
        assert sorted(finished) == [b"blocks", b"later"]

    asyncio.run(scenario())


def test_a_long_run_of_quick_requests_is_not_spread_over_threads() -> None:
    """Workers are added for requests that wait while the running workers wait too (in I/O, a
    sleep); not while they compute: 2,000 busy requests of ~20 us each (40 ms in all, twenty
    times the spawn delay) stay on one or two threads; a loaded machine can make the CPU clocks
    read like waiting now and then, so up to four are allowed: the rule this replaced (spawn
    whenever the oldest request waited 2 ms) started all twenty. test_push_threads has the
    other side: a sleeping listener gets more threads."""
    async def scenario() -> None:
        threads: set[int] = set()

        def listener(msgs: list[Any], ctx: Any) -> str:
            threads.add(threading.get_ident())
            end = time.thread_time() + 20e-6
            while time.thread_time() < end:
                pass
            return "ok"

        runner = ListenerRunner(listener, 20, "t-quick")
        runner.submit([ConsumeRequest(Queue(), [b"m"], None) for _ in range(2000)])
        async with asyncio.timeout(60):
            await runner.wait_idle()
        runner.shutdown()
        assert len(threads) <= 4, len(threads)

    asyncio.run(scenario())


def test_a_non_blocking_listener_runs_on_the_loop_and_its_results_come_back() -> None:
    """blocking=False: no worker thread is started; every request runs in the submitting
    loop turn, a dropped queue's request is skipped, a raise becomes no result, and the
    results reach on_done in a later turn (the submitter is not re-entered)."""

    async def scenario() -> None:
        loop_thread = threading.current_thread()
        ran_on: list[threading.Thread] = []

        def listener(msgs: list[Any], ctx: Any) -> str:
            ran_on.append(threading.current_thread())
            if msgs[0] is bad:
                raise ValueError("bad message")
            return "ok"

        bad = SimpleNamespace(msg_id="bad-id")  # a message as the failure log reads it
        runner = ListenerRunner(listener, 4, "t-inline", blocking=False)
        back: list[ConsumeRequest] = []
        returned = asyncio.Event()

        def done(reqs: list[ConsumeRequest]) -> None:
            back.extend(reqs)
            returned.set()

        runner.on_done = done
        dropped = Queue()
        dropped.dropped = True
        reqs = [ConsumeRequest(Queue(), [b"m"], None),
                ConsumeRequest(Queue(), [bad], SimpleNamespace(message_queue="q")),
                ConsumeRequest(dropped, [b"gone"], None)]
        runner.submit(reqs, prompt=True)
        assert len(ran_on) == 2 and back == []  # ran now, handed back in a later turn
        await _wait(returned, "the hand-back")
        await runner.wait_idle()
        assert back == reqs
        assert [r.ran for r in reqs] == [True, True, False]
        assert [r.result for r in reqs] == ["ok", None, None]
        assert all(t is loop_thread for t in ran_on)
        # no worker thread of this runner (named by its prefix) was started; the process's
        # whole thread count is not compared, as an earlier test's threads may end meanwhile
        assert not [t for t in threading.enumerate() if t.name.startswith("t-inline")]
        assert runner._executor is None
        assert await runner.call([b"m"], None) == "ok" and ran_on[-1] is loop_thread
        runner.shutdown()

    asyncio.run(scenario())
