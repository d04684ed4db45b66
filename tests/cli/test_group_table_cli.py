"""`ferrymq group list|update|delete` (the brokers' subscription group table), run in this
process against the shared standalone."""

from __future__ import annotations

from typing import Any

from cli_util import ferrymq_in_process, json_in_process


def test_group_update_list_and_delete(standalone: Any) -> None:
    ns = standalone.namesrv
    updated = json_in_process(ns, "group", "update", "cli-sg", "--retry-max-times", "3",
                              "--consume-enable", "false")
    assert updated["group"] == "cli-sg" and updated["changed"] == {"consume_enable": False, "retry_max_times": 3}
    [row] = updated["brokers"]
    assert (row["broker"], row["retry_max_times"], row["consume_enable"]) == ("broker-a", 3, False)
    # A second update changes only what it names.
    json_in_process(ns, "group", "update", "cli-sg", "--retry-queue-nums", "2", "--broker", "broker-a")
    listed = {r["group"]: r for r in json_in_process(ns, "group", "list")}
    assert {k: listed["cli-sg"][k] for k in ("retry_max_times", "consume_enable", "retry_queue_nums",
                                              "consume_broadcast_enable")} == {
        "retry_max_times": 3, "consume_enable": False, "retry_queue_nums": 2, "consume_broadcast_enable": True}
    code, out, _ = ferrymq_in_process(ns, "group", "list")
    assert code == 0 and "cli-sg" in out
    # Refused settings say why; an update naming nothing is a usage error.
    bad = json_in_process(ns, "group", "update", "cli-sg", "--retry-queue-nums", "0", exit_code=1)
    assert "retryQueueNums" in bad["error"]["message"]
    assert ferrymq_in_process(ns, "group", "update", "cli-sg")[0] == 2
    # A consumer of the disabled group is told why it gets nothing, and what turns it back on.
    json_in_process(ns, "topic", "create", "cli-sg-topic", "--queues", "1")
    refused = json_in_process(ns, "consume", "cli-sg-topic", "--group", "cli-sg", "--count", "1",
                              "--timeout", "4", exit_code=1)["error"]["message"]
    assert "NO_PERMISSION: subscription group no permission, cli-sg" in refused, refused
    assert "ferrymq group update cli-sg --consume-enable true" in refused, refused
    deleted = json_in_process(ns, "group", "delete", "cli-sg")
    assert deleted == {"group": "cli-sg", "brokers": ["broker-a"]}
    assert "cli-sg" not in {r["group"] for r in json_in_process(ns, "group", "list")}
