"""ali-ons (accessKey/secretKey options), rocketmq-client-cpp (session credentials) and the
official RocketMQ 5 Python SDK over gRPC (Credentials), unchanged, against a broker with ACL on:
the first two sign as RocketMQ's AclClientRPCHook does, the SDK as RocketMQ 5's proxy expects,
and ferrymq checks it. Allowed: their account's topic, sent and consumed. Denied: a topic the
account may only subscribe to (NO_PERMISSION, nothing stored), a wrong secret key, and no
credentials at all."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from compat_util import Clients, bodies_received, by_body, max_offsets, run_producer, serve, wait_group_started
from compat_util import clients as clients

from conftest import Standalone
from ferrymq import AdminClient
from waits import wait_until

pytestmark = pytest.mark.compat

ADMIN = {"access_key": "adminKey1", "secret_key": "adminSecret1"}
APP = {"accessKey": "appKey01", "secretKey": "appSecret01"}
RULES = """
accounts:
  - accessKey: adminKey1
    secretKey: adminSecret1
    admin: true
  - accessKey: appKey01
    secretKey: appSecret01
    defaultTopicPerm: DENY
    defaultGroupPerm: SUB
    topicPerms: [ons-acl-rw=PUB|SUB, ons-acl-ro=SUB, cpp-acl-rw=PUB|SUB, cpp-acl-ro=SUB, sdk-acl-rw=PUB|SUB,
                 sdk-acl-ro=SUB]
    groupPerms: [sdk-acl-banned=DENY]
"""
TOPICS = ("ons-acl-rw", "ons-acl-ro", "cpp-acl-rw", "cpp-acl-ro", "sdk-acl-rw", "sdk-acl-ro")


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Standalone]:
    rules = tmp_path_factory.mktemp("acl-rules") / "plain_acl.yml"
    rules.write_text(RULES)
    with serve(tmp_path_factory, "acl-compat", "--acl-file", str(rules)) as srv:
        yield srv


@pytest.fixture(scope="module")
def admin(server: Standalone) -> Iterator[AdminClient]:
    """The shared `admin`, signing as the admin account, with the tests' topics created."""
    with AdminClient(server.namesrv, **ADMIN) as client:
        for topic in TOPICS:
            client.create_topic(topic, 2)
        yield client


