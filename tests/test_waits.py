"""The shared polling helper: it returns what the condition answered, and a timeout names what
was awaited and what was last seen."""

from __future__ import annotations

import itertools

import pytest

from waits import WaitTimedOut, eventually, wait_until


def test_wait_until_returns_the_first_truthy_answer() -> None:
    answers = iter([0, None, [], {"ready": 3}])
    assert wait_until(lambda: next(answers), 5.0, "a ready map") == {"ready": 3}


def test_wait_until_names_what_and_the_last_value_at_the_deadline() -> None:
    count = itertools.count()
    with pytest.raises(WaitTimedOut) as failed:
        wait_until(lambda: next(count) * 0, timeout=0.05, what="the queue to fill", interval=0.001)
    assert failed.value.what == "the queue to fill"
    assert failed.value.last == 0
    assert "the queue to fill" in str(failed.value) and "last seen: 0" in str(failed.value)
    assert isinstance(failed.value, AssertionError)


def test_wait_until_takes_message_as_another_name_for_what() -> None:
    with pytest.raises(WaitTimedOut) as failed:
        wait_until(lambda: "", timeout=0.0, message="the old spelling")
    assert failed.value.what == "the old spelling"


async def test_eventually_takes_plain_and_async_probes() -> None:
    plain = iter([False, False, "plain"])
    assert await eventually(lambda: next(plain), 5.0, "a plain answer") == "plain"

    answers = iter([None, 7])

    async def probe() -> int | None:
        return next(answers)

    assert await eventually(probe, what="an async answer") == 7


async def test_eventually_names_what_and_the_last_value_at_the_deadline() -> None:
    async def probe() -> list[int]:
        return []

    with pytest.raises(WaitTimedOut) as failed:
        await eventually(probe, timeout=0.0, what="the route")
    assert (failed.value.what, failed.value.last) == ("the route", [])
