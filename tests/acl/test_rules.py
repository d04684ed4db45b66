"""plain_acl.yml parsing, address patterns, signatures and the per-request decision, as pure
functions (the servers using them are tested in test_acl_servers.py)."""

from __future__ import annotations

import base64
import hashlib
import hmac

import pytest

from ferrymq.acl import (
    AclConfigError,
    Credentials,
    Perm,
    check_permission,
    check_request,
    content_to_sign,
    parse_address_pattern,
    parse_rules,
    sign,
)
from ferrymq.acl.address import AddressPatternError, host_of
from ferrymq.acl.resources import needs_of
from ferrymq.common import jsonx
from ferrymq.common.codes import RequestCode
from ferrymq.common.headers import fields
from ferrymq.remoting import RemotingCommand

# RocketMQ's distribution/conf/plain_acl.yml
ROCKETMQ_SAMPLE = """
globalWhiteRemoteAddresses:
  - 10.10.103.*
  - 192.168.0.*

accounts:
  - accessKey: RocketMQ
    secretKey: 12345678
    whiteRemoteAddress:
    admin: false
    defaultTopicPerm: DENY
    defaultGroupPerm: SUB
    topicPerms:
      - topicA=DENY
      - topicB=PUB|SUB
      - topicC=SUB
    groupPerms:
      # the group should convert to retry topic
      - groupA=DENY
      - groupB=PUB|SUB
      - groupC=SUB

  - accessKey: rocketmq2
    secretKey: 12345678
    whiteRemoteAddress: 192.168.1.*
    # if it is admin, it could access all resources
    admin: true
"""


def test_rocketmq_sample_file_parses_as_rocketmq_reads_it() -> None:
    rules = parse_rules(ROCKETMQ_SAMPLE)
    assert [p.text for p in rules.global_white] == ["10.10.103.*", "192.168.0.*"]
    user = rules.accounts["RocketMQ"]
    assert user.secret_key == "12345678"  # a YAML number, taken as text
    assert not user.admin and user.default_topic_perm == Perm.DENY and user.default_group_perm == Perm.SUB
    assert user.resource_perms == {"topicA": Perm.DENY, "topicB": Perm.PUB | Perm.SUB, "topicC": Perm.SUB,
                                   "%RETRY%groupA": Perm.DENY, "%RETRY%groupB": Perm.PUB | Perm.SUB,
                                   "%RETRY%groupC": Perm.SUB}
    assert not user.white_remote_address.matches("1.2.3.4")
    admin = rules.accounts["rocketmq2"]
    assert admin.admin and admin.resource_perms is None
    assert admin.white_remote_address.matches("192.168.1.77") and not admin.white_remote_address.matches("192.168.2.1")


@pytest.mark.parametrize(("text", "reason"), [
    ("accounts: [{accessKey: short, secretKey: 12345678}]", "longer than 6"),
    ("accounts: [{accessKey: abcdefgh, secretKey: 12345678, topicPerms: [t1=READ]}]", "is not DENY"),
    ("accounts: [{accessKey: abcdefgh, secretKey: 12345678, topicPerms: [t1]}]", "name=PERM"),
    ("accounts: [{accessKey: abcdefgh, secretKey: 12345678}, {accessKey: abcdefgh, secretKey: 87654321}]",
     "given twice"),
    ("globalWhiteRemoteAddresses: [300.1.1.*]", "0..255"),
    ("accounts: {accessKey: abcdefgh}", "must be a list"),
    ("accounts: [unclosed", "not YAML"),
    ("- just a list", "top level"),
])
def test_bad_files_are_refused_with_the_reason(text: str, reason: str) -> None:
    with pytest.raises(AclConfigError, match=reason):
        parse_rules(text, "acl.yml")


def test_an_empty_file_has_no_accounts() -> None:
    assert parse_rules("").accounts == {}