def _errors(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [e for e in events if e["event"] in ("send_error", "error", "fatal")]


def _broker_said(server: Standalone, *texts: str) -> None:
    """The clients report a refusal in their own words (ali-ons: "Send [4] times, still
    failed"); the broker's log says which rule refused it."""
    wait_until(lambda: any(all(t in line for t in texts) for line in server.log_lines), 10,
               what=f"broker log: {texts}")


# --- ali-ons --------------------------------------------------------------------------------
def test_ali_ons_signed_producer_and_consumer_work_on_their_topic(clients: Clients, admin: AdminClient) -> None:
    topic, n = "ons-acl-rw", 50
    consumer = clients.ons_consumer(topic=topic, group="ons-acl-g", consumeFromWhere="first", **APP)
    consumer.wait_event("ready", 30)
    sent = run_producer(clients.ons_producer(topic=topic, count=n, **APP), n, 60)
    assert all(s["sendStatus"] == "SEND_OK" for s in sent)
    consumer.wait_received(bodies_received({s["body"] for s in sent}), 60, f"all {n} messages")
    assert not [b for b, evs in by_body(consumer.received()).items() if len(evs) > 1]
    assert sum(max_offsets(admin, topic).values()) == n


def test_ali_ons_denied_send_stores_nothing(server: Standalone, clients: Clients, admin: AdminClient) -> None:
    producer = clients.ons_producer(topic="ons-acl-ro", count=1, **APP)
    producer.wait_event("done", 60)
    assert not producer.of("sent") and _errors(producer.events), producer.diag()
    _broker_said(server, "accessKey=appKey01 has no PUB permission on topic ons-acl-ro")
    assert sum(max_offsets(admin, "ons-acl-ro").values()) == 0


@pytest.mark.parametrize("creds", [{"accessKey": "appKey01", "secretKey": "wrongSecret"}, {}],
                         ids=["wrong-secret", "unsigned"])
def test_ali_ons_without_valid_credentials_is_refused(server: Standalone, clients: Clients, admin: AdminClient,
                                                      creds: dict[str, str]) -> None:
    producer = clients.ons_producer(topic="ons-acl-rw", count=1, sendMsgTimeout=2000, **creds)
    producer.wait_any(("done", "fatal"), 60, "the producer to give up")
    assert not producer.of("sent"), producer.diag()
    _broker_said(server, "signature check failed for accessKey=appKey01" if creds else "carries no AccessKey")
    assert sum(max_offsets(admin, "ons-acl-rw").values()) == 50  # what the allowed test sent, no more


# --- rocketmq-client-cpp --------------------------------------------------------------------
def test_cpp_session_credentials_producer_and_consumer_work_on_their_topic(clients: Clients,
                                                                           admin: AdminClient) -> None:
    topic, n = "cpp-acl-rw", 50
    consumer = clients.cpp_consumer(topic=topic, group="cpp-acl-g", **APP)
    consumer.wait_event("ready", 30)
    sent = run_producer(clients.cpp_producer(topic=topic, count=n, **APP), n, 60)
    assert all(s["sendStatus"] == "OK" for s in sent)
    consumer.wait_received(bodies_received({s["body"] for s in sent}), 60, f"all {n} messages")
    assert sum(max_offsets(admin, topic).values()) == n


def test_cpp_denied_send_stores_nothing(server: Standalone, clients: Clients, admin: AdminClient) -> None:
    producer = clients.cpp_producer(topic="cpp-acl-ro", count=1, **APP)
    producer.wait_event("done", 60)
    assert not producer.of("sent") and _errors(producer.events), producer.diag()
    _broker_said(server, "accessKey=appKey01 has no PUB permission on topic cpp-acl-ro")
    assert sum(max_offsets(admin, "cpp-acl-ro").values()) == 0


def test_cpp_wrong_secret_is_refused(server: Standalone, clients: Clients, admin: AdminClient) -> None:
    producer = clients.cpp_producer(topic="cpp-acl-rw", count=1, accessKey="appKey01", secretKey="wrongSecret")
    producer.wait_any(("done", "fatal"), 60, "the producer to give up")
    assert not producer.of("sent"), producer.diag()
    _broker_said(server, "signature check failed for accessKey=appKey01")
    assert sum(max_offsets(admin, "cpp-acl-rw").values()) == 50


# --- RocketMQ 5 SDK over gRPC ---------------------------------------------------------------
def test_sdk5_signed_producer_and_simple_consumer_work_on_their_topic(clients: Clients, admin: AdminClient) -> None:
    topic, group, n = "sdk-acl-rw", "sdk-acl-g", 20
    consumer = clients.sdk5("simple", topic=topic, group=group, expect=n, awaitSec=2, **APP)
    consumer.wait_event("ready", 30)
    wait_group_started(admin, group, topic)
    sent = run_producer(clients.sdk5("produce", topic=topic, count=n, **APP), n, 60)
    assert sum(max_offsets(admin, topic).values()) == n
    consumer.wait_received(bodies_received({s["body"] for s in sent}), 60, f"all {n} messages")
    assert consumer.wait_exit(60) == 0 and len(consumer.of("acked")) == n, consumer.diag()


def test_sdk5_denied_send_stores_nothing(server: Standalone, clients: Clients, admin: AdminClient) -> None:
    producer = clients.sdk5("produce", topic="sdk-acl-ro", count=1, **APP)
    producer.wait_any(("done", "fatal"), 60, "the producer to give up")
    assert not producer.of("sent"), producer.diag()
    _broker_said(server, "accessKey=appKey01 has no PUB permission on topic sdk-acl-ro")
    assert sum(max_offsets(admin, "sdk-acl-ro").values()) == 0


def test_sdk5_wrong_secret_and_denied_group_are_refused(server: Standalone, clients: Clients,
                                                        admin: AdminClient) -> None:
    producer = clients.sdk5("produce", topic="sdk-acl-rw", count=1, accessKey="appKey01", secretKey="wrongSecret")
    producer.wait_any(("done", "fatal"), 60, "the producer to give up")
    assert not producer.of("sent"), producer.diag()
    _broker_said(server, "refused gRPC call", "signature check failed for accessKey=appKey01")
    consumer = clients.sdk5("simple", topic="sdk-acl-rw", group="sdk-acl-banned", idleExitMs=3_000, **APP)
    consumer.wait_any(("receive_error", "fatal", "closed"), 60, "the banned group's consumer to be refused")
    assert not consumer.of("received"), consumer.diag()
    _broker_said(server, "accessKey=appKey01 has no SUB permission on group sdk-acl-banned")
