"""`ferrymq group list|update|delete` (the brokers' subscription group table), run in this
process against the shared standalone, and what its settings do to a consumer."""

from __future__ import annotations

from typing import Any

import pytest
from cli_util import ferrymq_at, json_at

from ferrymq import ConsumeFromWhere, ConsumeStatus, Message, MessageExt, Producer, PushConsumer
from waits import wait_until

pytestmark = pytest.mark.shared_standalone


def test_group_update_list_and_delete(standalone: Any) -> None:
    ns = standalone.namesrv
    updated = json_at(ns, "group", "update", "cli-sg", "--retry-max-times", "3",
                              "--consume-enable", "false")
    assert updated["group"] == "cli-sg" and updated["changed"] == {"consume_enable": False, "retry_max_times": 3}
    [row] = updated["brokers"]
    assert (row["broker"], row["retry_max_times"], row["consume_enable"]) == ("broker-a", 3, False)
    # A second update changes only what it names.
    json_at(ns, "group", "update", "cli-sg", "--retry-queue-nums", "2", "--broker", "broker-a")
    listed = {r["group"]: r for r in json_at(ns, "group", "list")}
    assert {k: listed["cli-sg"][k] for k in ("retry_max_times", "consume_enable", "retry_queue_nums",
                                              "consume_broadcast_enable")} == {
        "retry_max_times": 3, "consume_enable": False, "retry_queue_nums": 2, "consume_broadcast_enable": True}
    code, out, _ = ferrymq_at(ns, "group", "list")
    assert code == 0 and "cli-sg" in out
    # Refused settings say why; an update naming nothing is a usage error.
    bad = json_at(ns, "group", "update", "cli-sg", "--retry-queue-nums", "0", exit_code=1)
    assert "retryQueueNums" in bad["error"]["message"]
    assert ferrymq_at(ns, "group", "update", "cli-sg")[0] == 2
    # A consumer of the disabled group is told why it gets nothing, and what turns it back on.
    json_at(ns, "topic", "create", "cli-sg-topic", "--queues", "1")
    refused = json_at(ns, "consume", "cli-sg-topic", "--group", "cli-sg", "--count", "1",
                              "--timeout", "4", exit_code=1)["error"]["message"]
    assert "NO_PERMISSION: subscription group no permission, cli-sg" in refused, refused
    assert "ferrymq group update cli-sg --consume-enable true" in refused, refused
    # So is one whose topic is not readable.
    json_at(ns, "topic", "create", "cli-wo-topic", "--queues", "1")
    json_at(ns, "topic", "update", "cli-wo-topic", "--perm", "w")
    refused = json_at(ns, "consume", "cli-wo-topic", "--group", "cli-wo", "--count", "1",
                              "--timeout", "3", exit_code=1)["error"]["message"]
    assert "no queue of topic cli-wo-topic is readable" in refused, refused
    assert "topic update cli-wo-topic --perm rw" in refused, refused
    deleted = json_at(ns, "group", "delete", "cli-sg")
    assert deleted == {"group": "cli-sg", "brokers": ["broker-a"], "not_updated": []}
    assert "cli-sg" not in {r["group"] for r in json_at(ns, "group", "list")}
    # The group every tool reads with cannot be turned off or deleted (the tools would stop).
    for argv in (("update", "TOOLS_CONSUMER", "--consume-enable", "false"), ("delete", "TOOLS_CONSUMER")):
        err = json_at(ns, "group", *argv, exit_code=1)["error"]
        assert err["code_name"] == "INVALID_PARAMETER" and "ferrymq's tools" in err["message"], err
    listed = {r["group"]: r for r in json_at(ns, "group", "list")}
    assert listed["TOOLS_CONSUMER"]["consume_enable"] is True


def test_a_groups_retry_max_times_decides_a_push_consumers_dead_letter(standalone: Any) -> None:
    """A push consumer that sets no max_reconsume_times of its own follows the group's count."""
    ns = standalone.namesrv
    json_at(ns, "topic", "create", "cli-dlq-topic", "--queues", "1")
    json_at(ns, "group", "update", "cli-dlq", "--retry-max-times", "1")
    attempts: list[int] = []

    def listener(msgs: list[MessageExt], ctx: Any) -> ConsumeStatus:
        attempts.extend(m.reconsume_times for m in msgs)
        return ConsumeStatus.RECONSUME_LATER

    consumer = PushConsumer("cli-dlq", ns, consume_from_where=ConsumeFromWhere.FIRST_OFFSET,
                            rebalance_interval=0.3, route_refresh_interval=0.3, pull_suspend_timeout=1.0)
    consumer.subscribe("cli-dlq-topic")
    consumer.register_listener(listener)
    consumer.start()
    try:
        with Producer("cli-dlq-p", ns) as producer:
            producer.send(Message("cli-dlq-topic", b"always fails"))
        [dead] = wait_until(lambda: json_at(ns, "dlq", "list", "cli-dlq"), timeout=30,
                            what="the message in %DLQ%cli-dlq")
        # Delivered once and retried once (the group's 1), not the client's former 16 times.
        assert attempts == [0, 1], attempts
        assert dead["reconsume_times"] == 2, dead
    finally:
        consumer.shutdown()