@pytest.mark.parametrize(("pattern", "yes", "no"), [
    ("*", ["1.2.3.4", "::1"], []),
    ("192.168.1.*", ["192.168.1.0", "192.168.1.255"], ["192.168.2.1", "10.0.0.1"]),
    ("10.1.1-20.*", ["10.1.1.9", "10.1.20.255"], ["10.1.21.1", "10.1.0.3"]),
    ("192.168.0.{1,2}", ["192.168.0.1", "192.168.0.2"], ["192.168.0.3"]),
    ("127.0.0.1,10.0.0.2", ["127.0.0.1", "10.0.0.2", "::ffff:127.0.0.1"], ["127.0.0.2"]),
    ("::1", ["0:0:0:0:0:0:0:1"], ["127.0.0.1"]),
    ("", [], ["127.0.0.1"]),
])
def test_address_patterns(pattern: str, yes: list[str], no: list[str]) -> None:
    p = parse_address_pattern(pattern)
    assert all(p.matches(ip) for ip in yes)
    assert not any(p.matches(ip) for ip in no)


def test_bad_address_patterns_and_remote_hosts() -> None:
    for bad in ("1.2.3", "1.2.3.x-", "abc", "fe80::*"):
        with pytest.raises(AddressPatternError):
            parse_address_pattern(bad)
    assert host_of("127.0.0.1:1234") == "127.0.0.1"
    assert host_of("::1:1234") == "::1"


def test_permission_bits_as_rocketmq_checks_them() -> None:
    assert check_permission(Perm.PUB, Perm.PUB | Perm.SUB)
    assert not check_permission(Perm.PUB, Perm.SUB)
    assert not check_permission(Perm.SUB, Perm.DENY | Perm.SUB)
    assert check_permission(Perm.ANY, Perm.SUB)


def test_signature_is_hmac_sha1_over_sorted_field_values_then_body() -> None:
    cmd = RemotingCommand.request(RequestCode.SEND_MESSAGE_V2, ext_fields={"b": "T", "a": "G", "z": "1"},
                                  body=b"payload")
    shared = cmd.ext_fields
    sign(cmd, Credentials("myAccess1", "mySecret1"))
    assert shared == {"b": "T", "a": "G", "z": "1"}  # the caller's dict is not changed
    # Sorted names: AccessKey, a, b, z (upper case sorts first, as Java's TreeMap sorts).
    expected = base64.b64encode(hmac.new(b"mySecret1", b"myAccess1GT1payload", hashlib.sha1).digest()).decode()
    assert cmd.ext_fields["Signature"] == expected
    assert cmd.ext_fields["AccessKey"] == "myAccess1"
    assert content_to_sign(cmd.ext_fields, cmd.body) == b"myAccess1GT1payload"
    sign(cmd, Credentials("myAccess1", "mySecret1", security_token="tok"))
    assert cmd.ext_fields["SecurityToken"] == "tok"


RULES = parse_rules("""
accounts:
  - accessKey: adminKey1
    secretKey: adminSecret1
    admin: true
  - accessKey: appKey01
    secretKey: appSecret01
    defaultTopicPerm: DENY
    defaultGroupPerm: SUB
    topicPerms: [orders=PUB|SUB, audit=SUB, RMQ_SYS_TRACE_TOPIC=DENY]
    groupPerms: [blocked-g=DENY]
  - accessKey: whiteKey1
    secretKey: whiteSecret1
    whiteRemoteAddress: 10.0.0.*
""")
APP = Credentials("appKey01", "appSecret01")


def _req(code: int, creds: Credentials | None = APP, body: bytes | None = None, **ext: object) -> RemotingCommand:
    cmd = RemotingCommand.request(code, ext_fields=fields(**ext), body=body)
    return sign(cmd, creds) if creds is not None else cmd


