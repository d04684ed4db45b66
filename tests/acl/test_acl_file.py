"""AclFile (the rules of a file kept current) and AclGuard's refusal log, on real files and a
real Connection-less call path."""

from __future__ import annotations

import json
import logging
import os
import subprocess
from pathlib import Path

import pytest
from acl_util import RULES, write_rules

from ferrymq.acl import AclConfigError, AclFile, AclGuard
from ferrymq.common.codes import RequestCode, ResponseCode
from ferrymq.remoting import RemotingCommand
from ferrymq_cmd import run_ferrymq


def test_reload_applies_a_valid_change_and_keeps_the_rules_on_a_bad_one(tmp_path: Path,
                                                                        caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "plain_acl.yml"
    write_rules(path, RULES)
    acl = AclFile(path, poll_interval=0.01)
    assert set(acl.rules.accounts) == {"adminKey1", "appKey01"}
    assert not acl.reload_if_changed()  # unchanged: not read again
    write_rules(path, RULES.replace("appKey01", "appKey02"))
    assert acl.reload_if_changed() and set(acl.rules.accounts) == {"adminKey1", "appKey02"}
    before = acl.rules
    write_rules(path, "accounts: [{accessKey: short, secretKey: x}]")
    with caplog.at_level(logging.ERROR, "ferrymq.acl"):
        assert not acl.reload_if_changed()
    assert acl.rules is before and acl.last_error is not None and "longer than 6" in acl.last_error
    assert "the rules read before stay in force" in caplog.text
    os.remove(path)
    assert not acl.reload_if_changed() and acl.rules is before  # a vanished file keeps the rules too


def test_a_bad_file_at_start_is_an_error(tmp_path: Path) -> None:
    path = tmp_path / "plain_acl.yml"
    write_rules(path, "accounts: [{accessKey: abcdefgh, secretKey: 12345678, defaultTopicPerm: READ}]")
    with pytest.raises(AclConfigError, match="is not DENY, PUB, SUB"):
        AclFile(path)
    with pytest.raises(AclConfigError, match="No such file"):
        AclFile(tmp_path / "missing.yml")


class _Peer:
    remote_addr = "10.1.2.3:4567"


def test_guard_answers_no_permission_and_logs_each_reason_once_per_interval(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "plain_acl.yml"
    write_rules(path, RULES)
    now = [0.0]
    guard = AclGuard(AclFile(path), clock=lambda: now[0])
    req = RemotingCommand.request(RequestCode.GET_BROKER_RUNTIME_INFO)
    with caplog.at_level(logging.WARNING, "ferrymq.acl"):
        for _ in range(3):
            resp = guard(_Peer(), req)  # type: ignore[arg-type]
            assert resp is not None and resp.code == ResponseCode.NO_PERMISSION and resp.opaque == req.opaque
        now[0] = 11.0
        guard(_Peer(), req)  # type: ignore[arg-type]
    said = "refused read broker runtime info (GET_BROKER_RUNTIME_INFO, request code 28) from 10.1.2.3"
    lines = [r for r in caplog.records if said in r.getMessage()]
    assert len(lines) == 2 and guard.refused == 4


def _acl_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return run_ferrymq("acl", *args)


def test_cli_checks_a_file_before_the_servers_reload_it(tmp_path: Path) -> None:
    good = tmp_path / "plain_acl.yml"
    write_rules(good, "globalWhiteRemoteAddresses: [10.0.0.*]\n" + RULES)
    out = _acl_cli("check", str(good), "--json")
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert doc["globalWhiteRemoteAddresses"] == ["10.0.0.*"]
    app = next(a for a in doc["accounts"] if a["accessKey"] == "appKey01")
    assert app["topicPerms"] == ["acl-hot=SUB", "acl-ro=SUB", "acl-rw=PUB|SUB"]
    assert app["groupPerms"] == ["acl-banned-g=DENY"] and app["defaultGroupPerm"] == "SUB"
    assert "secret" not in out.stdout.lower()
    table = _acl_cli("check", str(good))
    assert table.returncode == 0 and "2 accounts" in table.stdout
    bad = tmp_path / "bad.yml"
    write_rules(bad, RULES.replace("acl-ro=SUB", "acl-ro=READ"))
    refused = _acl_cli("check", str(bad), "--json")
    assert refused.returncode == 1
    assert "acl-ro" in json.loads(refused.stdout)["error"]["message"]


def test_cli_shows_that_an_admin_may_do_everything(tmp_path: Path) -> None:
    path = tmp_path / "plain_acl.yml"
    write_rules(path, RULES + """
  - accessKey: adminKey2
    secretKey: adminSecret2
    admin: true
    topicPerms: [acl-rw=SUB]
""")
    doc = json.loads(_acl_cli("check", str(path), "--json").stdout)
    allows = {a["accessKey"]: a["allowsAll"] for a in doc["accounts"]}
    # An admin listing topics is checked against its defaults for the others, as RocketMQ does.
    assert allows == {"adminKey1": True, "appKey01": False, "adminKey2": False}
    table = _acl_cli("check", str(path)).stdout
    admin_row = next(line for line in table.splitlines() if line.startswith("adminKey1"))
    assert admin_row.count("ALL (admin)") == 2 and "DENY" not in admin_row
    listed_row = next(line for line in table.splitlines() if line.startswith("adminKey2"))
    assert "ALL (admin)" not in listed_row and listed_row.count("DENY") == 2
