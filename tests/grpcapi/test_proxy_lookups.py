"""The proxy's route and config lookups (ClusterBackend) against a scripted client instance:
what a request waits on is held to the client's deadline as a whole, what it does not wait on
goes on in the background (and its failures are logged, never left unretrieved), and what is
kept is asked again once its time-to-live has passed."""

from __future__ import annotations

import asyncio
import gc
import time
from collections.abc import Iterator
from typing import Any

import pytest

from ferrymq.client.route import BrokerData, QueueData, TopicRoute
from ferrymq.grpc.pb import definition_pb2 as pb
from ferrymq.grpc.status import GrpcStatusError
from ferrymq.proxy.backend import ClusterBackend
from ferrymq.remoting import RemotingConnectError
from ferrymq.store import StoreMessage

TTL = 0.2


def _route(*groups: str) -> TopicRoute:
    return TopicRoute("T", tuple(QueueData(g, 2, 2, 6) for g in groups),
                      tuple(BrokerData("c", g, {0: f"127.0.0.1:{9000 + i}"}) for i, g in enumerate(groups)))


class _Api:
    timeout = 3.0

    def __init__(self) -> None:
        self.config_delay = 0.0
        self.orders: dict[str, bool] = {}
        self.config_calls = 0
        self.send_error: BaseException | None = None

    async def topic_config(self, addr: str, topic: str) -> dict[str, Any]:
        self.config_calls += 1
        await asyncio.sleep(self.config_delay)
        return {"order": self.orders.get(addr, False), "attributes": {}}

    async def cluster_info(self) -> dict[str, Any]:
        return {}

    async def send(self, addr: str, header: Any, body: Any, *, batch: bool, timeout: float) -> Any:
        await asyncio.sleep(timeout)
        assert self.send_error is not None
        raise self.send_error


class _Instance:
    """What ClusterBackend uses of a client instance, scripted."""

    def __init__(self, route: TopicRoute) -> None:
        self.api = _Api()
        self.next_route = route
        self.routes: dict[str, TopicRoute] = {}
        self.route_delay = 0.0
        self.route_error: BaseException | None = None
        self.fetches = 0
        self.after_failures = 0
        self.namesrv_failure = None

    def route_fetch_pending(self, topic: str) -> bool:
        return False

    async def update_route(self, topic: str) -> TopicRoute | None:
        self.fetches += 1
        await asyncio.sleep(self.route_delay)
        if self.route_error is not None:
            raise self.route_error
        self.routes[topic] = self.next_route
        return self.next_route

    def master_addr(self, broker_name: str) -> str | None:
        route = self.routes.get("T")
        for b in route.broker_datas if route else ():
            if b.broker_name == broker_name:
                return b.broker_addrs.get(0)
        return None

    async def after_failure(self, topic: str, exc: BaseException) -> bool:
        self.after_failures += 1
        await self.update_route(topic)
        return True


@pytest.fixture
def loop_errors() -> Iterator[list[dict[str, Any]]]:
    errors: list[dict[str, Any]] = []
    yield errors
    assert not errors, errors


def _backend(inst: _Instance, errors: list[dict[str, Any]]) -> ClusterBackend:
    asyncio.get_running_loop().set_exception_handler(lambda _loop, ctx: errors.append(ctx))
    return ClusterBackend(inst, route_ttl_s=TTL)  # type: ignore[arg-type]


async def _eventually(check: Any, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "not within the deadline"
        await asyncio.sleep(0.01)


async def test_a_topics_first_lookups_share_the_clients_deadline(loop_errors: list[dict[str, Any]]) -> None:
    inst = _Instance(_route("a"))
    backend = _backend(inst, loop_errors)
    inst.route_delay, inst.api.config_delay = 0.6, 10.0
    began = time.monotonic()
    with pytest.raises(GrpcStatusError) as refused:
        await backend.topic("T", timeout_s=1.0)
    assert refused.value.code == pb.PROXY_TIMEOUT
    assert time.monotonic() - began < 1.2  # the route's 0.6 s counted against the configs' wait
    await backend.close()


async def test_a_failed_sends_route_refetch_starts_even_when_its_deadline_is_spent(
        loop_errors: list[dict[str, Any]]) -> None:
    inst = _Instance(_route("a"))
    backend = _backend(inst, loop_errors)
    [group] = await backend.topic("T")
    inst.api.send_error = RemotingConnectError("127.0.0.1:9000", "no route to host")
    answer = await backend.put(group, 0, [_message()], half=False, timeout_s=0.3)
    assert answer.code == pb.PROXY_TIMEOUT
    await _eventually(lambda: inst.after_failures == 1)
    await backend.close()


async def test_a_route_that_gains_a_group_holds_no_request_up(loop_errors: list[dict[str, Any]]) -> None:
    inst = _Instance(_route("a"))
    backend = _backend(inst, loop_errors)
    inst.api.orders = {"127.0.0.1:9000": True}
    assert [g.order for g in await backend.topic("T")] == [True]
    inst.next_route = _route("a", "b")
    inst.routes["T"] = inst.next_route  # a refresh brought it
    inst.api.config_delay, calls = 10.0, inst.api.config_calls
    answers = await asyncio.wait_for(asyncio.gather(*(backend.topic("T", timeout_s=1.0) for _ in range(20))), 0.5)
    # Served from the route in hand, the new group taken to be of the others' kind; its
    # config is asked once for them all, in the background.
    assert all([(g.broker_name, g.order) for g in a] == [("a", True), ("b", True)] for a in answers)
    assert inst.api.config_calls - calls <= 2
    await backend.close()


async def test_kinds_are_asked_again_after_their_time_to_live_with_the_same_route(
        loop_errors: list[dict[str, Any]]) -> None:
    inst = _Instance(_route("a"))
    backend = _backend(inst, loop_errors)
    assert [g.order for g in await backend.topic("T")] == [False]
    inst.route_error = OSError("the name server keeps its old answer")  # the route object stays
    inst.api.orders = {"127.0.0.1:9000": True}

    async def ordered() -> bool:
        return [g.order for g in await backend.topic("T")] == [True]

    deadline = time.monotonic() + 5
    while not await ordered():
        assert time.monotonic() < deadline, "the topic's new kind never showed"
        await asyncio.sleep(0.05)
    await backend.close()


async def test_a_background_refresh_that_fails_is_logged_not_left_unretrieved(
        caplog: pytest.LogCaptureFixture) -> None:
    errors: list[dict[str, Any]] = []
    inst = _Instance(_route("a"))
    backend = _backend(inst, errors)
    await backend.topic("T")
    inst.route_error = TypeError("a route body of the wrong shape")
    fetches = inst.fetches
    await asyncio.sleep(TTL * 1.5)
    await backend.topic("T")  # stale: refreshed in the background, which fails
    await _eventually(lambda: inst.fetches > fetches and "wrong shape" in caplog.text)
    await backend.close()
    gc.collect()  # an unretrieved failure is reported when its task is collected
    assert not errors, errors


def _message() -> StoreMessage:
    return StoreMessage("T", 0, b"x", {"UNIQ_KEY": "u1"})