def test_sends_need_pub_on_the_topic() -> None:
    assert check_request(RULES, _req(RequestCode.SEND_MESSAGE_V2, a="pg", b="orders"), "1.1.1.1") is None
    denial = check_request(RULES, _req(RequestCode.SEND_MESSAGE_V2, a="pg", b="audit"), "1.1.1.1")
    assert denial is not None and denial.resource == "audit" and denial.needed == "PUB"
    assert "accessKey=appKey01 has no PUB permission on topic audit" in denial.remark
    # Not listed: the default topic permission (DENY).
    assert check_request(RULES, _req(RequestCode.SEND_MESSAGE, topic="other", producerGroup="pg"), "1.1.1.1")
    # Into a group's retry topic: SUB on the group.
    assert check_request(RULES, _req(RequestCode.SEND_MESSAGE_V2, a="g", b="%RETRY%g"), "1.1.1.1") is None
    assert check_request(RULES, _req(RequestCode.SEND_MESSAGE_V2, a="g", b="%RETRY%blocked-g"), "1.1.1.1")
    # Message trace data is let through, as RocketMQ does.
    assert check_request(RULES, _req(RequestCode.SEND_MESSAGE_V2, a="g", b="RMQ_SYS_TRACE_TOPIC"), "1.1.1.1") is None
    # A recall writes to the topic (RECALL_MESSAGE, RocketMQ 5.3).
    recall = _req(RequestCode.RECALL_MESSAGE, topic="orders", recallHandle="h")
    assert needs_of(recall).resources == {"orders": Perm.PUB}


def test_pulls_offsets_and_heartbeats_need_sub_on_group_and_topic() -> None:
    ok = _req(RequestCode.PULL_MESSAGE, consumerGroup="g1", topic="audit", queueId=0)
    assert check_request(RULES, ok, "1.1.1.1") is None
    denial = check_request(RULES, _req(RequestCode.PULL_MESSAGE, consumerGroup="blocked-g", topic="audit"), "1.1.1.1")
    assert denial is not None and "group blocked-g" in denial.remark
    assert check_request(RULES, _req(RequestCode.UPDATE_CONSUMER_OFFSET, consumerGroup="g1", topic="nope"), "1.1.1.1")
    beat = jsonx.dumps_bytes({"clientID": "c", "producerDataSet": [], "consumerDataSet": [
        {"groupName": "g1", "subscriptionDataSet": [{"topic": "orders"}, {"topic": "secret"}]}]})
    denial = check_request(RULES, _req(RequestCode.HEART_BEAT, body=beat), "1.1.1.1")
    assert denial is not None and denial.resource == "secret"
    assert needs_of(_req(RequestCode.HEART_BEAT, body=beat)).resources == {
        "%RETRY%g1": Perm.SUB, "orders": Perm.SUB, "secret": Perm.SUB}


def test_admin_requests_need_an_admin_account() -> None:
    create = _req(RequestCode.UPDATE_AND_CREATE_TOPIC, topic="orders")
    denial = check_request(RULES, create, "1.1.1.1")
    assert denial is not None and denial.needed == "admin" and "needs an admin account" in denial.remark
    admin = _req(RequestCode.UPDATE_AND_CREATE_TOPIC, creds=Credentials("adminKey1", "adminSecret1"), topic="x")
    assert check_request(RULES, admin, "1.1.1.1") is None
    reset = _req(RequestCode.INVOKE_BROKER_TO_RESET_OFFSET, topic="orders", group="g1", timestamp=0)
    assert check_request(RULES, reset, "1.1.1.1") is not None
    clone = _req(RequestCode.CLONE_GROUP_OFFSET, srcGroup="g1", destGroup="g2", topic="orders")
    denial = check_request(RULES, clone, "1.1.1.1")
    assert denial is not None and denial.needed == "admin"


