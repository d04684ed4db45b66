"""ACL on real servers: a `ferrymq standalone` process checking a plain_acl.yml, driven by
ferrymq's clients, the CLI and raw remoting requests over TCP. Allowed and denied requests,
admin-only operations, a refused send that stores nothing, hot reload (and a bad file that
keeps the rules), white-listed addresses, and the name server refusing broker registrations
without the cluster's credentials."""

from __future__ import annotations

import asyncio
import json
import logging
import zlib
from collections.abc import Iterator
from pathlib import Path

import pytest
from acl_util import ADMIN, APP, RULES, run_cli, start_acl_standalone, write_rules

from conftest import Standalone
from ferrymq import (
    AdminClient,
    ConsumeFromWhere,
    ConsumeStatus,
    LitePullConsumer,
    Message,
    MessageExt,
    Producer,
    PushConsumer,
    SimpleConsumer,
)
from ferrymq.acl import Credentials, sign
from ferrymq.client.errors import NoPermissionError, SendError
from ferrymq.common import jsonx
from ferrymq.common.codes import RequestCode, ResponseCode
from ferrymq.common.headers import fields
from ferrymq.remoting import RemotingClient, RemotingCommand
from waits import wait_until


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Standalone]:
    srv, _ = start_acl_standalone(tmp_path_factory.mktemp("acl"))
    try:
        with AdminClient(srv.namesrv, **ADMIN) as admin:
            for topic in ("acl-rw", "acl-ro", "acl-hot"):
                admin.create_topic(topic, 2)
        yield srv
    finally:
        srv.stop()


def _stored(admin: AdminClient, topic: str) -> int:
    return sum(admin.max_offset(mq) for mq in admin.message_queues(topic))


def test_signed_clients_send_and_consume_what_their_account_allows(server: Standalone) -> None:
    with Producer("acl-pg", server.namesrv, **APP) as producer:
        sent = {producer.send(Message("acl-rw", f"m{i}".encode())).msg_id for i in range(5)}
    consumer = LitePullConsumer("acl-cg", server.namesrv, consume_from_where=ConsumeFromWhere.FIRST_OFFSET,
                                pull_suspend_timeout=1.0,
                                **APP)
    consumer.subscribe("acl-rw")
    with consumer:
        got: set[str] = set()
        wait_until(lambda: got.update(m.msg_id for m in consumer.poll(0.5)) or sent <= got, 30,
                   what="the account's consumer to receive what it sent")


def test_push_consumer_retries_and_simple_consumer_acks_under_acl(server: Standalone) -> None:
    """Heartbeats, pulls of the topic and of the group's retry topic, send-backs, offset commits
    and pop/ack all pass for an account with SUB on the topic and the group."""
    seen: dict[str, int] = {}

    def listener(msgs: list[MessageExt], ctx: object) -> ConsumeStatus:
        for m in msgs:
            seen[m.body.decode()] = seen.get(m.body.decode(), 0) + 1
        # The first delivery of "retry-me" fails: it comes back through %RETRY%acl-push-g.
        return ConsumeStatus.RECONSUME_LATER if any(
            m.body == b"retry-me" and m.reconsume_times == 0 for m in msgs) else ConsumeStatus.CONSUME_SUCCESS

    consumer = PushConsumer("acl-push-g", server.namesrv, consume_from_where=ConsumeFromWhere.FIRST_OFFSET,
                            pull_suspend_timeout=1.0, **APP)
    consumer.subscribe("acl-rw")
    consumer.register_listener(listener)
    with consumer, Producer("acl-push-pg", server.namesrv, **APP) as producer:
        producer.send(Message("acl-rw", b"retry-me"))
        wait_until(lambda: seen.get("retry-me", 0) >= 2, 30, what="the failed message to be redelivered")
    with SimpleConsumer("acl-pop-g", server.namesrv, **APP) as simple:
        simple.subscribe("acl-rw")
        got: list[MessageExt] = []

        def received() -> bool:
            got.extend(simple.receive(16, 30.0))
            return any(m.body == b"retry-me" for m in got)

        wait_until(received, 30, what="pop to receive")
        for m in got:
            simple.ack(m)


def test_denied_send_gets_no_permission_and_stores_nothing(server: Standalone) -> None:
    with AdminClient(server.namesrv, **ADMIN) as admin:
        before = _stored(admin, "acl-ro")
        with Producer("acl-pg2", server.namesrv, retry_times_when_send_failed=0, **APP) as producer, \
                pytest.raises(SendError) as info:
            producer.send(Message("acl-ro", b"refused"))
        text = str(info.value)
        assert "NO_PERMISSION" in text
        assert "accessKey=appKey01 has no PUB permission on topic acl-ro (it has SUB)" in text
        assert _stored(admin, "acl-ro") == before


