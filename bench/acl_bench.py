"""ACL on against off, in the same run: two `ferrymq standalone` servers, one checking a
plain_acl.yml (every request signed by the clients, verified by the broker: HMAC-SHA1 over the
header fields and the body, then the account's permissions), one without.

- produce throughput of 1 KiB messages (send_async with a window of 512),
- consume-with-ack throughput (push consumer, listener batches of 32).

Runs alternate between the two servers so drift on the machine hits both alike. `value` is
ACL on, the peer ACL off; the ratio is the share of throughput ACL keeps. On a shared machine
the throughput runs are noisy, so the CPU cost of ACL is also measured directly: a client
signing a SEND_MESSAGE_V2 request with a 1 KiB body, and the broker's whole check of it."""

from __future__ import annotations

import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.e2e_bench import ferrymq_consume, ferrymq_produce

from ferrymq import AdminClient
from ferrymq.acl import Credentials, check_request, parse_rules, sign
from ferrymq.common.codes import RequestCode
from ferrymq.embedded import standalone
from ferrymq.remoting import RemotingCommand

BODY = b"x" * 1024
RUNS = 5
CREDS: dict[str, Any] = {"access_key": "benchKey01", "secret_key": "benchSecret01"}
RULES = """
accounts:
  - accessKey: benchKey01
    secretKey: benchSecret01
    defaultTopicPerm: DENY
    defaultGroupPerm: SUB
    topicPerms: [acl-bench=PUB|SUB]
  - accessKey: benchAdmin1
    secretKey: benchAdmin1Secret
    admin: true
"""
ADMIN: dict[str, Any] = {"access_key": "benchAdmin1", "secret_key": "benchAdmin1Secret"}


def _send_request() -> RemotingCommand:
    # The header fields a Java producer's SEND_MESSAGE_V2 carries.
    ext = {"a": "acl-bench-p", "b": "acl-bench", "c": "TBW102", "d": "4", "e": "1", "f": "0",
           "g": str(int(time.time() * 1000)), "h": "0", "i": "UNIQ_KEY\x01AC110001000018B4AAC2\x02WAIT\x01true\x02",
           "j": "0", "k": "false", "m": "false", "n": "broker-a"}
    return RemotingCommand.request(RequestCode.SEND_MESSAGE_V2, ext_fields=ext, body=BODY)


def _per_op_us(fn: Any, n: int) -> float:
    began = time.perf_counter()
    for _ in range(n):
        fn()
    return (time.perf_counter() - began) / n * 1e6


def cpu_costs(quick: bool) -> list[dict[str, Any]]:
    n = 20_000 if quick else 100_000
    creds = Credentials(CREDS["access_key"], CREDS["secret_key"])
    rules = parse_rules(RULES)
    signed = sign(_send_request(), creds)
    assert check_request(rules, signed, "127.0.0.1") is None
    sign_runs = [_per_op_us(lambda: sign(_send_request(), creds), n) for _ in range(RUNS)]
    build_runs = [_per_op_us(_send_request, n) for _ in range(RUNS)]
    check_runs = [_per_op_us(lambda: check_request(rules, signed, "127.0.0.1"), n) for _ in range(RUNS)]
    signing = [s - b for s, b in zip(sign_runs, build_runs, strict=True)]
    return [
        {"workload": "acl", "measurement": "client: sign a SEND_MESSAGE_V2 with a 1 KiB body", "unit": "µs",
         "value": statistics.median(signing), "runs": signing},
        {"workload": "acl", "measurement": "broker: check a signed SEND_MESSAGE_V2 (signature, account, PUB)",
         "unit": "µs", "value": statistics.median(check_runs), "runs": check_runs},
    ]


def run(quick: bool) -> list[dict[str, Any]]:
    n = 5_000 if quick else 30_000
    results: dict[tuple[str, bool], list[float]] = {}
    with tempfile.TemporaryDirectory(prefix="ferrymq-acl-bench-") as tmp:
        home = Path(tmp)
        acl = home / "plain_acl.yml"
        acl.write_text(RULES)
        with standalone(home / "on", "--acl-file", str(acl)) as on, standalone(home / "off") as off:
            servers = {True: (on.namesrv, CREDS), False: (off.namesrv, {})}
            for acl_on, (namesrv, _) in servers.items():
                with AdminClient(namesrv, **(ADMIN if acl_on else {})) as admin:
                    admin.create_topic("acl-bench", 4)
            for i in range(RUNS):
                for acl_on in (i % 2 == 0, i % 2 != 0):
                    namesrv, creds = servers[acl_on]
                    results.setdefault(("produce", acl_on), []).append(
                        ferrymq_produce(namesrv, "acl-bench", n, group="acl-bench-p", **creds))
                    results.setdefault(("consume", acl_on), []).append(
                        ferrymq_consume(namesrv, "acl-bench", f"acl-bench-g{i}", n, 32, **creds))
    rows = cpu_costs(quick)
    for what, label in (("produce", "produce 1 KiB, send_async window 512"),
                        ("consume", "consume with ack, push consumer, batches of 32")):
        on_runs, off_runs = results[(what, True)], results[(what, False)]
        rows.append({"workload": "acl", "measurement": f"{label}, ACL on", "unit": "msg/s",
                     "value": statistics.median(on_runs), "runs": on_runs,
                     "peer_name": "ACL off", "peer_value": statistics.median(off_runs), "peer_runs": off_runs})
    return rows
