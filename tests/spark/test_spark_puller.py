"""The Spark reader's own pulls (`spark.puller`) against a real standalone broker: requests
pipelined on one socket and answered in whatever order the reader asks, a cancelled request's
answer dropped so the connection serves the next task, and a broken connection replaced."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

pytest.importorskip("pyarrow")
pytest.importorskip("pyspark")

from conftest import Standalone
from ferrymq import AdminClient, Message, Producer
from ferrymq.client.results import PullStatus
from ferrymq.common.record import decode_records
from ferrymq.spark import puller as P

TOPIC = "puller"


@pytest.fixture
def admin(standalone: Standalone) -> Iterator[AdminClient]:
    with AdminClient(standalone.namesrv) as client:
        client.create_topic(TOPIC, 1)
        with Producer("puller-test", standalone.namesrv) as producer:
            producer.send_batch([Message(TOPIC, b"m%d" % i) for i in range(300)])
        yield client
    P.close_connections()


def bodies(res: object) -> list[bytes]:
    return [m.body for m in decode_records(res.body, broker="")]  # type: ignore[attr-defined]


def test_pipelined_pulls_answer_in_any_order_and_cancelled_ones_are_dropped(
    admin: AdminClient,
) -> None:
    (mq,) = admin.message_queues(TOPIC)
    puller = P.BrokerPuller(admin, 10.0)
    first = puller.submit_pull_raw(mq, 0, 100)
    dropped = puller.submit_pull_raw(mq, 100, 100)
    third = puller.submit_pull_raw(mq, 200, 100)
    dropped.cancel()
    res3 = third.result()  # read past the other two answers: the first is kept, one dropped
    res1 = first.result()
    assert res3.status is PullStatus.FOUND and bodies(res3) == [b"m%d" % i for i in range(200, 300)]
    assert res1.next_begin_offset == 100 and bodies(res1) == [b"m%d" % i for i in range(100)]
    # The records are read where the answer was received (decode_frame's body_view): the
    # decoder copies them into columns, one copy fewer of every pulled byte.
    assert isinstance(res1.body, memoryview) and isinstance(res1.body.obj, bytearray)
    # The same connection serves the next task; the cancelled answer does not come back.
    again = puller.submit_pull_raw(mq, 100, 5)
    assert bodies(again.result()) == [b"m%d" % i for i in range(100, 105)]
    conn = P.connection(admin.broker_addr(mq), mq.broker_name, 10.0)
    assert not conn._waiting and not conn._arrived  # nothing left behind


def test_a_broken_connection_fails_the_pull_and_is_replaced(admin: AdminClient) -> None:
    (mq,) = admin.message_queues(TOPIC)
    puller = P.BrokerPuller(admin, 10.0)
    pending = puller.submit_pull_raw(mq, 0, 10)
    conn = P.connection(admin.broker_addr(mq), mq.broker_name, 10.0)
    conn._sock.close()  # as a broker gone away would leave it
    with pytest.raises(OSError):
        pending.result()
    assert conn.closed
    fresh = P.connection(admin.broker_addr(mq), mq.broker_name, 10.0)
    assert fresh is not conn
    assert bodies(puller.submit_pull_raw(mq, 0, 3).result()) == [b"m0", b"m1", b"m2"]


def test_a_broker_error_is_raised_as_the_client_raises_it(admin: AdminClient) -> None:
    from ferrymq.client.errors import BrokerError
    from ferrymq.common.message import MessageQueue

    (mq,) = admin.message_queues(TOPIC)
    puller = P.BrokerPuller(admin, 10.0)
    assert bodies(puller.submit_pull_raw(mq, 0, 1).result()) == [b"m0"]  # the broker is known
    with pytest.raises(BrokerError):
        puller.submit_pull_raw(MessageQueue("no-such-topic", mq.broker_name, 0), 0, 1).result()
    # The connection is still good for the next pull.
    assert bodies(puller.submit_pull_raw(mq, 0, 1).result()) == [b"m0"]