def test_consumer_of_a_denied_group_is_refused(server: Standalone) -> None:
    async def pull() -> RemotingCommand:
        client = RemotingClient(signer=lambda c: sign(c, Credentials(APP["access_key"], APP["secret_key"])))
        try:
            req = RemotingCommand.request(RequestCode.PULL_MESSAGE, ext_fields=fields(
                consumerGroup="acl-banned-g", topic="acl-rw", queueId=0, queueOffset=0, maxMsgNums=1,
                sysFlag=0, commitOffset=0, suspendTimeoutMillis=0, subscription="*", subVersion=0))
            return await client.invoke(server.broker, req)
        finally:
            await client.close()

    resp = asyncio.run(pull())
    assert resp.code == ResponseCode.NO_PERMISSION
    assert resp.remark == "ACL: accessKey=appKey01 has no SUB permission on group acl-banned-g (it has DENY)"


def test_unsigned_and_wrongly_signed_requests_are_refused(server: Standalone) -> None:
    with AdminClient(server.namesrv) as admin, pytest.raises(NoPermissionError, match="carries no AccessKey"):
        admin.broker_config("broker-a")
    with AdminClient(server.namesrv, access_key="appKey01", secret_key="notTheSecret") as admin, \
            pytest.raises(NoPermissionError, match="signature check failed for accessKey=appKey01"):
        admin.broker_config("broker-a")


def test_admin_operations_need_an_admin_account(server: Standalone) -> None:
    with AdminClient(server.namesrv, **APP) as app:
        with pytest.raises(NoPermissionError, match=r"update topic config of topic acl-new \(UPDATE_AND_CREATE_TOPIC, "
                                                      r"request code 17\) needs an admin account; accessKey=appKey01"):
            app.create_topic("acl-new", 1)
        with pytest.raises(NoPermissionError, match="needs an admin account"):
            app.delete_topic("acl-rw")
        with pytest.raises(NoPermissionError, match="needs an admin account"):
            app.update_broker_config({"maxMessageSize": "1024"}, "broker-a")
        with pytest.raises(NoPermissionError, match="needs an admin account"):
            app.reset_offset_by_time("acl-cg", "acl-rw", 0)
        with pytest.raises(NoPermissionError, match=r"copy a group's offsets on topic acl-rw "
                                                      r"\(CLONE_GROUP_OFFSET, request code 314\) needs an admin"):
            app.clone_group_offset("acl-cg", "acl-cg2", "acl-rw")
    with AdminClient(server.namesrv, **ADMIN) as admin:
        admin.create_topic("acl-new", 1)
        assert "acl-new" in admin.topic_list()
        config = admin.broker_config("broker-a")
        assert config["maxMessageSize"] != "1024"
        # The standalone broker signs with the file's admin account; its secret is not shown.
        assert config["accessKey"] == "adminKey1" and config["secretKey"] == "******"


def test_cli_takes_credentials_from_options_and_environment(server: Standalone) -> None:
    denied = run_cli(server, "topic", "create", "acl-cli", "--json")
    assert denied.returncode == 1
    assert "carries no AccessKey" in json.loads(denied.stdout)["error"]["message"]
    created = run_cli(server, "topic", "create", "acl-cli", "--access-key", ADMIN["access_key"],
                      "--secret-key", ADMIN["secret_key"])
    assert created.returncode == 0, created.stderr
    env = {"FERRYMQ_ACCESS_KEY": ADMIN["access_key"], "FERRYMQ_SECRET_KEY": ADMIN["secret_key"]}
    listed = run_cli(server, "topic", "list", "--json", env=env)
    assert listed.returncode == 0 and "acl-cli" in listed.stdout, listed.stderr


def _register_request(broker_addr: str, topic: str) -> RemotingCommand:
    table = {topic: {"topicName": topic, "readQueueNums": 1, "writeQueueNums": 1, "perm": 6, "topicSysFlag": 0,
                     "order": False, "topicFilterType": "SINGLE_TAG"}}
    body = jsonx.dumps_bytes({"topicConfigSerializeWrapper": {
        "topicConfigTable": table, "dataVersion": {"timestamp": 1, "counter": 1}}, "filterServerList": []})
    return RemotingCommand.request(RequestCode.REGISTER_BROKER, ext_fields=fields(
        brokerAddr=broker_addr, brokerId=0, brokerName="broker-a", clusterName="DefaultCluster",
        haServerAddr="", compressed=False, bodyCrc32=zlib.crc32(body) & 0x7FFFFFFF), body=body)