def test_unsigned_unknown_and_forged_requests_are_refused() -> None:
    unsigned = _req(RequestCode.GET_BROKER_RUNTIME_INFO, creds=None)
    assert "carries no AccessKey" in check_request(RULES, unsigned, "1.1.1.1").remark  # type: ignore[union-attr]
    stranger = _req(RequestCode.GET_BROKER_RUNTIME_INFO, creds=Credentials("nobody12", "whatever1"))
    assert "no account 'nobody12'" in check_request(RULES, stranger, "1.1.1.1").remark  # type: ignore[union-attr]
    forged = _req(RequestCode.SEND_MESSAGE_V2, creds=Credentials("appKey01", "guessed!!"), a="pg", b="orders")
    assert "signature check failed" in check_request(RULES, forged, "1.1.1.1").remark  # type: ignore[union-attr]
    tampered = _req(RequestCode.SEND_MESSAGE_V2, a="pg", b="orders", body=b"one")
    tampered.body = b"two"
    assert check_request(RULES, tampered, "1.1.1.1") is not None


def test_white_listed_addresses_skip_the_signature() -> None:
    # The account's own white list: its key, any signature, from its addresses.
    cmd = _req(RequestCode.UPDATE_AND_CREATE_TOPIC, creds=Credentials("whiteKey1", "not-the-secret"), topic="t")
    assert check_request(RULES, cmd, "10.0.0.7") is None
    assert check_request(RULES, cmd, "10.0.1.7") is not None
    # The global white list: anything at all.
    open_rules = parse_rules("globalWhiteRemoteAddresses: [127.0.0.1]\naccounts: []")
    delete = _req(RequestCode.DELETE_TOPIC_IN_BROKER, creds=None, topic="t")
    assert check_request(open_rules, delete, "127.0.0.1") is None
    assert check_request(open_rules, delete, "127.0.0.2") is not None


def test_old_clients_unique_key_query_flag_added_after_signing() -> None:
    cmd = _req(RequestCode.QUERY_MESSAGE, topic="audit", key="k", maxNum=32, beginTimestamp=0, endTimestamp=1)
    cmd.ext_fields["_UNIQUE_KEY_QUERY"] = "true"
    assert check_request(RULES, cmd, "1.1.1.1") is None


def test_refusals_name_the_action_and_resource_and_how_to_sign() -> None:
    unsigned = _req(RequestCode.SEND_MESSAGE_V2, creds=None, a="pg", b="orders")
    remark = check_request(RULES, unsigned, "1.1.1.1").remark  # type: ignore[union-attr]
    assert remark.startswith("ACL: send to topic orders (SEND_MESSAGE_V2, request code 310) from 1.1.1.1 "
                             "carries no AccessKey")
    assert "--access-key/--secret-key" in remark and "FERRYMQ_ACCESS_KEY/FERRYMQ_SECRET_KEY" in remark
    delete = _req(RequestCode.DELETE_TOPIC_IN_BROKER, topic="orders")
    remark = check_request(RULES, delete, "1.1.1.1").remark  # type: ignore[union-attr]
    assert remark.startswith("ACL: delete topic orders (DELETE_TOPIC_IN_BROKER, request code 215) needs an admin "
                             "account; accessKey=appKey01 is not one: sign with an admin account")
    assert "--access-key/--secret-key" in remark and "FERRYMQ_ACCESS_KEY" in remark
    stranger = _req(RequestCode.UPDATE_AND_CREATE_TOPIC, creds=Credentials("nobody12", "whatever1"), topic="t")
    remark = check_request(RULES, stranger, "1.1.1.1").remark  # type: ignore[union-attr]
    assert "update topic config of topic t (UPDATE_AND_CREATE_TOPIC, request code 17)" in remark
    assert "FERRYMQ_ACCESS_KEY" in remark
    pull = _req(RequestCode.PULL_MESSAGE, creds=None, consumerGroup="g1", topic="orders")
    assert "pull from topic orders of group g1 (PULL_MESSAGE" in check_request(  # type: ignore[union-attr]
        RULES, pull, "1.1.1.1").remark
