"""Lowering a topic's read queues through `ferrymq topic create`: refused by the broker while
the queues it removes hold messages some group has not consumed, unless forced; the safe path
(write queues first, read queues once drained) goes through."""

from __future__ import annotations

from typing import Any

from cli_util import ferrymq, json_error, json_out

from ferrymq import AdminClient, Message, Producer
from ferrymq.common.message import MessageQueue


def _fill(server: Any, topic: str, queues: int, per_queue: int) -> None:
    with Producer("p-shrink", server.namesrv) as producer:
        for q in range(queues):
            for i in range(per_queue):
                producer.send_to_queue(Message(topic, f"{q}:{i}".encode()),
                                       MessageQueue(topic, "broker-a", q))


def _queues(server: Any, topic: str) -> list[int]:
    with AdminClient(server.namesrv) as admin:
        return sorted(q.queue_id for q in admin.topic_status(topic))


def test_read_queue_shrink_is_refused_until_every_group_consumed_the_removed_queues(
    standalone: Any,
) -> None:
    ferrymq(standalone, "topic", "create", "shrink", "--queues", "4")
    _fill(standalone, "shrink", 4, 5)

    # The command: exit 1, naming how many messages and where; nothing changes.
    plain = ferrymq(standalone, "topic", "create", "shrink", "--queues", "2", check=False)
    assert plain.returncode == 1, (plain.stdout, plain.stderr)
    assert "strand 10 unconsumed message(s) (queue 2: 5, queue 3: 5)" in plain.stderr
    assert _queues(standalone, "shrink") == [0, 1, 2, 3]

    # A group that consumed everything but a second one that read none of queues 2-3: still
    # refused (messages count until every group of the topic is past them).
    with AdminClient(standalone.namesrv) as admin:
        for q in range(4):
            admin.update_consumer_offset("g-done", MessageQueue("shrink", "broker-a", q), 5)
        for q in range(2):
            admin.update_consumer_offset("g-half", MessageQueue("shrink", "broker-a", q), 5)
        admin.update_consumer_offset("g-half", MessageQueue("shrink", "broker-a", 3), 2)
        error = json_error(standalone, "topic", "create", "shrink", "--queues", "2")
        assert error["type"] == "BrokerError"
        assert "strand 8 unconsumed message(s) (queue 2: 5, queue 3: 3)" in error["message"]

        # The safe path: fewer write queues first (read queues kept), then, once drained,
        # fewer read queues.
        done = json_out(standalone, "topic", "create", "shrink", "--read-queues", "4",
                        "--write-queues", "2")
        assert (done["read_queues"], done["write_queues"]) == (4, 2)
        for q in (2, 3):
            admin.update_consumer_offset("g-half", MessageQueue("shrink", "broker-a", q), 5)
    done = json_out(standalone, "topic", "create", "shrink", "--queues", "2")
    assert (done["read_queues"], done["write_queues"]) == (2, 2)
    assert _queues(standalone, "shrink") == [0, 1]


def test_force_lowers_the_read_queues_anyway_and_read_below_write_needs_it(
    standalone: Any,
) -> None:
    ferrymq(standalone, "topic", "create", "shrink-f", "--queues", "4")
    _fill(standalone, "shrink-f", 4, 1)
    assert json_error(standalone, "topic", "create", "shrink-f", "--queues", "1")["type"] == "BrokerError"
    done = json_out(standalone, "topic", "create", "shrink-f", "--queues", "1", "--force")
    assert (done["read_queues"], done["write_queues"]) == (1, 1)
    assert _queues(standalone, "shrink-f") == [0]

    # Fewer read than write queues strands every message sent to the others: refused by the
    # command before it asks the broker, unless forced.
    error = json_error(standalone, "topic", "create", "shrink-g", "--read-queues", "2",
                       "--write-queues", "4")
    assert "queues 2-3 would never be consumed" in error["message"]
    assert "shrink-g" not in json_out(standalone, "topic", "list")
    done = json_out(standalone, "topic", "create", "shrink-g", "--read-queues", "2",
                    "--write-queues", "4", "--force")
    assert (done["read_queues"], done["write_queues"]) == (2, 4)