def test_name_server_refuses_fake_broker_registrations(server: Standalone) -> None:
    fake = "127.0.0.1:1"

    async def attempt(creds: Credentials | None) -> list[RemotingCommand]:
        client = RemotingClient(signer=(lambda c: sign(c, creds)) if creds else None)
        try:
            reg = await client.invoke(server.namesrv, _register_request(fake, "acl-rw"))
            unreg = await client.invoke(server.namesrv, RemotingCommand.request(
                RequestCode.UNREGISTER_BROKER, ext_fields=fields(
                    brokerAddr=server.broker, brokerId=0, brokerName="broker-a", clusterName="DefaultCluster")))
            delete = await client.invoke(server.namesrv, RemotingCommand.request(
                RequestCode.DELETE_TOPIC_IN_NAMESRV, ext_fields=fields(topic="acl-rw")))
            return [reg, unreg, delete]
        finally:
            await client.close()

    for creds in (None, Credentials(APP["access_key"], APP["secret_key"])):
        for resp in asyncio.run(attempt(creds)):
            assert resp.code == ResponseCode.NO_PERMISSION, resp.remark
    with AdminClient(server.namesrv) as anyone:
        # Route queries stay open; the route still names the real broker only.
        route = anyone.topic_route("acl-rw", refresh=True)
        assert [dict(b.broker_addrs) for b in route.broker_datas] == [{0: server.broker}]


def test_hot_reload_and_a_bad_file_keeps_the_rules(tmp_path: Path) -> None:
    srv, acl = start_acl_standalone(tmp_path)
    try:
        with AdminClient(srv.namesrv, **ADMIN) as admin:
            admin.create_topic("acl-hot", 1)
        with Producer("acl-hot-pg", srv.namesrv, retry_times_when_send_failed=0, **APP) as producer:
            with pytest.raises(SendError, match="no PUB permission on topic acl-hot"):
                producer.send(Message("acl-hot", b"before"))
            write_rules(acl, RULES.replace("acl-hot=SUB", "acl-hot=PUB|SUB"))

            def sends() -> bool:
                try:
                    producer.send(Message("acl-hot", b"after"))
                    return True
                except SendError:
                    return False

            wait_until(sends, 10, what="the reloaded rules to allow the send")
            write_rules(acl, RULES + "\n  - accessKey: broken\n")  # too short a key: refused
            wait_until(lambda: any("the rules read before stay in force" in line for line in srv.log_lines), 10,
                       what="the bad file to be reported")
            assert any("longer than 6 characters" in line for line in srv.log_lines)
            producer.send(Message("acl-hot", b"still allowed"))
    finally:
        srv.stop()


def test_white_listed_addresses_need_no_signature(tmp_path: Path) -> None:
    white_account = RULES + """
  - accessKey: loopbackKey
    secretKey: loopbackSecret
    whiteRemoteAddress: 127.0.0.*
"""
    srv, acl = start_acl_standalone(tmp_path, white_account)
    try:
        # The account's own white list: its key with any signature, from 127.0.0.x.
        with AdminClient(srv.namesrv, access_key="loopbackKey", secret_key="wrongSecret") as admin:
            admin.create_topic("acl-white", 1)
        with AdminClient(srv.namesrv) as unsigned:
            with pytest.raises(NoPermissionError):
                unsigned.create_topic("acl-global", 1)
            write_rules(acl, "globalWhiteRemoteAddresses: [127.0.0.1]\n" + RULES)

            def created() -> bool:
                try:
                    unsigned.create_topic("acl-global", 1)
                    return True
                except NoPermissionError:
                    return False

            wait_until(created, 10, what="the global white list to let unsigned requests in")
    finally:
        srv.stop()


def test_shutdown_after_a_refusal_does_not_warn_about_unregistering(
    server: Standalone, caplog: pytest.LogCaptureFixture
) -> None:
    producer = Producer("acl-unsigned-pg", server.namesrv, retry_times_when_send_failed=0).start()
    try:
        with pytest.raises(SendError, match="carries no AccessKey"):
            producer.send(Message("acl-rw", b"unsigned"))
        with caplog.at_level(logging.DEBUG, logger="ferrymq.client"):
            producer.shutdown()
    finally:
        producer.shutdown()
    unregisters = [r for r in caplog.records if r.getMessage().startswith("unregister ")]
    # The broker refused the goodbye as it refused the send; that is said once, by the send.
    assert unregisters and all(r.levelno == logging.DEBUG for r in unregisters)
    assert "carries no AccessKey" in unregisters[0].getMessage()
