"""Where a new push consumer (CONSUME_FROM_LAST_OFFSET) starts, with a real standalone broker:
at the first message of a young queue (the broker's answer, as RocketMQ's), at the end of one
whose first record is no longer "in memory"."""

from __future__ import annotations

from typing import Any

from scenario_util import FAST_CONSUMER, FAST_PRODUCER, Recorder

from ferrymq import AdminClient, ConsumeFromWhere, ConsumeStatus, Message, Producer, PushConsumer
from waits import wait_until


def _consumer(namesrv: str, group: str, topic: str, rec: Recorder) -> PushConsumer:
    c = PushConsumer(group, namesrv, consume_from_where=ConsumeFromWhere.LAST_OFFSET, **FAST_CONSUMER)
    c.subscribe(topic)
    c.register_listener(lambda msgs, ctx: rec.add(msgs) or ConsumeStatus.CONSUME_SUCCESS)
    return c


def _started_everywhere(admin: AdminClient, group: str, topic: str) -> bool:
    """The group's first pull of every queue of the topic committed where it starts."""
    try:
        mqs = admin.message_queues(topic)
    except Exception:  # no route yet
        return False
    return bool(mqs) and all(admin.query_consumer_offset(group, mq) >= 0 for mq in mqs)


def test_a_consumer_subscribed_before_its_topic_exists_gets_the_first_message(standalone: Any) -> None:
    admin = AdminClient(standalone.namesrv)
    rec = Recorder()
    consumer = _consumer(standalone.namesrv, "g-early", "born-later", rec).start()
    try:
        with Producer("p-early", standalone.namesrv, **FAST_PRODUCER) as producer:
            producer.send(Message("born-later", b"first"))  # creates the topic
            # The consumer learns of the queues after "first" arrived, and starts them.
            wait_until(lambda: _started_everywhere(admin, "g-early", "born-later"), what="the queues started")
            producer.send(Message("born-later", b"second"))
            wait_until(lambda: b"second" in rec.bodies(), what="the second message")
    finally:
        consumer.shutdown()
    assert sorted(rec.bodies()) == [b"first", b"second"]
    admin.close()


def test_a_queue_whose_first_record_left_memory_starts_at_the_end(standalone: Any) -> None:
    admin = AdminClient(standalone.namesrv)
    # 0 % of physical memory: every record is as far from the log's end as an old queue's.
    admin.update_broker_config({"accessMessageInMemoryMaxRatio": "0"})
    admin.create_topic("aged", 1)
    rec = Recorder()
    with Producer("p-aged", standalone.namesrv, **FAST_PRODUCER) as producer:
        for i in range(3):
            producer.send(Message("aged", b"old%d" % i))
        consumer = _consumer(standalone.namesrv, "g-aged", "aged", rec).start()
        try:
            wait_until(lambda: _started_everywhere(admin, "g-aged", "aged"), what="the queue started")
            producer.send(Message("aged", b"new"))
            wait_until(lambda: b"new" in rec.bodies(), what="the new message")
        finally:
            consumer.shutdown()
    assert rec.bodies() == [b"new"]
    admin.close()
